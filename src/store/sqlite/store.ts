/**
 * The embedded store: one SQLite file shared by every process on one host.
 *
 * Durability: WAL with synchronous=FULL, so a transaction is on disk when commit returns
 * (invariant 1). Every write is one `BEGIN IMMEDIATE` transaction, which serializes writers
 * across processes; readers are never blocked (WAL). The lease clock is the host clock, shared
 * by every process on the host (DESIGN §3); tests inject one.
 */
import { existsSync, statSync } from 'node:fs';
import Database from 'better-sqlite3';
import {
  SchemaTooNew,
  StoreCorrupt,
  StoreFull,
  StoreNotDurable,
  StoreReadOnly,
  StoreUnavailable,
} from '../../core/errors.js';
import { jsonOrNull } from '../rows.js';
import type {
  ActivityParams,
  ActivityStats,
  JobSearchPage,
  JobSearchParams,
  ApprovalDecide,
  ApprovalDecideResult,
  ApprovalStats,
  AttemptExpire,
  AttemptFinish,
  ClaimedAttempt,
  DispatchMarkResult,
  EventInsert,
  ExpiredAttempt,
  FlowClaimParams,
  FlowClaimResult,
  HeartbeatResult,
  JobCancelResult,
  JobDetail,
  JobInsert,
  JobInsertResult,
  JobListParams,
  JobPruneParams,
  JobPruneResult,
  JobRecord,
  JobStateRow,
  JobTransition,
  LeaseRef,
  PauseRecord,
  ScheduleRecord,
  Store,
  StoreCapabilities,
  StoreCommit,
  StoreStats,
  TokenInsert,
  TokenRecord,
} from '../store.js';
import { CommitObservers } from '../commit-observers.js';
import { SqliteWriter } from './commit.js';
import { JobInserter } from './insert.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, addColumns, rewriteTables } from './schema.js';
import { approvalDecide, approvalExpireMany, approvalList, approvalStats } from './approvals.js';
import { tokenFind, tokenInsert, tokenList, tokenRevoke } from './tokens.js';
import { jobChangesSubscribe, jobStatesRead } from './outcome-notify.js';
import { jobPruneMany as pruneJobs, sqliteVacuum } from './retention.js';
import { WakeChannel, wakeDirectory } from './notify.js';
import type { SqliteHandle } from './handle.js';
import * as attempts from './attempts.js';
import * as flow from './flow.js';
import * as moves from './moves.js';
import * as reads from './reads.js';

export interface SqliteStoreOptions {
  /** File path, or `:memory:` (one process only). */
  path: string;
  /** How long a writer waits for another process's write transaction before failing. */
  busyTimeoutMs?: number;
  /** The store's clock (ms since epoch). Default `Date.now`; tests move it. */
  clock?: () => number;
  /** How often a subscription checks `data_version` (default `WORK_CHECK_INTERVAL_MS`). */
  workCheckIntervalMs?: number;
  /**
   * With `path: ':memory:'`: start from this database image (`serialize()` of another store)
   * instead of an empty one. The simulator opens each run from one migrated image, and takes
   * its backups and restores with it.
   */
  image?: Buffer;
}

export const DEFAULT_BUSY_TIMEOUT_MS = 10_000;
/**
 * How often a subscribed store checks `PRAGMA data_version`, which changes when another
 * connection (another process) commits. A read of the shared-memory header, so cheap that every
 * millisecond is affordable. The wake-up sockets (notify.ts) are faster; this catches what
 * they cannot (a process that started less than a second ago, a platform without them).
 */
export const WORK_CHECK_INTERVAL_MS = 1;

/**
 * The page cache per connection, in KiB: 4 MiB, not better-sqlite3's 16. Every commit ends by
 * walking the whole cache (SQLite's B-tree balancing renumbers pages through the lock-byte page,
 * 262,145, and the cache then truncates past the database's end by scanning its hash table), so a
 * big cache costs every commit. A worker's pages are the right edges of a few B-trees and the
 * head of the claim index, far fewer than 1,000.
 */
const CACHE_KIB = 4_000;

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const;
  readonly location: string;
  readonly capabilities: StoreCapabilities = {
    clock: 'host',
    multiHost: false,
    crossProcessNotify: true,
    // Its claim is already an unsynced write in this process: a hand-off would save little.
    handOff: false,
  };
  private db: Database.Database | null = null;
  private readonly now: () => number;
  private readonly busyTimeoutMs: number;
  private stmtCache = new Map<string, Database.Statement>();
  private rawCache = new Map<string, Database.Statement>();
  /** Other processes' workers, woken when this process commits due work (see notify.ts). */
  private wakeChannel: WakeChannel | undefined;
  /** `workSubscribe` callbacks: woken by this store's own commits (other processes: `wake`). */
  private readonly localSubscribers = new Set<() => void>();
  private readonly commits = new CommitObservers();
  private readonly writer: SqliteWriter;
  private readonly inserter: JobInserter;
  /** What reads.ts, attempts.ts and moves.ts use of this store. */
  private readonly h: SqliteHandle;

  constructor(private readonly options: SqliteStoreOptions) {
    this.location = `sqlite:${options.path}`;
    this.now = options.clock ?? Date.now;
    this.busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    this.writer = new SqliteWriter({
      conn: () => this.conn(),
      isOpen: () => this.db !== null,
      stmt: (sql) => this.stmt(sql),
      classify: (err) => this.classifyWriteError(err),
      busyTimeoutMs: this.busyTimeoutMs,
      commits: this.commits,
      onNewWork: () => {
        this.wake()?.publish();
        for (const onWork of this.localSubscribers) onWork();
      },
    });
    this.h = {
      conn: () => this.conn(),
      stmt: (sql) => this.stmt(sql),
      rawStmt: (sql) => this.rawStmt(sql),
      now: () => this.now(),
      writer: this.writer,
      read: (fn) => this.read(fn),
      classify: (err) => this.classifyWriteError(err),
    };
    this.inserter = new JobInserter({
      writer: this.writer,
      now: () => this.now(),
      stmt: (sql) => this.stmt(sql),
      writeEvent: (job, e, at) => moves.writeEvent(this.h, job, e, at),
    });
  }

  // ---------------------------------------------------------------- lifecycle

  init(): Promise<void> {
    if (this.db) return Promise.resolve();
    let db: Database.Database;
    try {
      const { image, path } = this.options;
      db = new Database(image && path === ':memory:' ? image : path, {
        timeout: this.busyTimeoutMs,
      });
    } catch (err) {
      return Promise.reject(this.classifyOpenError(err));
    }
    try {
      // Reading the schema fails at once on a file that is not a database.
      db.pragma('schema_version');
      const mode = db.pragma('journal_mode = WAL', { simple: true }) as string;
      if (mode !== 'wal' && this.options.path !== ':memory:')
        throw new StoreNotDurable(
          `the store at ${this.location} cannot use write-ahead logging: SQLite kept ` +
            `journal_mode=${mode}. reckon needs WAL for durable commits that readers do not block. ` +
            `Use a named file on a local disk, in a directory reckon can write (for the -wal ` +
            `and -shm files beside it), not a temporary database or a network file system.`,
        );
      db.pragma('synchronous = FULL');
      db.pragma('foreign_keys = ON');
      db.pragma(`cache_size = -${CACHE_KIB}`);
      const check = db.pragma('quick_check', { simple: true }) as string;
      if (check !== 'ok')
        throw Object.assign(new Error(`quick_check: ${check}`), { code: 'SQLITE_CORRUPT' });
      this.db = db;
      this.migrate();
    } catch (err) {
      db.close();
      this.db = null;
      return Promise.reject(this.classifyOpenError(err));
    }
    return Promise.resolve();
  }

  private classifyOpenError(err: unknown): Error {
    if (
      err instanceof SchemaTooNew ||
      err instanceof StoreCorrupt ||
      err instanceof StoreReadOnly ||
      err instanceof StoreNotDurable
    )
      return err;
    const code = (err as { code?: string }).code ?? '';
    if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT'))
      return new StoreCorrupt(this.location, err);
    if (code === 'SQLITE_FULL') return new StoreFull(this.location, err);
    if (
      code.startsWith('SQLITE_READONLY') ||
      code === 'SQLITE_PERM' ||
      (code === 'SQLITE_CANTOPEN' && /readonly|read-only/i.test(String(err)))
    ) {
      return new StoreReadOnly(this.location, err);
    }
    // better-sqlite3 throws a bare TypeError, with no code, for a missing directory.
    if (err instanceof TypeError && /directory does not exist/.test(err.message)) {
      return new StoreUnavailable(
        `cannot open ${this.location}: its directory does not exist`,
        err,
      );
    }
    if (code.startsWith('SQLITE_CANTOPEN'))
      return new StoreUnavailable(
        `cannot open ${this.location}: ${String((err as Error).message)} (does the directory exist?)`,
        err,
      );
    return err instanceof Error ? err : new Error(String(err));
  }

  private migrate(): void {
    const db = this.conn();
    db.exec(
      `CREATE TABLE IF NOT EXISTS reckon_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
    );
    // IMMEDIATE: two processes starting at once migrate one after the other.
    db.transaction(() => {
      const current = this.currentVersion();
      if (current > LATEST_SCHEMA_VERSION)
        throw new SchemaTooNew(this.location, current, LATEST_SCHEMA_VERSION);
      for (const m of MIGRATIONS) {
        if (m.version <= current) continue;
        if (m.columns) addColumns(db, m.columns);
        if (m.sql) db.exec(m.sql);
        if (m.rewrites) rewriteTables(db, m.rewrites);
        db.prepare(
          'INSERT INTO reckon_migrations (version, name, applied_at) VALUES (?, ?, ?)',
        ).run(m.version, m.name, this.now());
      }
    }).immediate();
  }

  private currentVersion(): number {
    const row = this.conn().prepare('SELECT max(version) AS v FROM reckon_migrations').get() as {
      v: number | null;
    };
    return row.v ?? 0;
  }

  schemaVersion(): Promise<number> {
    return Promise.resolve(this.currentVersion());
  }

  /** The whole database as one image (a consistent snapshot), for `image` (see above). */
  serialize(): Buffer {
    return this.conn().serialize();
  }

  async close(): Promise<void> {
    // Writes already started are committed (or rejected) before the file closes.
    if (this.db) this.writer.flush({ wait: true });
    this.stmtCache.clear();
    this.rawCache.clear();
    this.writer.reset();
    this.db?.close();
    this.db = null;
    const wake = this.wakeChannel;
    this.wakeChannel = undefined;
    await wake?.close();
  }

  /** The cross-process wake-up channel of this file; undefined for a database in memory. */
  private wake(): WakeChannel | undefined {
    if (this.wakeChannel || this.options.path === ':memory:' || !this.db) return this.wakeChannel;
    const dir = wakeDirectory(this.options.path);
    if (dir) this.wakeChannel = new WakeChannel(dir);
    return this.wakeChannel;
  }

  clockNow(): Promise<number> {
    return Promise.resolve(this.now());
  }

  private conn(): Database.Database {
    if (!this.db) throw new StoreUnavailable(`${this.location} is closed`);
    return this.db;
  }

  private stmt(sql: string): Database.Statement {
    let s = this.stmtCache.get(sql);
    if (!s) {
      s = this.conn().prepare(sql);
      this.stmtCache.set(sql, s);
    }
    return s;
  }

  /**
   * A statement whose rows come back as arrays (columns in the order of the SELECT/RETURNING
   * list): better-sqlite3 builds an object per row with one slow property write per column,
   * which costs more than the query itself on the hot paths.
   */
  private rawStmt(sql: string): Database.Statement {
    let s = this.rawCache.get(sql);
    if (!s) {
      s = this.conn().prepare(sql).raw(true);
      this.rawCache.set(sql, s);
    }
    return s;
  }

  private read<T>(fn: () => T): Promise<T> {
    try {
      return Promise.resolve(fn());
    } catch (err) {
      return Promise.reject(this.classifyWriteError(err));
    }
  }

  private classifyWriteError(err: unknown): Error {
    const code = (err as { code?: string }).code ?? '';
    if (code.startsWith('SQLITE_READONLY')) return new StoreReadOnly(this.location, err);
    if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT'))
      return new StoreCorrupt(this.location, err);
    if (code === 'SQLITE_FULL') return new StoreFull(this.location, err);
    if (code.startsWith('SQLITE_BUSY'))
      return new StoreUnavailable(
        `${this.location} stayed locked by another writer for over ${this.busyTimeoutMs} ms`,
        err,
      );
    return err instanceof Error ? err : new Error(String(err));
  }

  // ---------------------------------------------------------------- row helpers

  private appendEvent(e: EventInsert & { fingerprint: string }, at: number): void {
    this.writer.event(
      e.jobId,
      e.attemptNo,
      e.fingerprint,
      e.kind,
      e.fromState ?? null,
      e.toState ?? null,
      e.actor,
      jsonOrNull(e.detail),
      at,
    );
  }

  // ---------------------------------------------------------------- jobs

  jobInsertMany(p: {
    jobs: JobInsert[];
    actor: string;
    transaction?: unknown;
  }): Promise<JobInsertResult[]> {
    return this.inserter.insertMany(p);
  }

  jobGet(p: { id: string }): Promise<JobDetail | null> {
    return reads.jobGet(this.h, p);
  }

  jobList(p: JobListParams): Promise<JobRecord[]> {
    return reads.jobList(this.h, p);
  }

  jobTransition(t: JobTransition): Promise<boolean> {
    return moves.jobTransition(this.h, t);
  }

  jobCancel(p: {
    id: string;
    actor: string;
    reason: string;
    by?: Record<string, unknown>;
  }): Promise<JobCancelResult | null> {
    return moves.jobCancel(this.h, p);
  }

  jobReconcileClaimMany(p: {
    operations: string[];
    limit: number;
    holdMs: number;
  }): Promise<ClaimedAttempt[]> {
    return attempts.jobReconcileClaimMany(this.h, p);
  }

  // ---------------------------------------------------------------- attempts

  attemptClaimMany(p: {
    ownerId: string;
    queues: string[];
    operations: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedAttempt[]> {
    return attempts.attemptClaimMany(this.h, p);
  }

  attemptDispatchMany(p: { leases: LeaseRef[] }): Promise<DispatchMarkResult[]> {
    return attempts.attemptDispatchMany(this.h, p);
  }

  attemptHeartbeatMany(p: { leases: LeaseRef[]; leaseMs: number }): Promise<HeartbeatResult[]> {
    return attempts.attemptHeartbeatMany(this.h, p);
  }

  attemptFinishMany(p: { finishes: AttemptFinish[] }): Promise<boolean[]> {
    return moves.attemptFinishMany(this.h, p);
  }

  attemptExpiredList(p: { skewMs: number; limit: number }): Promise<ExpiredAttempt[]> {
    return reads.attemptExpiredList(this.h, p);
  }

  attemptExpireMany(p: { expiries: AttemptExpire[]; skewMs: number }): Promise<boolean[]> {
    return moves.attemptExpireMany(this.h, p);
  }

  // ---------------------------------------------------------------- events and stats

  eventAppendMany(p: { events: EventInsert[] }): Promise<void> {
    return this.writer.write(() => {
      const now = this.now();
      const fingerprintOf = this.stmt('SELECT request_fingerprint FROM jobs WHERE id = ?').pluck();
      for (const e of p.events) {
        const fingerprint = fingerprintOf.get(e.jobId) as string | undefined;
        if (fingerprint === undefined) continue;
        this.appendEvent({ ...e, fingerprint }, now);
      }
    });
  }

  /**
   * Cross-process wake-ups without a server, two ways: a byte on this process's socket from a
   * process that committed due work (notify.ts: well under a millisecond), and `data_version`,
   * which moves when another connection commits (never for our own writes), checked every
   * `WORK_CHECK_INTERVAL_MS`: it catches whatever the sockets miss. Best effort, like every
   * subscription: workers still poll.
   */
  async workSubscribe(p: {
    queues: string[];
    onWork: () => void;
  }): Promise<{ close(): Promise<void> }> {
    let unsubscribe: (() => void) | undefined;
    try {
      unsubscribe = await this.wake()?.subscribe(p.onWork);
    } catch {
      // No socket here (a read-only temp directory…): data_version alone still wakes.
    }
    // Commits of this connection do not change data_version, nor reach our own socket.
    const local = () => p.onWork();
    this.localSubscribers.add(local);
    const version = this.conn().prepare('PRAGMA data_version').pluck();
    let last = version.get() as number;
    const timer = setInterval(() => {
      if (!this.db) return;
      const now = version.get() as number;
      if (now === last) return;
      last = now;
      p.onWork();
    }, this.options.workCheckIntervalMs ?? WORK_CHECK_INTERVAL_MS);
    timer.unref();
    return {
      close: () => {
        clearInterval(timer);
        this.localSubscribers.delete(local);
        unsubscribe?.();
        return Promise.resolve();
      },
    };
  }

  jobPruneMany(p: JobPruneParams): Promise<JobPruneResult> {
    return pruneJobs({ db: this.conn(), now: this.now, write: (fn) => this.writer.write(fn) }, p);
  }

  /** Shrinks the file after a prune (see retention.ts); the size counts the WAL too. */
  vacuum(): { bytesBefore: number; bytesAfter: number } {
    const size = (f: string) => (existsSync(f) ? statSync(f).size : 0);
    const path = this.options.path;
    return sqliteVacuum(this.conn(), () => size(path) + size(`${path}-wal`));
  }

  // ---------------------------------------------------------------- approvals (approvals.ts)

  jobApprovalList(p: { operation?: string; limit: number }): Promise<JobRecord[]> {
    return this.read(() => approvalList(this.conn(), p));
  }

  jobApprovalDecide(p: ApprovalDecide): Promise<ApprovalDecideResult> {
    // An approval that makes the job due wakes the workers (writePlan: a requeue).
    return this.writer.write(() => approvalDecide(this.h, p));
  }

  jobApprovalExpireMany(p: { limit: number; actor: string }): Promise<JobRecord[]> {
    return this.writer.write(() => approvalExpireMany(this.h, p));
  }

  jobApprovalStats(): Promise<ApprovalStats> {
    return this.read(() => approvalStats(this.conn(), this.now()));
  }

  /** Outcome waiters' reads and wake-ups: see outcome-notify.ts. */
  jobStateMany(p: { ids: string[] }): Promise<JobStateRow[]> {
    return this.read(() => jobStatesRead(this.conn(), p.ids));
  }

  jobChangeSubscribe(p: {
    onChange: (jobIds: string[]) => void;
  }): Promise<{ close(): Promise<void> }> {
    return jobChangesSubscribe({ db: this.conn(), isOpen: () => this.db !== null, ...p });
  }

  onCommit(fn: (c: StoreCommit) => void): () => void {
    return this.commits.add(fn);
  }

  statsGet(): Promise<StoreStats> {
    return reads.statsGet(this.h);
  }

  // ---------------------------------------------------------------- flow control (flow.ts)

  attemptClaimLimited(p: FlowClaimParams): Promise<FlowClaimResult> {
    return flow.attemptClaimLimited(this.h, p);
  }

  flowBackoff(p: { operation: string; rateKey: string; delayMs: number }): Promise<void> {
    return flow.flowBackoff(this.h, p);
  }

  pauseSet(p: {
    kind: 'queue' | 'operation';
    name: string;
    paused: boolean;
    actor: string;
    reason: string | null;
  }): Promise<boolean> {
    return flow.pauseSet(this.h, p);
  }

  pauseList(): Promise<PauseRecord[]> {
    return flow.pauseList(this.h);
  }

  scheduleRegister(p: {
    name: string;
    cron: string;
    timezone: string | null;
    operation: string;
  }): Promise<ScheduleRecord> {
    return flow.scheduleRegister(this.h, p);
  }

  scheduleAdvance(p: { name: string; lastSlotAt: number }): Promise<void> {
    return flow.scheduleAdvance(this.h, p);
  }

  scheduleList(): Promise<ScheduleRecord[]> {
    return flow.scheduleList(this.h);
  }

  jobSearch(p: JobSearchParams): Promise<JobSearchPage> {
    return reads.jobSearch(this.h, p);
  }

  statsActivityGet(p: ActivityParams): Promise<ActivityStats> {
    return reads.statsActivityGet(this.h, p);
  }

  // ---------------------------------------------------------------- tokens (tokens.ts)

  tokenInsert(p: TokenInsert): Promise<TokenRecord> {
    return this.writer.write(() => tokenInsert(this.conn(), p, this.now()));
  }

  tokenList(p: { includeRevoked?: boolean }): Promise<TokenRecord[]> {
    return this.read(() => tokenList(this.conn(), p));
  }

  tokenFind(p: { hash: string } | { id: string }): Promise<TokenRecord | null> {
    return this.read(() => tokenFind(this.conn(), p));
  }

  tokenRevoke(p: { name: string }): Promise<TokenRecord | null> {
    return this.writer.write(() => tokenRevoke(this.conn(), p, this.now()));
  }
}
