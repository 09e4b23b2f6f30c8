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
  assert,
} from '../../core/errors.js';
import type { ErrorInfo } from '../../core/errors.js';
import type { AttemptState, JobState } from '../../core/states.js';
import { assertTransitionLegal, leaseHolds, newLeaseToken } from '../rules.js';
import {
  attemptFromRow,
  eventFromRow,
  jobFromRow,
  jsonOrNull,
  newLeasedAttempt,
  statsFromRows,
  type AttemptRow,
  type EventRow,
  type JobRow,
} from '../rows.js';
import type {
  ApprovalDecide,
  ApprovalDecideResult,
  ApprovalStats,
  AttemptExpire,
  AttemptFinish,
  AttemptRecord,
  ClaimedAttempt,
  DispatchMarkResult,
  EventInsert,
  ExpiredAttempt,
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
  Store,
  StoreCapabilities,
  StoreCommit,
  StoreStats,
} from '../store.js';
import { CommitObservers } from '../commit-observers.js';
import {
  planCancel,
  planExpire,
  planFinish,
  planTransition,
  type EventWrite,
  type WriteSet,
} from '../plan/index.js';
import { SqliteWriter } from './commit.js';
import { JobInserter } from './insert.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, addColumns, rewriteTables } from './schema.js';
import { approvalDecide, approvalExpireMany, approvalList, approvalStats } from './approvals.js';
import { jobChangesSubscribe, jobStatesRead } from './outcome-notify.js';
import { jobPruneMany as pruneJobs, sqliteVacuum } from './retention.js';
import {
  CLAIM_LEASE,
  LIMIT_PARAM,
  SET_JOB_STATE_BY_ID,
  SET_JOB_STATE_BY_ROWID,
  claimArgs,
  claimProbeSql,
  claimSql,
  inList,
  jobFromTuple,
  type ClaimTuple,
} from './statements.js';
import { WakeChannel, wakeDirectory } from './notify.js';

export interface SqliteStoreOptions {
  /** File path, or `:memory:` (one process only). */
  path: string;
  /** How long a writer waits for another process's write transaction before failing. */
  busyTimeoutMs?: number;
  /** The store's clock (ms since epoch). Default `Date.now`; tests move it. */
  clock?: () => number;
  /** How often a subscription checks `data_version` (default `WORK_CHECK_INTERVAL_MS`). */
  workCheckIntervalMs?: number;
}

export const DEFAULT_BUSY_TIMEOUT_MS = 10_000;
/**
 * How often a subscribed store checks `PRAGMA data_version`, which changes when another
 * connection (another process) commits. A read of the shared-memory header, a few µs: at 1 ms it
 * costs well under 1% of a core. The wake-up sockets (notify.ts) are faster; this catches what
 * they cannot (a process that started less than a second ago, a platform without them).
 */
export const WORK_CHECK_INTERVAL_MS = 1;

/** The columns of `fenceView`, in order. */
type FenceRow = [
  attemptRowid: number,
  attemptState: AttemptState,
  leaseToken: string,
  leaseExpiresAt: number,
  dispatchedAt: number | null,
  fingerprint: string,
  ownerId: string,
  jobRowid: number,
  jobState: JobState,
  attemptCount: number,
  nextCheckAt: number | null,
];

/** An attempt and its job as the lease fence sees them (partial records: see `fenceView`). */
interface FenceView {
  job: JobRecord;
  attempt: AttemptRecord;
  jobRowid: number;
  attemptRowid: number;
}

/**
 * The page cache per connection, in KiB: 4 MiB, not better-sqlite3's 16. Every commit ends by
 * walking the whole cache (SQLite's B-tree balancing renumbers pages through the lock-byte page,
 * 262,145, and the cache then truncates past the database's end by scanning its hash table): ≈ 66
 * µs a commit with 16 MiB full, ≈ 4 % of a worker's time at concurrency 50. A worker's pages are
 * the right edges of a few B-trees and the head of the claim index, far fewer than 1,000.
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
    this.inserter = new JobInserter({
      writer: this.writer,
      now: () => this.now(),
      stmt: (sql) => this.stmt(sql),
      writeEvent: (job, e, at) => this.writeEvent(job, e, at),
    });
  }

  // ---------------------------------------------------------------- lifecycle

  init(): Promise<void> {
    if (this.db) return Promise.resolve();
    let db: Database.Database;
    try {
      db = new Database(this.options.path, { timeout: this.busyTimeoutMs });
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

  /** A read outside any transaction (WAL: it waits for no writer): does the query find a row? */
  private exists(sql: string, args: unknown[]): boolean {
    return this.stmt(sql).get(...args) !== undefined;
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

  private getJob(id: string): JobRecord | undefined {
    const row = this.stmt('SELECT * FROM jobs WHERE id = ?').get(id) as JobRow | undefined;
    return row && jobFromRow(row);
  }

  private getAttempt(jobId: string, attemptNo: number): AttemptRecord | undefined {
    const row = this.stmt('SELECT * FROM attempts WHERE job_id = ? AND attempt_no = ?').get(
      jobId,
      attemptNo,
    ) as AttemptRow | undefined;
    return row && attemptFromRow(row);
  }

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

  /**
   * The lease fence's view of an attempt and its job, in one narrow read (no JSON parsed): the
   * fields that `leaseHolds` and `assertFinishLegal` judge, plus the rowids to write by.
   */
  private fenceView(lease: LeaseRef): FenceView | undefined {
    const r = this.rawStmt(
      `SELECT a.rowid, a.state, a.lease_token, a.lease_expires_at, a.dispatched_at, a.request_fingerprint,
              a.owner_id, j.rowid, j.state, j.attempt_count, j.next_check_at
       FROM attempts a JOIN jobs j ON j.id = a.job_id
       WHERE a.job_id = ? AND a.attempt_no = ?`,
    ).get(lease.jobId, lease.attemptNo) as FenceRow | undefined;
    if (!r) return undefined;
    // Only the fields the shared rules read (see rules.ts): the rest of each record is not needed.
    const job = {
      id: lease.jobId,
      state: r[8],
      attemptCount: r[9],
      nextCheckAt: r[10],
      fingerprint: r[5],
    } as JobRecord;
    const attempt = {
      jobId: lease.jobId,
      attemptNo: lease.attemptNo,
      state: r[1],
      leaseToken: r[2],
      leaseExpiresAt: r[3],
      dispatchedAt: r[4],
      ownerId: r[6],
      fingerprint: r[5],
    } as AttemptRecord;
    return { job, attempt, jobRowid: r[7], attemptRowid: r[0] };
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
    return this.read(() => {
      const job = this.getJob(p.id);
      if (!job) return null;
      const attempts = (
        this.stmt('SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt_no').all(
          p.id,
        ) as AttemptRow[]
      ).map(attemptFromRow);
      const events = (
        this.stmt('SELECT * FROM events WHERE job_id = ? ORDER BY id').all(p.id) as EventRow[]
      ).map(eventFromRow);
      return { job, attempts, events };
    });
  }

  jobList(p: JobListParams): Promise<JobRecord[]> {
    return this.read(() => {
      const where: string[] = [];
      const args: unknown[] = [];
      if (p.states?.length) {
        where.push(`state IN (${p.states.map(() => '?').join(',')})`);
        args.push(...p.states);
      }
      const eq = (column: string, value: string | undefined, op = '=') => {
        if (value === undefined) return;
        where.push(`${column} ${op} ?`);
        args.push(value);
      };
      eq('queue', p.queue);
      eq('operation', p.operation);
      eq('id', p.beforeId, '<');
      const sql = `SELECT * FROM jobs ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY id DESC ${LIMIT_PARAM}`;
      return (
        this.conn()
          .prepare(sql)
          .all(...args, p.limit) as JobRow[]
      ).map(jobFromRow);
    });
  }

  jobTransition(t: JobTransition): Promise<boolean> {
    return this.writer.write(() => {
      assertTransitionLegal(t);
      const now = this.now();
      const job = this.getJob(t.jobId);
      const attempt =
        job && job.attemptCount > 0 ? this.getAttempt(job.id, job.attemptCount) : undefined;
      const w = planTransition({ job, attempt, t, now });
      if (!w) return false;
      this.writePlan({ job: job! }, w);
      return true;
    });
  }

  jobCancel(p: { id: string; actor: string; reason: string }): Promise<JobCancelResult | null> {
    return this.writer.write((): JobCancelResult | null => {
      const now = this.now();
      const job = this.getJob(p.id);
      if (!job) return null;
      const attempt =
        job.state === 'LEASED' ? this.getAttempt(job.id, job.attemptCount) : undefined;
      const plan = planCancel({ job, attempt, actor: p.actor, reason: p.reason, now });
      if ('why' in plan) return { cancelled: false, job, why: plan.why };
      this.writePlan({ job }, plan.write);
      return { cancelled: true, job: this.getJob(job.id)! };
    });
  }

  jobReconcileClaimMany(p: {
    operations: string[];
    limit: number;
    holdMs: number;
  }): Promise<ClaimedAttempt[]> {
    if (p.operations.length === 0 || p.limit <= 0) return Promise.resolve([]);
    const ops = inList(p.operations.length);
    const due = `FROM jobs INDEXED BY jobs_reconcile
      WHERE state = 'UNKNOWN' AND next_check_at <= ? AND operation IN (${ops})`;
    // Nothing due: answered by a read, without taking the write lock (see attemptClaimMany).
    if (this.writer.idle) {
      try {
        if (!this.exists(`SELECT 1 ${due} LIMIT 1`, [this.now(), ...p.operations]))
          return Promise.resolve([]);
      } catch (err) {
        return Promise.reject(this.classifyWriteError(err));
      }
    }
    return this.writer.write(() => {
      const now = this.now();
      const rows = this.stmt(
        `SELECT rowid AS _rowid, * ${due} ORDER BY next_check_at ${LIMIT_PARAM}`,
      ).all(now, ...p.operations, p.limit) as (JobRow & { _rowid: number })[];
      const hold = this.stmt('UPDATE jobs SET next_check_at = ? WHERE rowid = ?');
      const out: ClaimedAttempt[] = [];
      for (const row of rows) {
        // Holding the check (not a lease: a lookup changes nothing) keeps other reconcilers off it.
        hold.run(now + p.holdMs, row._rowid);
        row.next_check_at = now + p.holdMs;
        const job = jobFromRow(row);
        const attempt = this.getAttempt(job.id, job.attemptCount);
        assert(attempt, `UNKNOWN job ${job.id} has its attempt ${job.attemptCount}`);
        out.push({ job, attempt });
      }
      return out;
    });
  }

  // ---------------------------------------------------------------- attempts

  attemptClaimMany(p: {
    ownerId: string;
    queues: string[];
    operations: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedAttempt[]> {
    if (p.queues.length === 0 || p.operations.length === 0 || p.limit <= 0)
      return Promise.resolve([]);
    // Nothing due: a read answers, and the write lock is not taken, so an idle worker (in this
    // or another process) does not serialize the writers. Skipped while writes of this process
    // are queued (an enqueue among them may be what this claim is for).
    const queues = p.queues.length === 1 ? p.queues : [...new Set(p.queues)];
    if (this.writer.idle) {
      try {
        if (
          !this.exists(claimProbeSql(queues.length, p.operations.length), [
            ...queues,
            this.now(),
            ...p.operations,
          ])
        )
          return Promise.resolve([]);
      } catch (err) {
        return Promise.reject(this.classifyWriteError(err));
      }
    }
    return this.writer.write(
      () => {
        const now = this.now();
        const leaseExpiresAt = now + p.leaseMs;
        // Read in claim order, then leased one by one by rowid: no RETURNING (SQLite gathers
        // returned rows in an ephemeral table) and no `rowid IN (…)` set to build.
        const rows = this.rawStmt(claimSql(queues.length, p.operations.length)).all(
          claimArgs(now, queues, p.operations, p.limit),
        ) as ClaimTuple[];
        if (rows.length === 0) return [];
        const lease = this.stmt(CLAIM_LEASE);
        const insertAttempt = this.stmt(
          `INSERT INTO attempts (job_id, attempt_no, request_key, request_fingerprint, state, owner_id, lease_token, leased_at, lease_expires_at)
         VALUES (?, ?, ?, ?, 'LEASED', ?, ?, ?, ?)`,
        );
        const detail = `{"leaseMs":${JSON.stringify(p.leaseMs)}}`;
        const out: ClaimedAttempt[] = new Array<ClaimedAttempt>(rows.length);
        for (let i = 0; i < rows.length; i++) {
          const r = rows[i]!;
          assert(lease.run(now, r[25]).changes === 1, `job ${r[0]} changed between read and lease`);
          // The row as leased.
          r[8] = 'LEASED';
          r[12] = now;
          r[14] = r[14] + 1;
          r[18] = null;
          const job = jobFromTuple(r);
          const attemptNo = job.attemptCount;
          const token = newLeaseToken();
          insertAttempt.run(
            job.id,
            attemptNo,
            job.requestKey,
            job.fingerprint,
            p.ownerId,
            token,
            now,
            leaseExpiresAt,
          );
          this.writer.event(
            job.id,
            attemptNo,
            job.fingerprint,
            'leased',
            'QUEUED',
            'LEASED',
            p.ownerId,
            detail,
            now,
          );
          out[i] = {
            job,
            attempt: newLeasedAttempt(job, {
              ownerId: p.ownerId,
              leaseToken: token,
              leasedAt: now,
              leaseExpiresAt,
            }),
          };
        }
        return out;
      },
      // Acted on only through the dispatch marker, a synced write after it (see `write`).
      { unsynced: true },
    );
  }

  attemptDispatchMany(p: { leases: LeaseRef[] }): Promise<DispatchMarkResult[]> {
    if (p.leases.length === 0) return Promise.resolve([]);
    return this.writer.write(() => {
      const now = this.now();
      const mark = this.rawStmt(
        // Every fence of invariant 3 in one conditional write: token, attempt LEASED and not
        // expired on the store clock, no marker yet, and the job still on this attempt.
        `UPDATE attempts SET dispatched_at = ?
         WHERE job_id = ? AND attempt_no = ? AND lease_token = ? AND state = 'LEASED'
           AND lease_expires_at > ? AND dispatched_at IS NULL
           AND EXISTS (SELECT 1 FROM jobs WHERE id = ? AND state = 'LEASED' AND attempt_count = ?)
         RETURNING lease_expires_at, owner_id, request_fingerprint`,
      );
      return p.leases.map((lease): DispatchMarkResult => {
        const r = mark.get(
          now,
          lease.jobId,
          lease.attemptNo,
          lease.leaseToken,
          now,
          lease.jobId,
          lease.attemptNo,
        ) as [leaseExpiresAt: number, ownerId: string, fingerprint: string] | undefined;
        if (r) {
          this.writer.event(
            lease.jobId,
            lease.attemptNo,
            r[2],
            'dispatched',
            null,
            null,
            r[1],
            null,
            now,
          );
          return { ok: true, dispatchedAt: now, leaseExpiresAt: r[0] };
        }
        // It did not apply: say why, judged as before by the shared rules.
        const v = this.fenceView(lease);
        if (!v || !leaseHolds(v.job, v.attempt, lease)) return { ok: false, reason: 'lease-lost' };
        if (v.attempt.leaseExpiresAt <= now) return { ok: false, reason: 'lease-expired' };
        assert(
          v.attempt.dispatchedAt === null,
          `job ${lease.jobId} attempt ${lease.attemptNo} dispatched twice`,
        );
        assert(
          false,
          `job ${lease.jobId} attempt ${lease.attemptNo}: its fence holds but its marker did not apply`,
        );
      });
    });
  }

  attemptHeartbeatMany(p: { leases: LeaseRef[]; leaseMs: number }): Promise<HeartbeatResult[]> {
    if (p.leases.length === 0) return Promise.resolve([]);
    return this.writer.write(() => {
      const now = this.now();
      const extend = this.stmt(
        `UPDATE attempts SET lease_expires_at = ?
         WHERE job_id = ? AND attempt_no = ? AND lease_token = ? AND state = 'LEASED' AND lease_expires_at > ?`,
      );
      const expiresAt = now + p.leaseMs;
      return p.leases.map((lease): HeartbeatResult => {
        const r = extend.run(expiresAt, lease.jobId, lease.attemptNo, lease.leaseToken, now);
        return r.changes === 1
          ? { lease, ok: true, leaseExpiresAt: expiresAt }
          : { lease, ok: false, leaseExpiresAt: null };
      });
    });
  }

  attemptFinishMany(p: { finishes: AttemptFinish[] }): Promise<boolean[]> {
    if (p.finishes.length === 0) return Promise.resolve([]);
    return this.writer.write(() => {
      const now = this.now();
      return p.finishes.map((f) => {
        // The fence read first (one join, both rowids), then both rows written by rowid: cheaper
        // than a conditional UPDATE of the attempt followed by the job's by id.
        const v = this.fenceView(f.lease);
        const w = planFinish({ job: v?.job, attempt: v?.attempt, finish: f, now });
        if (!w) return false;
        this.writePlan(v!, w);
        return true;
      });
    });
  }

  /**
   * Writes what a plan decided for a locked job: the attempt's end (by rowid when the fence
   * read it, fenced on its token) or resolution, the job's columns, the events, a wake-up.
   */
  private writePlan(
    at: { job: Pick<JobRecord, 'id' | 'fingerprint'>; jobRowid?: number; attemptRowid?: number },
    w: WriteSet,
  ): void {
    const jobId = at.job.id;
    const e = w.attemptEnd;
    if (e && at.attemptRowid !== undefined)
      this.stmt(
        `UPDATE attempts SET state = ?, finished_at = ?, result_json = ?, error_json = ?, reason = ?
         WHERE rowid = ? AND lease_token = ? AND state = 'LEASED'`,
      ).run(
        e.state,
        e.finishedAt,
        e.resultJson,
        e.errorJson,
        e.reason,
        at.attemptRowid,
        e.leaseToken,
      );
    else if (e)
      this.stmt(
        `UPDATE attempts SET state = ?, finished_at = ?, result_json = ?, error_json = ?, reason = ?
         WHERE job_id = ? AND attempt_no = ? AND lease_token = ? AND state = 'LEASED'`,
      ).run(
        e.state,
        e.finishedAt,
        e.resultJson,
        e.errorJson,
        e.reason,
        jobId,
        e.attemptNo,
        e.leaseToken,
      );
    const r = w.resolution;
    if (r)
      this.stmt(
        `UPDATE attempts SET resolution = ?, resolution_source = ?, resolution_evidence_json = ?, resolved_at = ?
         WHERE job_id = ? AND attempt_no = ? AND state = 'UNKNOWN' AND resolution IS NULL`,
      ).run(r.kind, r.source, r.evidenceJson, r.resolvedAt, jobId, r.attemptNo);
    const j = w.job;
    this.stmt(at.jobRowid !== undefined ? SET_JOB_STATE_BY_ROWID : SET_JOB_STATE_BY_ID).run(
      j.state,
      j.updatedAt,
      j.runAt,
      j.nextCheckAt,
      j.lookupFailures,
      j.resultJson,
      j.errorJson,
      j.finishedAt,
      at.jobRowid ?? jobId,
    );
    if (w.requeue) this.writer.newWork = true;
    for (const ev of w.events) this.writeEvent(at.job, ev, j.updatedAt);
  }

  private writeEvent(job: Pick<JobRecord, 'id' | 'fingerprint'>, e: EventWrite, at: number): void {
    this.writer.event(
      job.id,
      e.attemptNo,
      job.fingerprint,
      e.kind,
      e.fromState,
      e.toState,
      e.actor,
      e.detailJson,
      at,
    );
  }

  attemptExpiredList(p: { skewMs: number; limit: number }): Promise<ExpiredAttempt[]> {
    return this.read(() => {
      const now = this.now();
      const rows = this.stmt(
        `SELECT * FROM attempts WHERE state = 'LEASED' AND lease_expires_at + ? < ? ORDER BY lease_expires_at ${LIMIT_PARAM}`,
      ).all(p.skewMs, now, p.limit) as AttemptRow[];
      return rows.map((r) => ({ attempt: attemptFromRow(r), job: this.getJob(r.job_id)! }));
    });
  }

  attemptExpireMany(p: { expiries: AttemptExpire[]; skewMs: number }): Promise<boolean[]> {
    if (p.expiries.length === 0) return Promise.resolve([]);
    return this.writer.write(() => {
      const now = this.now();
      return p.expiries.map((e) => {
        // Judged again under the write lock: a second reclaimer, or a late heartbeat, finds nothing to do.
        const v = this.fenceView(e.lease);
        const w = planExpire({
          job: v?.job,
          attempt: v?.attempt,
          expire: e,
          skewMs: p.skewMs,
          now,
        });
        if (!w) return false;
        this.writePlan(v!, w);
        return true;
      });
    });
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
    return this.writer.write(() => {
      const r = approvalDecide(this.conn(), p, this.now());
      if (r.ok && r.job.state === 'QUEUED') this.writer.newWork = true;
      return r;
    });
  }

  jobApprovalExpireMany(p: {
    limit: number;
    actor: string;
    error: ErrorInfo;
  }): Promise<JobRecord[]> {
    return this.writer.write(() => approvalExpireMany(this.conn(), p, this.now()));
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
    return this.read(() => {
      const now = this.now();
      const counts = this.stmt(
        'SELECT queue, state, count(*) AS n FROM jobs GROUP BY queue, state',
      ).all() as { queue: string; state: JobState; n: number }[];
      const oldest = this.stmt(
        `SELECT queue, min(run_at) AS t FROM jobs WHERE state = 'QUEUED' AND run_at <= ? GROUP BY queue`,
      ).all(now) as { queue: string; t: number }[];
      const byOperation = this.stmt(
        `SELECT operation, sum(state = 'UNKNOWN') AS unknown, sum(state = 'NEEDS_REVIEW') AS needs_review
         FROM jobs WHERE state IN ('UNKNOWN','NEEDS_REVIEW') GROUP BY operation`,
      ).all() as { operation: string; unknown: number; needs_review: number }[];
      const expired = this.stmt(
        `SELECT count(*) AS n FROM attempts WHERE state = 'LEASED' AND lease_expires_at <= ?`,
      ).get(now) as { n: number };
      return statsFromRows({ now, counts, oldest, byOperation, expired: expired.n });
    });
  }
}
