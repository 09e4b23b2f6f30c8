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
  InvalidInput,
  RequestKeyConflict,
  SchemaTooNew,
  StoreCorrupt,
  StoreReadOnly,
  StoreUnavailable,
  assert,
} from '../../core/errors.js';
import type { ErrorInfo } from '../../core/errors.js';
import type { Json } from '../../core/json.js';
import type { AttemptState, JobState } from '../../core/states.js';
import { JOB_STATES } from '../../core/states.js';
import {
  assertFinishLegal,
  assertTransitionLegal,
  leaseHolds,
  newLeaseToken,
  transitionApplies,
} from '../rules.js';
import {
  attemptFromRow,
  backoffOf,
  eventFromRow,
  jobFromRow,
  jsonOrNull,
  approvalEventDetail,
  approvalExpiresAt,
  newLeasedAttempt,
  newQueuedJob,
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
import { approvalDecide, approvalExpireMany, approvalList, approvalStats } from './approvals.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, type Migration } from './schema.js';
import { WakeChannel, wakeDirectory } from './wake.js';
import { jobPruneMany as pruneJobs, sqliteVacuum } from './retention.js';
import { jobChangesSubscribe, jobStatesRead } from './outcome-notify.js';

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
 * costs well under 1% of a core. The wake-up sockets (wake.ts) are faster; this catches what
 * they cannot (a process that started less than a second ago, a platform without them).
 */
export const WORK_CHECK_INTERVAL_MS = 1;

interface TxStatements {
  begin: Database.Statement;
  commit: Database.Statement;
  rollback: Database.Statement;
  savepoint: Database.Statement;
  release: Database.Statement;
  rollbackTo: Database.Statement;
}

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

const SET_JOB_STATE = `UPDATE jobs SET state = ?, updated_at = ?,
    run_at = coalesce(?, run_at),
    next_check_at = ?,
    lookup_failures = coalesce(?, lookup_failures),
    result_json = coalesce(?, result_json),
    error_json = coalesce(?, error_json),
    finished_at = ?`;
const SET_JOB_STATE_BY_ID = `${SET_JOB_STATE} WHERE id = ?`;
const SET_JOB_STATE_BY_ROWID = `${SET_JOB_STATE} WHERE rowid = ?`;

function inList(n: number): string {
  return n === 1 ? '?' : Array.from({ length: n }, () => '?').join(',');
}

/** SQL texts that depend on the length of IN lists, built once per arity (then one cached statement each). */
const sqlByArity = new Map<string, string>();

function byArity(kind: string, queues: number, operations: number, build: () => string): string {
  const key = `${kind}:${queues}:${operations}`;
  let sql = sqlByArity.get(key);
  if (sql === undefined) {
    sql = build();
    sqlByArity.set(key, sql);
  }
  return sql;
}

/**
 * A bound row limit: `LIMIT +?`, never `LIMIT ?`. SQLite (3.51, as better-sqlite3 12 bundles it)
 * reads a bare bound LIMIT while planning and marks its parameter as one that changes the plan,
 * so that binding it (on every run) expires the statement: each claim was parsed and planned
 * again, ≈ 20 µs, about half of a 10-job claim statement (perf: `sqlite3Reprepare` under every
 * claim). The unary plus is the same number to the query and hides the parameter from the
 * planner. The lint forbids `LIMIT ?` in this directory.
 */
const LIMIT_PARAM = 'LIMIT +?';

/**
 * The page cache per connection, in KiB: 4 MiB, not better-sqlite3's 16. Every commit ends by
 * walking the whole cache (SQLite's B-tree balancing renumbers pages through the lock-byte page,
 * 262,145, and the cache then truncates past the database's end by scanning its hash table): ≈ 66
 * µs a commit with 16 MiB full, ≈ 4 % of a worker's time at concurrency 50. A worker's pages are
 * the right edges of a few B-trees and the head of the claim index, far fewer than 1,000.
 */
const CACHE_KIB = 4_000;

/** Due QUEUED jobs of one queue, in claim order, through the partial index jobs_claim. */
function claimCandidates(operations: number, columns: string): string {
  return `SELECT ${columns} FROM jobs INDEXED BY jobs_claim
    WHERE state = 'QUEUED' AND queue = ? AND run_at <= ? AND operation IN (${inList(operations)})
    ORDER BY priority DESC, run_at, rowid ${LIMIT_PARAM}`;
}

/** Is any job due? (Order does not matter, so one index search per queue.) */
function claimProbeSql(queues: number, operations: number): string {
  return byArity(
    'probe',
    queues,
    operations,
    () => `SELECT 1 FROM jobs INDEXED BY jobs_claim
      WHERE state = 'QUEUED' AND queue IN (${inList(queues)}) AND run_at <= ?
        AND operation IN (${inList(operations)}) LIMIT 1`,
  );
}

/**
 * Up to `limit` due jobs in claim order, every column (`JobTuple`) and then the rowid. Several
 * queues: the first `limit` of each (each an ordered index range), merged; never a sort of all
 * the waiting jobs. Arguments: see `claimArgs`. Read inside the claim's write transaction, then
 * leased by rowid (`CLAIM_LEASE`): no other writer can come between the two.
 */
function claimSql(queues: number, operations: number): string {
  return byArity('claim', queues, operations, () =>
    queues === 1
      ? claimCandidates(operations, `${JOB_COLUMNS}, rowid`)
      : `SELECT * FROM (${Array.from(
          { length: queues },
          () => `SELECT * FROM (${claimCandidates(operations, `${JOB_COLUMNS}, rowid AS _rowid`)})`,
        ).join(' UNION ALL ')}) ORDER BY priority DESC, run_at, _rowid ${LIMIT_PARAM}`,
  );
}

/** Leases one claimed job (by the rowid `claimSql` read). */
const CLAIM_LEASE = `UPDATE jobs SET state = 'LEASED', attempt_count = attempt_count + 1, updated_at = ?,
  next_check_at = NULL WHERE rowid = ? AND state = 'QUEUED'`;

function claimArgs(now: number, queues: string[], operations: string[], limit: number): unknown[] {
  const args: unknown[] = [];
  for (const q of queues) args.push(q, now, ...operations, limit);
  if (queues.length > 1) args.push(limit);
  return args;
}

/** Every column of a job, in the order of `JobTuple` (for raw statements). */
const JOB_COLUMNS = `id, queue, operation, input_json, request_key, request_fingerprint, run_id, step_id, state,
  priority, run_at, created_at, updated_at, finished_at, attempt_count, max_attempts, backoff_json, timeout_ms,
  next_check_at, lookup_failures, result_json, error_json, approval_reason, approval_expires_at`;

type JobTuple = [
  id: string,
  queue: string,
  operation: string,
  inputJson: string,
  requestKey: string,
  fingerprint: string,
  runId: string | null,
  stepId: string | null,
  state: JobState,
  priority: number,
  runAt: number,
  createdAt: number,
  updatedAt: number,
  finishedAt: number | null,
  attemptCount: number,
  maxAttempts: number,
  backoffJson: string,
  timeoutMs: number,
  nextCheckAt: number | null,
  lookupFailures: number,
  resultJson: string | null,
  errorJson: string | null,
  approvalReason: string | null,
  approvalExpiresAt: number | null,
];

/** A claim's row: the job's columns, then its rowid. */
type ClaimTuple = [...JobTuple, rowid: number];

/** `jobFromRow` for a raw row of `JOB_COLUMNS` (SQLite: times are already epoch-ms numbers). */
function jobFromTuple(r: JobTuple | ClaimTuple): JobRecord {
  return {
    id: r[0],
    queue: r[1],
    operation: r[2],
    input: JSON.parse(r[3]) as Json,
    requestKey: r[4],
    fingerprint: r[5],
    runId: r[6],
    stepId: r[7],
    state: r[8],
    priority: r[9],
    runAt: r[10],
    createdAt: r[11],
    updatedAt: r[12],
    finishedAt: r[13],
    attemptCount: r[14],
    maxAttempts: r[15],
    backoff: backoffOf(r[16]),
    timeoutMs: r[17],
    nextCheckAt: r[18],
    lookupFailures: r[19],
    result: r[20] === null ? null : (JSON.parse(r[20]) as Json),
    error: r[21] === null ? null : (JSON.parse(r[21]) as ErrorInfo),
    approvalReason: r[22],
    approvalExpiresAt: r[23],
  };
}

const EVENT_COLUMNS = 9;
/** Rows per events INSERT statement: a few sizes, so a few cached statements. */
const EVENT_INSERT_ROWS = [64, 16, 4, 1];

function eventInsertSql(rows: number): string {
  return byArity(
    'events',
    rows,
    0,
    () =>
      `INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
       VALUES ${Array.from({ length: rows }, () => '(?, ?, ?, ?, ?, ?, ?, ?, ?)').join(', ')}`,
  );
}

const ATTEMPT_EVENT_KINDS = new Map<string, string>();

function attemptEventKind(state: string): string {
  let kind = ATTEMPT_EVENT_KINDS.get(state);
  if (kind === undefined) {
    kind = `attempt-${state.toLowerCase().replaceAll('_', '-')}`;
    ATTEMPT_EVENT_KINDS.set(state, kind);
  }
  return kind;
}

/**
 * Replaces text in stored CREATE TABLE statements (see `Migration.rewrites`), inside the caller's
 * transaction (a migration's): `writable_schema` for the edit, with better-sqlite3's defensive
 * mode lifted for it alone, then a new schema version, so that every other connection reloads
 * the schema before its next statement. Each new text is first created in a scratch in-memory
 * database: SQLite does not parse an edited schema until a connection loads it again, so a text
 * that did not parse would be committed and leave the file unreadable. A text that does not
 * parse, or a `from` found twice, throws, rolling the migration back.
 */
export function rewriteTables(
  db: Database.Database,
  rewrites: NonNullable<Migration['rewrites']>,
): void {
  const version = db.pragma('schema_version', { simple: true }) as number;
  db.unsafeMode(true);
  try {
    db.pragma('writable_schema = ON');
    const read = db.prepare(`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?`);
    const write = db.prepare(`UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?`);
    for (const r of rewrites) {
      const row = read.get(r.table) as { sql: string } | undefined;
      const found = row ? row.sql.split(r.from).length - 1 : 0;
      // Not there: already rewritten (a migrations table rolled back by hand), or a table edited
      // by hand. Its constraint is then left as it is: a rewrite only ever replaces a constraint
      // with an equivalent one, so leaving it changes no rule, only its cost.
      if (found === 0) continue;
      if (found > 1)
        throw new Error(
          `migration: ${JSON.stringify(r.from)} occurs ${found} times in table ${r.table}; expected once`,
        );
      const sql = row!.sql.replace(r.from, () => r.to);
      const scratch = new Database(':memory:');
      try {
        scratch.exec(sql);
      } catch (err) {
        throw new Error(`migration: the new text of table ${r.table} does not parse`, {
          cause: err,
        });
      } finally {
        scratch.close();
      }
      write.run(sql, r.table);
    }
    db.pragma(`schema_version = ${version + 1}`);
  } finally {
    db.pragma('writable_schema = OFF');
    db.unsafeMode(false);
  }
}

/** Adds each column its table lacks (see `Migration.columns`), inside the migration's transaction. */
export function addColumns(
  db: Database.Database,
  columns: NonNullable<Migration['columns']>,
): void {
  for (const c of columns) {
    const has = db
      .prepare(`SELECT 1 FROM pragma_table_info(?) WHERE name = ?`)
      .get(c.table, c.column);
    if (!has) db.exec(`ALTER TABLE ${c.table} ADD COLUMN ${c.column} ${c.type}`);
  }
}

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
  /** Writes waiting for the next group commit (see `write`). */
  private writeQueue: {
    fn: () => unknown;
    resolve: (v: unknown) => void;
    reject: (err: unknown) => void;
    /** May commit without its own fsync (see `write`). */
    unsynced: boolean;
  }[] = [];
  private flushScheduled = false;
  /** When the batch at the head of the queue first found the write lock taken. */
  private busySince: number | undefined;
  /** Events of the running write, EVENT_COLUMNS values each (see `event`). */
  private pendingEvents: unknown[] = [];
  private tx: TxStatements | null = null;
  /** Other processes' workers, woken when this process commits due work (see wake.ts). */
  private wakeChannel: WakeChannel | undefined;
  /** The batch being written made a job due: wake the other processes after its commit. */
  private newWork = false;
  /** `workSubscribe` callbacks: woken by this store's own commits (other processes: `wake`). */
  private readonly localSubscribers = new Set<() => void>();
  private readonly commits = new CommitObservers();

  constructor(private readonly options: SqliteStoreOptions) {
    this.location = `sqlite:${options.path}`;
    this.now = options.clock ?? Date.now;
    this.busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
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
      db.pragma('journal_mode = WAL');
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
    if (err instanceof SchemaTooNew || err instanceof StoreCorrupt || err instanceof StoreReadOnly)
      return err;
    const code = (err as { code?: string }).code ?? '';
    if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT'))
      return new StoreCorrupt(this.location, err);
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
    if (this.db) this.flushWrites({ wait: true });
    this.stmtCache.clear();
    this.rawCache.clear();
    this.tx = null;
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

  /**
   * Runs `fn` in an IMMEDIATE write transaction; resolves after the durable commit.
   *
   * Group commit: better-sqlite3 is synchronous, so the writes that callers in this process
   * start within one turn of the event loop (concurrent enqueues, the dispatch markers and
   * outcomes of concurrent attempts, claims, heartbeats) are queued and run together in ONE
   * `BEGIN IMMEDIATE` transaction: one fsync instead of one each. A caller whose `fn` throws
   * (RequestKeyConflict, a broken invariant) has its writes rolled back and is rejected alone;
   * the others commit (see `flushWrites`). Every promise settles only after the COMMIT has
   * returned, i.e. after the shared transaction is durable (invariant 1, and invariant 3 for
   * markers: each dispatch still waits for its own marker's commit).
   *
   * A `fn` must be a pure function of the database (and the clock): it may run twice, the first
   * run rolled back unseen (see `flushWrites`).
   *
   * `unsynced`: a batch made only of such writes commits without an fsync (`synchronous =
   * NORMAL` for that one transaction): still atomic and safe from a kill of any process (the OS
   * has the pages), but a power cut may undo it. Only for a write that nothing outside acts on
   * before a later, synced write: a claim, whose attempt is acted on only through its dispatch
   * marker. Every commit after it in the WAL is synced with the frames before it, so the marker
   * cannot survive a power cut without its claim; a claim lost that way was acted on by nobody,
   * and its job is simply QUEUED again.
   */
  private write<T>(fn: () => T, o: { unsynced?: boolean } = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.writeQueue.push({
        fn,
        resolve: resolve as (v: unknown) => void,
        reject,
        unsynced: o.unsynced === true,
      });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(this.flushBound);
      }
    });
  }

  private readonly flushBound = (): void => this.flushWrites();

  /** BEGIN IMMEDIATE / COMMIT / ROLLBACK and the per-caller savepoint, prepared once. */
  private txStatements(): TxStatements {
    if (!this.tx) {
      const db = this.conn();
      this.tx = {
        begin: db.prepare('BEGIN IMMEDIATE'),
        commit: db.prepare('COMMIT'),
        rollback: db.prepare('ROLLBACK'),
        savepoint: db.prepare('SAVEPOINT reckon_caller'),
        release: db.prepare('RELEASE reckon_caller'),
        rollbackTo: db.prepare('ROLLBACK TO reckon_caller'),
      };
    }
    return this.tx;
  }

  /**
   * Commits every queued write in one transaction, then answers each caller.
   *
   * Optimistic isolation: the callers' functions first run one after the other with no
   * savepoint around each (a savepoint costs two statements per caller, and callers almost
   * never throw). If one throws, the whole transaction is rolled back, unseen and uncommitted,
   * and the batch runs again with each caller in its own SAVEPOINT: the failing caller is
   * rolled back and rejected alone, the others commit. Either way each caller's writes are
   * atomic and nobody is answered before the COMMIT.
   */
  private flushWrites(o: { wait?: boolean } = {}): void {
    this.flushScheduled = false;
    const batch = this.writeQueue;
    this.writeQueue = [];
    if (batch.length === 0) return;
    let results: ({ ok: true; value: unknown } | { ok: false; err: unknown })[];
    const unsynced = batch.every((w) => w.unsynced);
    const since = this.commits.start();
    try {
      if (unsynced) this.setting('synchronous = NORMAL');
      const busy = o.wait ? undefined : this.tryBegin();
      if (busy) {
        // Another process holds the write lock. SQLite's busy handler would sleep the whole
        // event loop (1, 2, 5, 10 … 100 ms a try); instead the batch (and whatever joins it)
        // tries again in a moment while this process goes on, up to the busy timeout.
        this.busySince ??= performance.now();
        if (performance.now() - this.busySince < this.busyTimeoutMs) {
          this.writeQueue = batch.concat(this.writeQueue);
          this.flushScheduled = true;
          setTimeout(this.flushBound, 0);
          return;
        }
        this.busySince = undefined;
        throw busy;
      }
      this.busySince = undefined;
      results = this.runBatch(batch, { begun: !o.wait });
    } catch (err) {
      this.newWork = false;
      // BEGIN, COMMIT or an error that ended the transaction: nothing of this batch is durable.
      const e = this.classifyWriteError(err);
      for (const w of batch) w.reject(e);
      return;
    } finally {
      if (unsynced && this.db) this.setting('synchronous = FULL');
    }
    // Committed: past the try, so that nothing here could be taken for a failed write.
    this.commits.emit(unsynced ? 'claim' : 'shared', batch.length, since);
    if (this.newWork) {
      // Durable now: workers of other processes may claim it at once, and those of this one.
      this.newWork = false;
      this.wake()?.publish();
      for (const onWork of this.localSubscribers) onWork();
    }
    for (let i = 0; i < batch.length; i++) {
      const r = results[i]!;
      if (r.ok) batch[i]!.resolve(r.value);
      else batch[i]!.reject(this.classifyWriteError(r.err));
    }
  }

  /**
   * BEGIN IMMEDIATE without waiting: undefined once begun, or the SQLITE_BUSY error if another
   * connection holds the write lock.
   */
  private tryBegin(): Error | undefined {
    const tx = this.txStatements();
    this.setting('busy_timeout = 0');
    try {
      tx.begin.run();
      return undefined;
    } catch (err) {
      if (((err as { code?: string }).code ?? '').startsWith('SQLITE_BUSY')) return err as Error;
      throw err;
    } finally {
      this.setting(`busy_timeout = ${this.busyTimeoutMs}`);
    }
  }

  /**
   * Sets a connection setting. Not through a statement prepared once: SQLite applies
   * `PRAGMA busy_timeout = …` and `PRAGMA synchronous = …` while preparing them, so running a
   * prepared one again may change nothing (the first BEGIN that met another process's lock then
   * slept the event loop for the whole busy timeout). Through `exec`, which prepares, runs and
   * finalizes it in native code: ≈ 0.5 µs, against ≈ 3 µs for `pragma()` and its JS statement
   * object and result array; two to four of them a batch.
   */
  private setting(pragma: string): void {
    this.conn().exec(`PRAGMA ${pragma}`);
  }

  private runBatch(
    batch: { fn: () => unknown }[],
    o: { begun: boolean },
  ): ({ ok: true; value: unknown } | { ok: false; err: unknown })[] {
    const db = this.conn();
    const tx = this.txStatements();
    if (!o.begun) tx.begin.run();
    const values: unknown[] = new Array<unknown>(batch.length);
    let failed: unknown = undefined;
    let threw = false;
    try {
      for (let i = 0; i < batch.length; i++) values[i] = batch[i]!.fn();
      this.flushEvents();
    } catch (err) {
      threw = true;
      failed = err;
      this.pendingEvents = [];
    }
    if (!threw) {
      try {
        tx.commit.run();
      } catch (err) {
        if (db.inTransaction) tx.rollback.run();
        throw err;
      }
      return values.map((value) => ({ ok: true, value }));
    }
    // Some errors (I/O, disk full) end the whole transaction: then nothing can commit.
    if (!db.inTransaction) throw failed;
    tx.rollback.run();
    if (batch.length === 1) return [{ ok: false, err: failed }];
    // Again, each caller in its own savepoint.
    const results: ({ ok: true; value: unknown } | { ok: false; err: unknown })[] = [];
    tx.begin.run();
    try {
      for (const w of batch) {
        tx.savepoint.run();
        try {
          const value = w.fn();
          this.flushEvents();
          tx.release.run();
          results.push({ ok: true, value });
        } catch (err) {
          this.pendingEvents = [];
          if (!db.inTransaction) throw err;
          tx.rollbackTo.run();
          tx.release.run();
          results.push({ ok: false, err });
        }
      }
      tx.commit.run();
    } catch (err) {
      if (db.inTransaction) tx.rollback.run();
      throw err;
    }
    return results;
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
    this.event(
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
   * Appends one event (invariant 8), from its columns: the hot paths build no object for it.
   * Only inside a write: the events of a batch are buffered, in order, and inserted by a few
   * multi-row statements just before its COMMIT (or at the end of each caller's savepoint);
   * nothing in a write transaction reads events back.
   */
  private event(
    jobId: string,
    attemptNo: number | null,
    fingerprint: string,
    kind: string,
    fromState: string | null,
    toState: string | null,
    actor: string,
    detailJson: string | null,
    at: number,
  ): void {
    this.pendingEvents.push(
      jobId,
      attemptNo,
      fingerprint,
      kind,
      fromState,
      toState,
      actor,
      detailJson,
      at,
    );
  }

  private flushEvents(): void {
    const values = this.pendingEvents;
    if (values.length === 0) return;
    this.pendingEvents = [];
    let at = 0;
    while (at < values.length) {
      const left = (values.length - at) / EVENT_COLUMNS;
      const rows = EVENT_INSERT_ROWS.find((n) => n <= left)!;
      const end = at + rows * EVENT_COLUMNS;
      this.stmt(eventInsertSql(rows)).run(
        at === 0 && end === values.length ? values : values.slice(at, end),
      );
      at = end;
    }
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

  /** Moves a job, setting the columns each target state needs. */
  private setJobState(
    /** The job's id, or its rowid when the caller has it (one index lookup fewer). */
    jobKey: string | number,
    currentNextCheckAt: number | null,
    to: JobState,
    now: number,
    extra: {
      runAt?: number;
      nextCheckAt?: number | null;
      lookupFailures?: number;
      resultJson?: string | null;
      errorJson?: string | null;
    },
  ): void {
    const terminal = to === 'SUCCEEDED' || to === 'FAILED' || to === 'CANCELLED';
    if (to === 'QUEUED') this.newWork = true;
    this.stmt(typeof jobKey === 'number' ? SET_JOB_STATE_BY_ROWID : SET_JOB_STATE_BY_ID).run(
      to,
      now,
      extra.runAt ?? null,
      to === 'UNKNOWN' ? (extra.nextCheckAt ?? currentNextCheckAt ?? now) : null,
      extra.lookupFailures ?? null,
      extra.resultJson ?? null,
      extra.errorJson ?? null,
      terminal ? now : null,
      jobKey,
    );
  }

  // ---------------------------------------------------------------- jobs

  jobInsertMany(p: {
    jobs: JobInsert[];
    actor: string;
    transaction?: unknown;
  }): Promise<JobInsertResult[]> {
    if (p.transaction !== undefined)
      return Promise.reject(
        new InvalidInput(
          'enqueue({ transaction }) needs a PostgreSQL store: SQLite cannot join a transaction of yours',
        ),
      );
    return this.write(() => {
      const now = this.now();
      const insert = this.stmt(
        `INSERT INTO jobs (id, queue, operation, input_json, request_key, request_fingerprint, run_id, step_id, state,
           priority, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms,
           approval_reason, approval_expires_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (request_key) DO NOTHING`,
      );
      const results: JobInsertResult[] = [];
      // Jobs of one operation share one policy object: serialized once per batch.
      let lastBackoff: unknown = undefined;
      let backoffJson = '';
      for (const j of p.jobs) {
        if (j.backoff !== lastBackoff) {
          lastBackoff = j.backoff;
          backoffJson = JSON.stringify(j.backoff);
        }
        const runAt = j.runAt ?? now + j.delayMs;
        // A known request key inserts nothing (only that conflict is ignored: any other throws).
        const inserted =
          insert.run(
            j.id,
            j.queue,
            j.operation,
            j.inputJson,
            j.requestKey,
            j.fingerprint,
            j.runId,
            j.stepId,
            j.approval ? 'AWAITING_APPROVAL' : 'QUEUED',
            j.priority,
            runAt,
            now,
            now,
            j.maxAttempts,
            backoffJson,
            j.timeoutMs,
            j.approval?.reason ?? null,
            approvalExpiresAt(j, now),
          ).changes === 1;
        if (!inserted) {
          const existing = this.stmt('SELECT * FROM jobs WHERE request_key = ?').get(
            j.requestKey,
          ) as JobRow;
          if (existing.request_fingerprint !== j.fingerprint) {
            // Throwing rolls the whole batch back: nothing is written (invariant 9).
            throw new RequestKeyConflict(
              j.requestKey,
              existing.id,
              existing.request_fingerprint,
              j.fingerprint,
            );
          }
          const job = jobFromRow(existing);
          this.event(
            job.id,
            null,
            job.fingerprint,
            'enqueue-deduplicated',
            null,
            null,
            p.actor,
            JSON.stringify({ requestKey: j.requestKey }),
            now,
          );
          results.push({ job, created: false });
          continue;
        }
        if (j.approval) {
          const detail = approvalEventDetail(j, now);
          this.event(
            j.id,
            null,
            j.fingerprint,
            'enqueued',
            null,
            'AWAITING_APPROVAL',
            p.actor,
            detail,
            now,
          );
        } else {
          this.event(j.id, null, j.fingerprint, 'enqueued', null, 'QUEUED', p.actor, null, now);
          this.newWork = true;
        }
        // The record as written, without reading it back.
        results.push({ job: newQueuedJob(j, now, backoffJson), created: true });
      }
      return results;
    });
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
    return this.write(() => {
      assertTransitionLegal(t);
      const now = this.now();
      const job = this.getJob(t.jobId);
      const attempt =
        job && job.attemptCount > 0 ? this.getAttempt(job.id, job.attemptCount) : undefined;
      if (!transitionApplies(job, attempt, t)) return false;
      assert(job, 'transition applies to an existing job');
      if (t.resolution) {
        this.stmt(
          `UPDATE attempts SET resolution = ?, resolution_source = ?, resolution_evidence_json = ?, resolved_at = ?
           WHERE job_id = ? AND attempt_no = ? AND state = 'UNKNOWN' AND resolution IS NULL`,
        ).run(
          t.resolution.kind,
          t.resolution.source,
          jsonOrNull(t.resolution.evidence),
          now,
          t.jobId,
          t.expectAttemptNo,
        );
      }
      this.setJobState(job.id, job.nextCheckAt, t.to, now, {
        ...(t.to === 'QUEUED' ? { runAt: now + (t.delayMs ?? 0) } : {}),
        ...(t.to === 'UNKNOWN' && t.recheckDelayMs !== undefined
          ? { nextCheckAt: now + t.recheckDelayMs }
          : {}),
        ...(t.to === 'QUEUED'
          ? { lookupFailures: 0 }
          : t.lookupFailures !== undefined
            ? { lookupFailures: t.lookupFailures }
            : {}),
        resultJson: t.resultJson ?? null,
        errorJson: jsonOrNull(t.error),
      });
      this.appendEvent(
        {
          jobId: job.id,
          attemptNo: t.expectAttemptNo || null,
          fingerprint: job.fingerprint,
          kind: t.event.kind,
          fromState: t.from,
          toState: t.to,
          actor: t.event.actor,
          detail: {
            ...(t.event.detail ?? {}),
            ...(t.resolution
              ? {
                  resolution: t.resolution.kind,
                  source: t.resolution.source,
                  evidence: t.resolution.evidence,
                }
              : {}),
          },
        },
        now,
      );
      return true;
    });
  }

  jobCancel(p: { id: string; actor: string; reason: string }): Promise<JobCancelResult | null> {
    return this.write((): JobCancelResult | null => {
      const now = this.now();
      const job = this.getJob(p.id);
      if (!job) return null;
      if (job.state === 'QUEUED') {
        this.setJobState(job.id, job.nextCheckAt, 'CANCELLED', now, {
          errorJson: JSON.stringify({ name: 'Cancelled', message: p.reason }),
        });
        this.appendEvent(
          {
            jobId: job.id,
            attemptNo: job.attemptCount || null,
            fingerprint: job.fingerprint,
            kind: 'cancelled',
            fromState: 'QUEUED',
            toState: 'CANCELLED',
            actor: p.actor,
            detail: { reason: p.reason },
          },
          now,
        );
        return { cancelled: true, job: this.getJob(job.id)! };
      }
      if (job.state === 'LEASED') {
        const attempt = this.getAttempt(job.id, job.attemptCount);
        if (attempt && attempt.state === 'LEASED' && attempt.dispatchedAt === null) {
          // Ending the attempt fences its worker: its dispatch marker write will not apply.
          this.stmt(
            `UPDATE attempts SET state = 'FAILED_BEFORE_SEND', reason = 'cancelled', finished_at = ? WHERE job_id = ? AND attempt_no = ?`,
          ).run(now, job.id, attempt.attemptNo);
          this.setJobState(job.id, job.nextCheckAt, 'CANCELLED', now, {
            errorJson: JSON.stringify({ name: 'Cancelled', message: p.reason }),
          });
          this.appendEvent(
            {
              jobId: job.id,
              attemptNo: attempt.attemptNo,
              fingerprint: job.fingerprint,
              kind: 'cancelled',
              fromState: 'LEASED',
              toState: 'CANCELLED',
              actor: p.actor,
              detail: { reason: p.reason, fencedOwner: attempt.ownerId },
            },
            now,
          );
          return { cancelled: true, job: this.getJob(job.id)! };
        }
        return {
          cancelled: false,
          job,
          why: 'its current attempt has already dispatched the request',
        };
      }
      return { cancelled: false, job, why: `it is ${job.state}` };
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
    if (this.writeQueue.length === 0) {
      try {
        if (!this.exists(`SELECT 1 ${due} LIMIT 1`, [this.now(), ...p.operations]))
          return Promise.resolve([]);
      } catch (err) {
        return Promise.reject(this.classifyWriteError(err));
      }
    }
    return this.write(() => {
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
    if (this.writeQueue.length === 0) {
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
    return this.write(
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
          assert(lease.run(now, r[24]).changes === 1, `job ${r[0]} changed between read and lease`);
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
          this.event(
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
    return this.write(() => {
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
          this.event(lease.jobId, lease.attemptNo, r[2], 'dispatched', null, null, r[1], null, now);
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
    return this.write(() => {
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
    return this.write(() => {
      const now = this.now();
      return p.finishes.map((f) => {
        // The fence read first (one join, both rowids), then both rows written by rowid: a little
        // cheaper than a conditional UPDATE of the attempt (its EXISTS on the job, its RETURNING
        // gathered in an ephemeral table) followed by the job's by id. A broken invariant
        // (UNKNOWN without a marker: a CHECK too) is judged before anything is written.
        const v = this.fenceView(f.lease);
        if (!v || !leaseHolds(v.job, v.attempt, f.lease)) return false;
        assertFinishLegal(v.job, v.attempt, f);
        this.finishAttempt(v, f, now);
        return true;
      });
    });
  }

  private finishAttempt(v: FenceView, f: AttemptFinish | AttemptExpire, now: number): void {
    const resultJson = 'resultJson' in f ? f.resultJson : null;
    const error = 'error' in f ? f.error : null;
    const errorJson = jsonOrNull(error);
    // The fence was read in this transaction: the rows are written by rowid.
    this.stmt(
      `UPDATE attempts SET state = ?, finished_at = ?, result_json = ?, error_json = ?, reason = ?
       WHERE rowid = ? AND lease_token = ? AND state = 'LEASED'`,
    ).run(f.state, now, resultJson, errorJson, f.reason, v.attemptRowid, v.attempt.leaseToken);
    this.endJob(v.jobRowid, v.job, v.attempt, f, resultJson, error, errorJson, now);
  }

  /** The job side of an ended attempt, and its event. */
  private endJob(
    jobRowid: number,
    job: JobRecord,
    attempt: AttemptRecord,
    f: AttemptFinish | AttemptExpire,
    resultJson: string | null,
    error: ErrorInfo | null,
    errorJson: string | null,
    now: number,
  ): void {
    const next = f.job;
    this.setJobState(jobRowid, job.nextCheckAt, next.to, now, {
      ...(next.to === 'QUEUED' ? { runAt: now + (next.delayMs ?? 0) } : {}),
      ...(next.to === 'UNKNOWN'
        ? {
            nextCheckAt: (attempt.dispatchedAt ?? now) + (next.checkAfterDispatchMs ?? 0),
            lookupFailures: 0,
          }
        : {}),
      resultJson: next.to === 'SUCCEEDED' ? resultJson : null,
      errorJson: next.to === 'FAILED' || next.to === 'NEEDS_REVIEW' ? errorJson : null,
    });
    this.event(
      job.id,
      attempt.attemptNo,
      job.fingerprint,
      attemptEventKind(f.state),
      'LEASED',
      next.to,
      f.actor,
      // The same object as before, serialized by hand when it has only the constant part.
      f.reason || error || next.delayMs !== undefined
        ? JSON.stringify({
            attemptState: f.state,
            ...(f.reason ? { reason: f.reason } : {}),
            ...(error ? { error } : {}),
            ...(next.delayMs !== undefined ? { retryInMs: next.delayMs } : {}),
          })
        : `{"attemptState":"${f.state}"}`,
      now,
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
    return this.write(() => {
      const now = this.now();
      return p.expiries.map((e) => {
        const v = this.fenceView(e.lease);
        // Re-checked inside the write: a second reclaimer, or a late heartbeat, finds nothing to do.
        if (!v || !leaseHolds(v.job, v.attempt, e.lease)) return false;
        const { job, attempt } = v;
        if (attempt.leaseExpiresAt + p.skewMs >= now) return false;
        assert(
          (attempt.dispatchedAt === null) === (e.state === 'FAILED_BEFORE_SEND'),
          `expiry of job ${job.id} attempt ${attempt.attemptNo} misread its dispatch marker`,
        );
        assertFinishLegal(job, attempt, { ...e, resultJson: null, error: null });
        this.finishAttempt(v, e, now);
        return true;
      });
    });
  }

  // ---------------------------------------------------------------- events and stats

  eventAppendMany(p: { events: EventInsert[] }): Promise<void> {
    return this.write(() => {
      const now = this.now();
      const fingerprintOf = this.stmt('SELECT request_fingerprint FROM jobs WHERE id = ?').pluck();
      for (const e of p.events) {
        const fingerprint = fingerprintOf.get(e.jobId) as string | undefined;
        if (fingerprint === undefined) continue;
        this.appendEvent({ ...e, fingerprint }, now);
      }
    });
  }

  jobPruneMany(p: JobPruneParams): Promise<JobPruneResult> {
    return pruneJobs({ db: this.conn(), now: this.now, write: (fn) => this.write(fn) }, p);
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
    return this.write(() => {
      const r = approvalDecide(this.conn(), p, this.now());
      if (r.ok && r.job.state === 'QUEUED') this.newWork = true;
      return r;
    });
  }

  jobApprovalExpireMany(p: {
    limit: number;
    actor: string;
    error: ErrorInfo;
  }): Promise<JobRecord[]> {
    return this.write(() => approvalExpireMany(this.conn(), p, this.now()));
  }

  jobApprovalStats(): Promise<ApprovalStats> {
    return this.read(() => approvalStats(this.conn(), this.now()));
  }

  /**
   * Cross-process wake-ups without a server, two ways: a byte on this process's socket from a
   * process that committed due work (wake.ts: well under a millisecond), and `data_version`,
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
      const byQueue = new Map<string, StoreStats['queues'][number]>();
      const entry = (queue: string) => {
        let q = byQueue.get(queue);
        if (!q) {
          q = {
            queue,
            counts: Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>,
            oldestDueAt: null,
          };
          byQueue.set(queue, q);
        }
        return q;
      };
      for (const c of counts) entry(c.queue).counts[c.state] = c.n;
      for (const o of oldest) entry(o.queue).oldestDueAt = o.t;
      const byOperation = this.stmt(
        `SELECT operation, sum(state = 'UNKNOWN') AS unknown, sum(state = 'NEEDS_REVIEW') AS needs_review
         FROM jobs WHERE state IN ('UNKNOWN','NEEDS_REVIEW') GROUP BY operation`,
      ).all() as { operation: string; unknown: number; needs_review: number }[];
      const expired = this.stmt(
        `SELECT count(*) AS n FROM attempts WHERE state = 'LEASED' AND lease_expires_at <= ?`,
      ).get(now) as { n: number };
      return {
        now,
        queues: [...byQueue.values()].sort((a, b) => a.queue.localeCompare(b.queue)),
        byOperation: byOperation.map((r) => ({
          operation: r.operation,
          unknown: r.unknown,
          needsReview: r.needs_review,
        })),
        expiredLeases: expired.n,
      };
    });
  }
}
