/**
 * The shared store: one PostgreSQL schema used by many worker processes on many hosts.
 *
 * Same semantics as the SQLite store, method by method; the differences are how they are made
 * safe with concurrent writers:
 *  - Lease expiry is judged by the database's clock (`clock_timestamp()`), never a worker's.
 *  - Claims take rows with `FOR UPDATE SKIP LOCKED`, so claimers never wait on each other. Fenced
 *    writes lock the rows they judge (`FOR UPDATE`, in job id order), judge them by the shared
 *    rules of ../rules.ts, then write.
 *  - The worker's hot path (claim, dispatch marker, outcome) and the common enqueue are ONE
 *    statement each (a data-modifying CTE that locks, judges, writes and appends its events), so
 *    each costs one round trip and one commit, and concurrent callers share it (group commit).
 *    The rules that need no row are applied here before the statement; those that need the
 *    locked rows are the statement's SQL (sql.ts), and a broken invariant aborts it whole.
 *    Colder paths (reclaimer, reconciler, cancel) lock, judge in JS and write in a transaction.
 *  - Migrations run in one transaction under an advisory lock, so processes starting together
 *    migrate one after the other.
 *  - Work notifications: LISTEN/NOTIFY on a channel per schema (listener.ts).
 *
 * Connection loss: a pool or listener connection that dies never crashes the process; calls fail
 * with `StoreUnavailable` until the server is back, and the pool reconnects by itself.
 */
import pg from 'pg';
import {
  InvalidInput,
  InvariantViolation,
  RequestKeyConflict,
  SchemaTooNew,
  StoreUnavailable,
  assert,
  errorMessage,
  type ErrorInfo,
} from '../../core/errors.js';
import { JOB_STATES, type JobState } from '../../core/states.js';
import {
  assertFinishLegal,
  assertTransitionLegal,
  leaseHolds,
  newLeaseToken,
  transitionApplies,
} from '../rules.js';
import {
  approvalDecide,
  approvalExpireMany,
  approvalList,
  approvalStats,
  type ApprovalTarget,
} from './approvals.js';
import {
  attemptFromRow,
  eventFromRow,
  jobFromRow,
  jsonOrNull,
  newLeasedAttempt,
  newQueuedJob,
  toMs,
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
import { GroupCommit, type GroupCommitOptions } from '../group-commit.js';
import { WorkListener } from './listener.js';
import { jobChangesSubscribe, jobStatesRead } from './outcome-notify.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, MIGRATIONS_TABLE_SQL } from './schema.js';
import { jobPruneMany as pruneJobs } from './retention.js';
import {
  claimLimitInline,
  FAIL_MARK,
  NEW_JOB_SHARED,
  quoteIdent,
  SCHEMA_NAME_RE,
  statements,
  workChannel,
  type Statements,
} from './sql.js';

export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/database`, optionally with `?schema=name`. */
  connectionString: string;
  /** The schema that holds reckon's tables. Default `reckon` (or `?schema=` in the URL). */
  schema?: string;
  /** Most connections in the pool. */
  poolMax?: number;
  /** How long opening a connection may take before the call fails. */
  connectTimeoutMs?: number;
  /** How long one query may wait for its answer before the call fails (client side). */
  queryTimeoutMs?: number;
  /** Ignored: the database's clock judges leases. Accepted so that store options are uniform. */
  clock?: unknown;
}

export const DEFAULT_SCHEMA = 'reckon';
export const DEFAULT_POOL_MAX = 10;
/** Long enough for a loaded server, short enough that a worker notices an outage within its lease. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
export const DEFAULT_QUERY_TIMEOUT_MS = 30_000;
/** A session stuck in a transaction (a frozen or partitioned worker) gives its row locks back. */
const IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000;
/** Deadlock or serialization failure: the transaction was rolled back whole, so it is retried. */
const RETRYABLE_SQLSTATES = new Set(['40P01', '40001']);
const TX_RETRIES_MAX = 5;
/**
 * Group commit (../group-commit.ts): merged calls of one kind running at once, and most items in
 * one. One in flight: a call goes out at once when its kind is idle, and the calls that arrive
 * while one runs go together in the next, so batches grow exactly as fast as the server is busy.
 * Each hot write is one statement (one round trip), so a second one in flight would only split
 * the batch and spend another commit and more server CPU: measured, one in flight gave more
 * throughput (c10, c50) and no worse pickup latency on a loaded 2-core machine. 1,000 items
 * keep one statement's locks and parameters small.
 */
const GROUP_IN_FLIGHT_MAX = 1;
const GROUP_ITEMS_MAX = 1_000;
/**
 * Outcomes wait up to this long while dispatch markers are being written (../group-commit.ts
 * `yieldTo`). A job's function starts only once its marker is durable, so markers are on every
 * job's critical path; an outcome is not (its execution slot is already free, and its lease
 * stays fenced until it lands). Without the wait, at concurrency 10 an outcome call ran beside
 * nearly every marker call (≈ 11 outcomes each), the two backends and Node sharing the cores;
 * with it, outcomes go in calls of ≈ 30–60 and each marker commit is ≈ 15 % shorter: +10–12 %
 * jobs/s at concurrency 10, +4–7 % at 50 (30,000 jobs, interleaved). On an idle store an outcome
 * starts at once, as before.
 */
const FINISH_YIELD_MS = 5;
/**
 * The hot statements are prepared once per pooled connection under these names, so the server
 * parses and plans each once per connection instead of once per call. The claims' names take a
 * suffix: their limit, or `n` for the one statement of the other sizes (`claimLimitInline`).
 */
const PREPARED = {
  jobInsertAllNew: 'reckon_job_insert_all_new',
  jobInsertHandOff: 'reckon_job_insert_hand_off',
  attemptClaim: 'reckon_attempt_claim',
  attemptClaimQueues: 'reckon_attempt_claim_queues',
  attemptDispatch: 'reckon_attempt_dispatch',
  attemptFinish: 'reckon_attempt_finish',
  attemptHeartbeat: 'reckon_attempt_heartbeat',
} as const;
/** pg_advisory_xact_lock's first key: "reckon migrations". */
const MIGRATION_LOCK_NAMESPACE = 0x7265636b;

/** What a statement runs on: a pool client in our transaction, or the caller's client in theirs. */
interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

interface LockedLease {
  job: JobRecord;
  attempt: AttemptRecord;
}

/** A job move, as `jobUpdate` writes it (null run_at, lookup_failures, result, error: unchanged). */
interface JobWrite {
  id: string;
  state: JobState;
  updated_at: number;
  run_at: number | null;
  next_check_at: number | null;
  lookup_failures: number | null;
  result_json: string | null;
  error_json: string | null;
  finished_at: number | null;
}

interface EventWrite {
  job_id: string;
  attempt_no: number | null;
  request_fingerprint: string;
  kind: string;
  from_state: string | null;
  to_state: string | null;
  actor: string;
  detail_json: string | null;
}

/** The writes of one transaction, gathered so that each kind is one batched statement. */
class WriteSet {
  readonly jobs: JobWrite[] = [];
  readonly attemptEnds: Record<string, unknown>[] = [];
  readonly events: EventWrite[] = [];
  readonly requeued = new Set<string>();
}

export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  readonly location: string;
  readonly capabilities: StoreCapabilities = {
    clock: 'database',
    multiHost: true,
    crossProcessNotify: true,
    handOff: true,
  };
  readonly schema: string;
  private readonly sql: Statements;
  private readonly channel: string;
  private readonly clientConfig: pg.ClientConfig;
  private readonly poolMax: number;
  private pool: pg.Pool | null = null;
  private listener: WorkListener | null = null;
  /** Backend process ids of the pool's connections (see `WorkListener`). */
  private readonly ownBackends = new Set<number>();
  /** Queues that a transaction of ours made work due in, woken once it commits (see `tx`). */
  private readonly wakesOf = new WeakMap<object, Set<string>>();
  /** Errors of idle pool connections (e.g. the server restarted); kept for health, never thrown. */
  poolErrors = 0;
  /** Concurrent callers of the hot write paths share transactions (see ../group-commit.ts). */
  private readonly inserts = new Map<string, GroupCommit<JobInsert, JobInsertResult>>();
  private readonly commits = new CommitObservers();
  private readonly dispatches = this.groupCommit('dispatch', (leases: LeaseRef[]) =>
    this.dispatchNow(leases),
  );
  private readonly finishes = this.groupCommit(
    'finish',
    (finishes: AttemptFinish[]) => this.finishNow(finishes),
    { group: this.dispatches, maxMs: FINISH_YIELD_MS },
  );
  private readonly heartbeats = new Map<number, GroupCommit<LeaseRef, HeartbeatResult>>();

  constructor(options: PostgresStoreOptions) {
    const { connectionString, schema } = splitSchema(options.connectionString, options.schema);
    this.schema = schema;
    this.location = redact(options.connectionString);
    this.sql = statements(schema);
    this.channel = workChannel(schema);
    this.poolMax = options.poolMax ?? DEFAULT_POOL_MAX;
    if (!Number.isInteger(this.poolMax) || this.poolMax < 1 || this.poolMax > 1_000)
      throw new InvalidInput('poolMax must be an integer from 1 to 1000');
    this.clientConfig = {
      connectionString,
      connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      query_timeout: options.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS,
      idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_TIMEOUT_MS,
      keepAlive: true,
      application_name: 'reckon',
    };
  }

  // ---------------------------------------------------------------- lifecycle

  async init(): Promise<void> {
    if (this.pool) return;
    const pool = new pg.Pool({ ...this.clientConfig, max: this.poolMax });
    // An idle connection that dies (server restart, network) is dropped by the pool; without a
    // listener the 'error' event would crash the process.
    pool.on('error', () => {
      this.poolErrors++;
    });
    // Every statement of reckon's reaches rows by key or along an index. A prepared statement's
    // generic plan is made once, often while the tables are still empty, and then kept: it scanned
    // `attempts` in full (cheap when empty) for every lease, and the service slowed down as the
    // journal grew. With sequential scans priced out, every plan, generic or not, goes by index,
    // at any table size, and still needs no planning per execution. (statsGet, which counts
    // every job, allows them again for itself.)
    pool.on('connect', (client) => {
      client.query('SET enable_seqscan = off').catch(() => undefined);
      const pid = (client as { processID?: number | null }).processID;
      if (typeof pid === 'number') {
        this.ownBackends.add(pid);
        client.once('end', () => this.ownBackends.delete(pid));
      }
    });
    this.pool = pool;
    try {
      await this.migrate();
    } catch (err) {
      this.pool = null;
      await pool.end().catch(() => undefined);
      throw err;
    }
  }

  private async migrate(): Promise<void> {
    await this.tx(async (c) => {
      // One process at a time per schema; the others wait here, then find nothing to do.
      await c.query(this.sql.migrationLock, [MIGRATION_LOCK_NAMESPACE, this.schema]);
      await c.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(this.schema)}`);
      await c.query(`SET LOCAL search_path TO ${quoteIdent(this.schema)}`);
      await c.query(MIGRATIONS_TABLE_SQL);
      const current = await this.versionOn(c);
      if (current > LATEST_SCHEMA_VERSION)
        throw new SchemaTooNew(this.location, current, LATEST_SCHEMA_VERSION);
      for (const m of MIGRATIONS) {
        if (m.version <= current) continue;
        await c.query(m.sql);
        await c.query(this.sql.migrationRecord, [m.version, m.name]);
      }
    });
  }

  private async versionOn(c: Queryable): Promise<number> {
    const r = await c.query<{ v: number }>(this.sql.schemaVersion);
    return Number(r.rows[0]?.v ?? 0);
  }

  schemaVersion(): Promise<number> {
    return this.run((c) => this.versionOn(c), { reads: true });
  }

  async close(): Promise<void> {
    const pool = this.pool;
    const listener = this.listener;
    this.pool = null;
    this.listener = null;
    await listener?.stop();
    await pool?.end();
  }

  async clockNow(): Promise<number> {
    const r = await this.run((c) => c.query<{ now: Date }>(this.sql.clockNow), { reads: true });
    return toMs(r.rows[0]!.now);
  }

  // ---------------------------------------------------------------- connections

  private groupCommit<I, O>(
    write: string,
    run: (items: I[]) => Promise<O[]>,
    yieldTo?: GroupCommitOptions<I, O>['yieldTo'],
  ): GroupCommit<I, O> {
    return new GroupCommit({
      run,
      ...(yieldTo ? { yieldTo } : {}),
      inFlightMax: GROUP_IN_FLIGHT_MAX,
      itemsMax: GROUP_ITEMS_MAX,
      // A connection failure may have happened during COMMIT: never re-run those.
      isAmbiguous: (err) => err instanceof StoreUnavailable,
      commits: { observers: this.commits, write },
    });
  }

  jobPruneMany(p: JobPruneParams): Promise<JobPruneResult> {
    const h = { schema: this.schema, tx: this.tx.bind(this), read: this.run.bind(this) };
    return pruneJobs({ ...h, read: (fn) => h.read(fn, { reads: true }) }, p);
  }

  onCommit(fn: (c: StoreCommit) => void): () => void {
    return this.commits.add(fn);
  }

  private connPool(): pg.Pool {
    if (!this.pool)
      throw new StoreUnavailable(`${this.location} is closed (or init() was not called)`);
    return this.pool;
  }

  /**
   * Runs `fn` on a pool client outside a transaction: one statement (a write whose failure is
   * the caller's to judge, never retried here), or reads (`reads: true`), which are retried when
   * a pooled connection turns out dead (e.g. after a server restart). Up to poolMax + 1 tries:
   * the pool may hold that many dead idle connections, and each failed try discards one.
   */
  private async run<T>(fn: (c: Queryable) => Promise<T>, o: { reads?: boolean } = {}): Promise<T> {
    for (let tryNo = 1; ; tryNo++) {
      try {
        return await this.withClient(fn);
      } catch (err) {
        if (!o.reads || tryNo > this.poolMax || !(err instanceof StoreUnavailable)) throw err;
      }
    }
  }

  /**
   * Runs one prepared statement (`name`) on a pool client: a write that is its own transaction,
   * durable when it resolves. Retried only when nothing of it can remain: a deadlock or
   * serialization failure (the server rolled it back whole), or a failure before it was sent (no
   * connection could be had, or the connection was known dead). A connection lost after it was
   * sent is ambiguous (it may have committed): reported as StoreUnavailable, never retried.
   * An abort by `fail` (sql.ts) becomes an InvariantViolation, or what `onFail` makes of it.
   */
  private async statement<R extends pg.QueryResultRow>(
    name: string,
    text: string,
    values: unknown[],
    onFail?: (what: string) => Error,
  ): Promise<pg.QueryResult<R>> {
    for (let tryNo = 1; ; tryNo++) {
      try {
        return await this.withClient((c) => (c as pg.PoolClient).query<R>({ name, text, values }));
      } catch (err) {
        const what = failedCheck(err);
        if (what !== undefined) throw onFail?.(what) ?? new InvariantViolation(what);
        const code = (err as { code?: unknown }).code;
        const retry =
          (typeof code === 'string' && RETRYABLE_SQLSTATES.has(code) && tryNo < TX_RETRIES_MAX) ||
          (err instanceof StoreUnavailable && this.neverSent(err) && tryNo <= this.poolMax);
        if (!retry) throw err;
        await new Promise((r) => setTimeout(r, 5 * tryNo + Math.random() * 20));
      }
    }
  }

  /** Errors of `withClient` that prove the statement never left: no connection to send it on. */
  private readonly unsent = new WeakSet<object>();

  private neverSent(err: StoreUnavailable): boolean {
    return this.unsent.has(err) || /not queryable/i.test(errorMessage(err.cause));
  }

  /**
   * Runs `fn` in one transaction; resolves after COMMIT. Retried whole when nothing of the try
   * can remain: a deadlock or serialization failure (rolled back by the server), or a connection
   * lost before COMMIT was sent (the server rolls back). A connection lost during COMMIT is
   * ambiguous and is reported, never retried.
   */
  private async tx<T>(fn: (c: Queryable) => Promise<T>): Promise<T> {
    for (let tryNo = 1; ; tryNo++) {
      let commitSent = false;
      try {
        return await this.withClient(async (c) => {
          await c.query('BEGIN');
          const wakes = new Set<string>();
          this.wakesOf.set(c, wakes);
          try {
            const value = await fn(c);
            commitSent = true;
            await c.query('COMMIT');
            this.wakeLocal(wakes);
            return value;
          } catch (err) {
            if (!isConnectionError(err)) await c.query('ROLLBACK').catch(() => undefined);
            throw err;
          }
        });
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        const retry =
          (typeof code === 'string' && RETRYABLE_SQLSTATES.has(code) && tryNo < TX_RETRIES_MAX) ||
          (err instanceof StoreUnavailable && !commitSent && tryNo <= this.poolMax);
        if (!retry) throw err;
        await new Promise((r) => setTimeout(r, 5 * tryNo + Math.random() * 20));
      }
    }
  }

  private async withClient<T>(fn: (c: Queryable) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    const pool = this.connPool();
    try {
      client = await pool.connect();
    } catch (err) {
      const e = this.classify(err);
      this.unsent.add(e);
      throw e;
    }
    // A checked-out client has no pool listener: its 'error' must be caught here, or it crashes
    // the process. The failing query rejects on its own.
    let broken: Error | undefined;
    const onError = (err: Error) => {
      broken = err;
    };
    client.on('error', onError);
    try {
      return await fn(client);
    } catch (err) {
      if (isConnectionError(err)) broken ??= err as Error;
      throw this.classify(err);
    } finally {
      client.off('error', onError);
      // A broken (or timed-out) connection is destroyed, never reused.
      client.release(broken ?? false);
    }
  }

  /** Work that a statement of ours made due, committed: wakes this process's subscribers. */
  private wakeLocal(queues: Iterable<string>): void {
    this.listener?.wake(queues);
  }

  /** Connection-level failures become `StoreUnavailable`; everything else is passed on as is. */
  private classify(err: unknown): Error {
    if (!(err instanceof Error)) return new Error(String(err));
    if (err instanceof StoreUnavailable || !isConnectionError(err)) return err;
    return new StoreUnavailable(
      `PostgreSQL at ${this.location} is unreachable: ${errorMessage(err)}`,
      err,
    );
  }

  // ---------------------------------------------------------------- shared steps

  /** Locks each lease's job and attempt (job id order); `now` is the clock once all are held. */
  private async lockLeases(
    c: Queryable,
    leases: { jobId: string; attemptNo: number }[],
  ): Promise<{ now: number; locked: Map<string, LockedLease> }> {
    const refs = leases.map((l) => ({ job_id: l.jobId, attempt_no: l.attemptNo }));
    const r = await c.query<{ job: JobRow; attempt: AttemptRow; now: Date }>(this.sql.leaseLock, [
      JSON.stringify(refs),
    ]);
    const locked = new Map<string, LockedLease>();
    let now = 0;
    for (const row of r.rows) {
      const attempt = attemptFromRow(row.attempt);
      locked.set(leaseKey(attempt.jobId, attempt.attemptNo), { job: jobFromRow(row.job), attempt });
      now = Math.max(now, toMs(row.now));
    }
    if (r.rows.length === 0) now = await this.clockOn(c);
    return { now, locked };
  }

  private async clockOn(c: Queryable): Promise<number> {
    const r = await c.query<{ now: Date }>(this.sql.clockNow);
    return toMs(r.rows[0]!.now);
  }

  /** Writes what a transaction gathered: attempt ends, then jobs, then events, then wake-ups. */
  private async flush(c: Queryable, w: WriteSet, now: number): Promise<JobRecord[]> {
    if (w.attemptEnds.length > 0) {
      const r = await c.query(this.sql.attemptEnd, [JSON.stringify(w.attemptEnds)]);
      assert(
        r.rowCount === w.attemptEnds.length,
        'every locked attempt the rules ended was written',
      );
    }
    let moved: JobRecord[] = [];
    if (w.jobs.length > 0) {
      const r = await c.query<JobRow>(this.sql.jobUpdate, [JSON.stringify(w.jobs)]);
      assert(r.rowCount === w.jobs.length, 'every locked job the rules moved was written');
      moved = r.rows.map(jobFromRow);
    }
    if (w.events.length > 0) await c.query(this.sql.eventInsert, [JSON.stringify(w.events), now]);
    if (w.requeued.size > 0) {
      await c.query(this.sql.notify, [[...w.requeued], this.channel]);
      const wakes = this.wakesOf.get(c);
      if (wakes) for (const q of w.requeued) wakes.add(q);
    }
    return moved;
  }

  /** A job's state after a move, mirroring the SQLite store's setJobState column by column. */
  private jobMove(
    job: JobRecord,
    to: JobState,
    now: number,
    extra: {
      runAt?: number;
      nextCheckAt?: number | null;
      lookupFailures?: number;
      resultJson?: string | null;
      errorJson?: string | null;
    },
  ): JobWrite {
    const terminal = to === 'SUCCEEDED' || to === 'FAILED' || to === 'CANCELLED';
    return {
      id: job.id,
      state: to,
      updated_at: now,
      run_at: extra.runAt ?? null,
      next_check_at: to === 'UNKNOWN' ? (extra.nextCheckAt ?? job.nextCheckAt ?? now) : null,
      lookup_failures: extra.lookupFailures ?? null,
      result_json: extra.resultJson ?? null,
      error_json: extra.errorJson ?? null,
      finished_at: terminal ? now : null,
    };
  }

  private event(
    job: JobRecord,
    e: Omit<EventInsert, 'jobId'> & { detail?: Record<string, unknown> },
  ): EventWrite {
    return {
      job_id: job.id,
      attempt_no: e.attemptNo,
      request_fingerprint: job.fingerprint,
      kind: e.kind,
      from_state: e.fromState ?? null,
      to_state: e.toState ?? null,
      actor: e.actor,
      detail_json: jsonOrNull(e.detail),
    };
  }

  /** Ends a locked attempt and moves its job, exactly as the SQLite store's finishAttempt. */
  private finishAttempt(
    w: WriteSet,
    job: JobRecord,
    attempt: AttemptRecord,
    f: AttemptFinish | AttemptExpire,
    now: number,
  ): void {
    const resultJson = 'resultJson' in f ? f.resultJson : null;
    const error = 'error' in f ? f.error : null;
    w.attemptEnds.push({
      job_id: job.id,
      attempt_no: attempt.attemptNo,
      lease_token: attempt.leaseToken,
      state: f.state,
      finished_at: now,
      result_json: resultJson,
      error_json: jsonOrNull(error),
      reason: f.reason,
    });
    const next = f.job;
    w.jobs.push(
      this.jobMove(job, next.to, now, {
        ...(next.to === 'QUEUED' ? { runAt: now + (next.delayMs ?? 0) } : {}),
        ...(next.to === 'UNKNOWN'
          ? {
              nextCheckAt: (attempt.dispatchedAt ?? now) + (next.checkAfterDispatchMs ?? 0),
              lookupFailures: 0,
            }
          : {}),
        resultJson: next.to === 'SUCCEEDED' ? resultJson : null,
        errorJson: next.to === 'FAILED' || next.to === 'NEEDS_REVIEW' ? jsonOrNull(error) : null,
      }),
    );
    if (next.to === 'QUEUED') w.requeued.add(job.queue);
    w.events.push(
      this.event(job, {
        attemptNo: attempt.attemptNo,
        kind: finishEventKind(f.state),
        fromState: 'LEASED',
        toState: next.to,
        actor: f.actor,
        detail: finishEventDetail(f, error),
      }),
    );
  }

  // ---------------------------------------------------------------- jobs

  async jobInsertMany(p: {
    jobs: JobInsert[];
    actor: string;
    transaction?: unknown;
  }): Promise<JobInsertResult[]> {
    if (p.jobs.length === 0) return [];
    if (p.transaction !== undefined) {
      const client = callerClient(p.transaction);
      return this.inCallerTransaction(client, (c) => this.insertJobs(c, p.jobs, p.actor));
    }
    let group = this.inserts.get(p.actor);
    if (!group) {
      const actor = p.actor;
      group = this.groupCommit('enqueue', (jobs: JobInsert[]) => this.insertNow(jobs, actor));
      this.inserts.set(actor, group);
    }
    return group.call(p.jobs);
  }

  /**
   * The common case, every key new, is one statement (insert, events, wake-ups) that reads
   * nothing back; when a key exists, or the jobs (merged callers) name one twice, it writes
   * nothing and the general path below decides in a transaction (dedup or RequestKeyConflict).
   */
  private async insertNow(jobs: JobInsert[], actor: string): Promise<JobInsertResult[]> {
    const keys = new Set<string>();
    for (const j of jobs) keys.add(j.requestKey);
    if (keys.size < jobs.length) return this.tx((c) => this.insertJobs(c, jobs, actor));
    const { params, backoffJson } = newJobParams(jobs);
    if (jobs.some((j) => j.leaseTo !== undefined)) {
      try {
        return await this.insertHandingOff(jobs, actor, params, backoffJson);
      } catch (err) {
        if (!isRequestKeyTaken(err)) throw err;
        return this.tx((c) => this.insertJobs(c, jobs, actor));
      }
    }
    // Jobs awaiting approval wake nobody: no worker may claim them yet.
    const queues = [...new Set(jobs.filter((j) => !j.approval).map((j) => j.queue))];
    let r: pg.QueryResult<{ now: number }>;
    try {
      r = await this.statement<{ now: number }>(
        PREPARED.jobInsertAllNew,
        this.sql.jobInsertAllNew,
        [...params, actor, queues, this.channel],
      );
    } catch (err) {
      if (!isRequestKeyTaken(err)) throw err;
      return this.tx((c) => this.insertJobs(c, jobs, actor));
    }
    this.wakeLocal(queues);
    const now = r.rows[0]!.now;
    return jobs.map((j, i) => ({ job: newQueuedJob(j, now, backoffJson[i]), created: true }));
  }

  /**
   * `insertNow` with hand-offs (`JobInsert.leaseTo`): one statement inserts the jobs and leases
   * those it may to the idle workers offered, as a claim would (attempt 1, its `leased` event).
   * Wakes only the queues that got a job nobody was handed: a woken worker would find nothing.
   */
  private async insertHandingOff(
    jobs: JobInsert[],
    actor: string,
    params: unknown[],
    backoffJson: string[],
  ): Promise<JobInsertResult[]> {
    const offers = jobs.filter((j) => j.leaseTo !== undefined);
    const tokens = new Map(offers.map((j) => [j.id, newLeaseToken()]));
    const r = await this.statement<{ now: number; handed_ids: string[] }>(
      PREPARED.jobInsertHandOff,
      this.sql.jobInsertHandOff,
      [
        ...params,
        actor,
        this.channel,
        offers.map((j) => j.id),
        offers.map((j) => j.leaseTo!.ownerId),
        offers.map((j) => j.leaseTo!.leaseMs),
        offers.map((j) => tokens.get(j.id)!),
      ],
    );
    const row = r.rows[0]!;
    const now = row.now;
    const handed = new Set(row.handed_ids);
    const wakes = new Set<string>();
    const results = jobs.map((j, i): JobInsertResult => {
      const job = newQueuedJob(j, now, backoffJson[i]);
      if (!handed.has(j.id)) {
        wakes.add(j.queue);
        return { job, created: true };
      }
      job.state = 'LEASED';
      job.attemptCount = 1;
      const leased = { ...job };
      const attempt = newLeasedAttempt(leased, {
        ownerId: j.leaseTo!.ownerId,
        leaseToken: tokens.get(j.id)!,
        leasedAt: now,
        // As the statement computed it: now and the lease are whole milliseconds.
        leaseExpiresAt: now + j.leaseTo!.leaseMs,
      });
      return { job, created: true, claimed: { job: leased, attempt } };
    });
    this.wakeLocal(wakes);
    return results;
  }

  /**
   * Runs on the caller's connection, inside the caller's open transaction (the outbox pattern):
   * the jobs exist iff that transaction commits. A savepoint keeps the batch atomic and, on a
   * RequestKeyConflict, leaves the caller's transaction usable.
   */
  private async inCallerTransaction<T>(c: Queryable, fn: (c: Queryable) => Promise<T>): Promise<T> {
    const status = (c as { getTransactionStatus?: () => string | null }).getTransactionStatus?.();
    if (status === 'I')
      throw new InvalidInput(
        'enqueue({ transaction }) needs a client with an open transaction: run BEGIN on it first',
      );
    try {
      await c.query('SAVEPOINT reckon_enqueue');
    } catch (err) {
      throw new InvalidInput(
        `enqueue({ transaction }) could not use the given client: ${errorMessage(err)}`,
      );
    }
    try {
      const value = await fn(c);
      await c.query('RELEASE SAVEPOINT reckon_enqueue');
      return value;
    } catch (err) {
      await c.query('ROLLBACK TO SAVEPOINT reckon_enqueue').catch(() => undefined);
      throw this.classify(err);
    }
  }

  /**
   * The general enqueue, inside a transaction (ours or the caller's). Each job is judged as if
   * the jobs came one call after the other: the first job naming a key inserts it when it is
   * new; a job whose key exists by then (in the store, or from an earlier job of these) gets
   * that job when the fingerprints match (a recorded dedup), else the whole call fails with
   * RequestKeyConflict and writes nothing (invariant 9).
   */
  private async insertJobs(
    c: Queryable,
    jobs: JobInsert[],
    actor: string,
  ): Promise<JobInsertResult[]> {
    const firsts = new Map<string, JobInsert>();
    for (const j of jobs) if (!firsts.has(j.requestKey)) firsts.set(j.requestKey, j);
    const batch = firsts.size === jobs.length ? jobs : [...firsts.values()];
    const { params, backoffJson } = newJobParams(batch);
    const r = await c.query<{ now: number; ids: string[] }>(this.sql.jobInsert, [
      ...params,
      actor,
      this.channel,
    ]);
    const now = r.rows[0]!.now;
    const inserted = new Set(r.rows[0]!.ids);
    const wakes = this.wakesOf.get(c);
    if (wakes) for (const j of batch) if (inserted.has(j.id) && !j.approval) wakes.add(j.queue);
    const results = new Array<JobInsertResult | undefined>(jobs.length);
    const backoffOf = new Map(batch.map((j, i) => [j, backoffJson[i]]));
    const later: number[] = [];
    jobs.forEach((j, i) => {
      if (firsts.get(j.requestKey) === j && inserted.has(j.id))
        results[i] = { job: newQueuedJob(j, now, backoffOf.get(j)), created: true };
      else later.push(i);
    });
    if (later.length > 0) {
      // A new statement sees rows that concurrent enqueues committed while this one waited, and
      // those this call has just inserted.
      const existing = await c.query<JobRow>(this.sql.jobByKeys, [
        [...new Set(later.map((i) => jobs[i]!.requestKey))],
      ]);
      const found = new Map(existing.rows.map((row) => [row.request_key, row]));
      const dedup: EventWrite[] = [];
      for (const i of later) {
        const j = jobs[i]!;
        const row = found.get(j.requestKey);
        assert(row, `request key ${j.requestKey} was neither inserted nor found`);
        if (row.request_fingerprint !== j.fingerprint) {
          // Throwing rolls the whole batch back: nothing is written (invariant 9).
          throw new RequestKeyConflict(
            j.requestKey,
            row.id,
            row.request_fingerprint,
            j.fingerprint,
          );
        }
        const job = jobFromRow(row);
        results[i] = { job, created: false };
        dedup.push(
          this.event(job, {
            attemptNo: null,
            kind: 'enqueue-deduplicated',
            actor,
            detail: { requestKey: j.requestKey },
          }),
        );
      }
      const eventsAt = await this.clockOn(c);
      await c.query(this.sql.eventInsert, [JSON.stringify(dedup), eventsAt]);
    }
    return results as JobInsertResult[];
  }

  async jobGet(p: { id: string }): Promise<JobDetail | null> {
    const r = await this.run(
      (c) =>
        c.query<{ job: JobRow; attempts: AttemptRow[]; events: EventRow[] }>(this.sql.jobDetail, [
          p.id,
        ]),
      { reads: true },
    );
    const row = r.rows[0];
    if (!row) return null;
    return {
      job: jobFromRow(row.job),
      attempts: row.attempts.map(attemptFromRow),
      events: row.events.map(eventFromRow),
    };
  }

  async jobList(p: JobListParams): Promise<JobRecord[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    const param = (value: unknown) => {
      args.push(value);
      return `$${args.length}`;
    };
    if (p.states?.length) where.push(`state = ANY(${param(p.states)}::text[])`);
    if (p.queue !== undefined) where.push(`queue = ${param(p.queue)}`);
    if (p.operation !== undefined) where.push(`operation = ${param(p.operation)}`);
    if (p.beforeId !== undefined) where.push(`id < ${param(p.beforeId)}`);
    const sql =
      `${this.sql.jobListBase} ${where.length ? 'WHERE ' + where.join(' AND ') : ''}` +
      ` ORDER BY id DESC LIMIT ${param(p.limit)}`;
    const r = await this.run((c) => c.query<JobRow>(sql, args), { reads: true });
    return r.rows.map(jobFromRow);
  }

  async jobTransition(t: JobTransition): Promise<boolean> {
    assertTransitionLegal(t);
    return this.tx(async (c) => {
      const { job, now } = await this.lockJob(c, t.jobId);
      const attempt =
        job && job.attemptCount > 0
          ? await this.lockAttempt(c, job.id, job.attemptCount)
          : undefined;
      if (!transitionApplies(job, attempt, t)) return false;
      assert(job, 'transition applies to an existing job');
      if (t.resolution) {
        const r = await c.query(this.sql.attemptResolve, [
          t.jobId,
          t.expectAttemptNo,
          t.resolution.kind,
          t.resolution.source,
          jsonOrNull(t.resolution.evidence),
          now,
        ]);
        assert(r.rowCount === 1, `job ${t.jobId} attempt ${t.expectAttemptNo} took its resolution`);
      }
      const w = new WriteSet();
      w.jobs.push(
        this.jobMove(job, t.to, now, {
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
        }),
      );
      if (t.to === 'QUEUED') w.requeued.add(job.queue);
      w.events.push(
        this.event(job, {
          attemptNo: t.expectAttemptNo || null,
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
        }),
      );
      await this.flush(c, w, now);
      return true;
    });
  }

  private async lockJob(c: Queryable, id: string): Promise<{ job?: JobRecord; now: number }> {
    const r = await c.query<JobRow & { now: Date }>(this.sql.jobLock, [id]);
    const row = r.rows[0];
    if (!row) return { now: await this.clockOn(c) };
    return { job: jobFromRow(row), now: toMs(row.now) };
  }

  private async lockAttempt(
    c: Queryable,
    jobId: string,
    attemptNo: number,
  ): Promise<AttemptRecord | undefined> {
    const r = await c.query<AttemptRow>(this.sql.attemptLock, [jobId, attemptNo]);
    return r.rows[0] && attemptFromRow(r.rows[0]);
  }

  async jobCancel(p: {
    id: string;
    actor: string;
    reason: string;
  }): Promise<JobCancelResult | null> {
    return this.tx(async (c): Promise<JobCancelResult | null> => {
      const { job, now } = await this.lockJob(c, p.id);
      if (!job) return null;
      const errorJson = JSON.stringify({ name: 'Cancelled', message: p.reason });
      const w = new WriteSet();
      if (job.state === 'QUEUED') {
        w.jobs.push(this.jobMove(job, 'CANCELLED', now, { errorJson }));
        w.events.push(
          this.event(job, {
            attemptNo: job.attemptCount || null,
            kind: 'cancelled',
            fromState: 'QUEUED',
            toState: 'CANCELLED',
            actor: p.actor,
            detail: { reason: p.reason },
          }),
        );
      } else if (job.state === 'LEASED') {
        const attempt = await this.lockAttempt(c, job.id, job.attemptCount);
        if (!attempt || attempt.state !== 'LEASED' || attempt.dispatchedAt !== null)
          return {
            cancelled: false,
            job,
            why: 'its current attempt has already dispatched the request',
          };
        // Ending the attempt fences its worker: its dispatch marker write will not apply.
        w.attemptEnds.push({
          job_id: job.id,
          attempt_no: attempt.attemptNo,
          lease_token: attempt.leaseToken,
          state: 'FAILED_BEFORE_SEND',
          finished_at: now,
          result_json: null,
          error_json: null,
          reason: 'cancelled',
        });
        w.jobs.push(this.jobMove(job, 'CANCELLED', now, { errorJson }));
        w.events.push(
          this.event(job, {
            attemptNo: attempt.attemptNo,
            kind: 'cancelled',
            fromState: 'LEASED',
            toState: 'CANCELLED',
            actor: p.actor,
            detail: { reason: p.reason, fencedOwner: attempt.ownerId },
          }),
        );
      } else {
        return { cancelled: false, job, why: `it is ${job.state}` };
      }
      const [after] = await this.flush(c, w, now);
      assert(after, `cancelled job ${job.id} was written`);
      return { cancelled: true, job: after };
    });
  }

  async jobReconcileClaimMany(p: {
    operations: string[];
    limit: number;
    holdMs: number;
  }): Promise<ClaimedAttempt[]> {
    if (p.operations.length === 0 || p.limit <= 0) return [];
    const r = await this.run((c) =>
      c.query<{ job: JobRow; attempt: AttemptRow | null }>(this.sql.jobReconcileClaim, [
        p.operations,
        p.limit,
        p.holdMs,
      ]),
    );
    return r.rows.map((row) => {
      const job = jobFromRow(row.job);
      assert(row.attempt, `UNKNOWN job ${job.id} has its attempt ${job.attemptCount}`);
      return { job, attempt: attemptFromRow(row.attempt) };
    });
  }

  // ---------------------------------------------------------------- attempts

  async attemptClaimMany(p: {
    ownerId: string;
    queues: string[];
    operations: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedAttempt[]> {
    if (p.queues.length === 0 || p.operations.length === 0 || p.limit <= 0) return [];
    // One statement: a failure leaves nothing (or, if ambiguous, leases that simply expire).
    const queues = [...new Set(p.queues)];
    const one = queues.length === 1;
    const inline = claimLimitInline(p.limit);
    const since = this.commits.start();
    const r = await this.statement<ClaimRow>(
      `${one ? PREPARED.attemptClaim : PREPARED.attemptClaimQueues}_${inline ? p.limit : 'n'}`,
      (one ? this.sql.attemptClaim : this.sql.attemptClaimQueues)(inline ? String(p.limit) : '$5'),
      [one ? queues[0] : queues, p.operations, p.ownerId, p.leaseMs, ...(inline ? [] : [p.limit])],
    );
    this.commits.emit('claim', 1, since);
    return r.rows.map((row) => {
      const job = jobFromRow(row);
      const attempt = newLeasedAttempt(job, {
        ownerId: p.ownerId,
        leaseToken: row.a_lease_token,
        leasedAt: row.a_leased_at,
        leaseExpiresAt: row.a_lease_expires_at,
      });
      return { job, attempt };
    });
  }

  attemptDispatchMany(p: { leases: LeaseRef[] }): Promise<DispatchMarkResult[]> {
    return this.dispatches.call(p.leases);
  }

  /**
   * Invariant 3, one statement for the whole (merged) batch: lock, judge (leaseHolds, then the
   * lease unexpired on the clock read after the locks), mark, append `dispatched` events.
   */
  private async dispatchNow(leases: LeaseRef[]): Promise<DispatchMarkResult[]> {
    const r = await this.statement<{
      status: string;
      lease_expires_at: number | null;
      now: number;
    }>(PREPARED.attemptDispatch, this.sql.attemptDispatch, [
      leases.map((l) => l.jobId),
      leases.map((l) => l.attemptNo),
      leases.map((l) => l.leaseToken),
    ]);
    assert(r.rows.length === leases.length, 'the dispatch statement answered once per lease');
    return r.rows.map((row): DispatchMarkResult => {
      if (row.status === 'ok')
        return { ok: true, dispatchedAt: row.now, leaseExpiresAt: row.lease_expires_at! };
      assert(
        row.status === 'lease-lost' || row.status === 'lease-expired',
        `unexpected dispatch status ${row.status}`,
      );
      return { ok: false, reason: row.status };
    });
  }

  attemptHeartbeatMany(p: { leases: LeaseRef[]; leaseMs: number }): Promise<HeartbeatResult[]> {
    let group = this.heartbeats.get(p.leaseMs);
    if (!group) {
      const leaseMs = p.leaseMs;
      group = this.groupCommit('heartbeat', (leases: LeaseRef[]) =>
        this.heartbeatNow(leases, leaseMs),
      );
      this.heartbeats.set(leaseMs, group);
    }
    return group.call(p.leases);
  }

  private async heartbeatNow(leases: LeaseRef[], leaseMs: number): Promise<HeartbeatResult[]> {
    const refs = leases.map((l) => ({
      job_id: l.jobId,
      attempt_no: l.attemptNo,
      lease_token: l.leaseToken,
    }));
    const r = await this.statement<{ job_id: string; attempt_no: number; lease_expires_at: Date }>(
      PREPARED.attemptHeartbeat,
      this.sql.attemptHeartbeat,
      [JSON.stringify(refs), leaseMs],
    );
    const extended = new Map(
      r.rows.map((row) => [leaseKey(row.job_id, row.attempt_no), toMs(row.lease_expires_at)]),
    );
    return leases.map((lease) => {
      const until = extended.get(leaseKey(lease.jobId, lease.attemptNo));
      return until === undefined
        ? { lease, ok: false, leaseExpiresAt: null }
        : { lease, ok: true, leaseExpiresAt: until };
    });
  }

  attemptFinishMany(p: { finishes: AttemptFinish[] }): Promise<boolean[]> {
    return this.finishes.call(p.finishes);
  }

  /**
   * Outcomes, one statement for the whole (merged) batch. What rules.ts would say of each finish
   * under a held lease depends on the locked rows only through the dispatch marker, so it is
   * judged here for both cases, and the statement applies the verdict for the case it finds.
   */
  private async finishNow(finishes: AttemptFinish[]): Promise<boolean[]> {
    const verdicts = finishes.map((f) => ({
      unmarked: finishViolation(f, null),
      marked: finishViolation(f, 0),
    }));
    const col = <T>(fn: (f: AttemptFinish) => T): T[] => finishes.map(fn);
    const r = await this.statement<{ applied: boolean; requeued: string | null }>(
      PREPARED.attemptFinish,
      this.sql.attemptFinish,
      [
        col((f) => f.lease.jobId),
        col((f) => f.lease.attemptNo),
        col((f) => f.lease.leaseToken),
        col((f) => f.state),
        col((f) => f.reason),
        col((f) => f.resultJson),
        col((f) => jsonOrNull(f.error)),
        col((f) => f.job.to),
        col((f) => (f.job.to === 'QUEUED' ? (f.job.delayMs ?? 0) : null)),
        col((f) => (f.job.to === 'UNKNOWN' ? (f.job.checkAfterDispatchMs ?? 0) : null)),
        col((f) => (f.job.to === 'SUCCEEDED' ? f.resultJson : null)),
        col((f) =>
          f.job.to === 'FAILED' || f.job.to === 'NEEDS_REVIEW' ? jsonOrNull(f.error) : null,
        ),
        col((f) => finishEventKind(f.state)),
        col((f) => f.actor),
        col((f) => jsonOrNull(finishEventDetail(f, f.error))),
        verdicts.map((v) => v.unmarked !== undefined),
        verdicts.map((v) => v.marked !== undefined),
        this.channel,
      ],
      (what) => {
        // "finish <index from 1> marked|unmarked": rethrow what rules.ts said of that finish.
        const m = /^finish (\d+) (marked|unmarked)$/.exec(what);
        const v = m ? verdicts[Number(m[1]) - 1] : undefined;
        return (m?.[2] === 'marked' ? v?.marked : v?.unmarked) ?? new InvariantViolation(what);
      },
    );
    assert(r.rows.length === finishes.length, 'the finish statement answered once per outcome');
    const requeued = new Set<string>();
    for (const row of r.rows) if (row.requeued !== null) requeued.add(row.requeued);
    this.wakeLocal(requeued);
    return r.rows.map((row) => row.applied);
  }

  async attemptExpiredList(p: { skewMs: number; limit: number }): Promise<ExpiredAttempt[]> {
    const r = await this.run(
      (c) =>
        c.query<{ job: JobRow; attempt: AttemptRow }>(this.sql.attemptExpiredList, [
          p.skewMs,
          p.limit,
        ]),
      { reads: true },
    );
    return r.rows.map((row) => ({
      attempt: attemptFromRow(row.attempt),
      job: jobFromRow(row.job),
    }));
  }

  async attemptExpireMany(p: { expiries: AttemptExpire[]; skewMs: number }): Promise<boolean[]> {
    if (p.expiries.length === 0) return [];
    return this.tx(async (c) => {
      const { now, locked } = await this.lockLeases(
        c,
        p.expiries.map((e) => e.lease),
      );
      const w = new WriteSet();
      const applied = p.expiries.map((e) => {
        const l = locked.get(leaseKey(e.lease.jobId, e.lease.attemptNo));
        // Re-checked under the lock: a second reclaimer, or a late heartbeat, finds nothing to do.
        if (!l || !leaseHolds(l.job, l.attempt, e.lease)) return false;
        if (l.attempt.leaseExpiresAt + p.skewMs >= now) return false;
        assert(
          (l.attempt.dispatchedAt === null) === (e.state === 'FAILED_BEFORE_SEND'),
          `expiry of job ${l.job.id} attempt ${l.attempt.attemptNo} misread its dispatch marker`,
        );
        assertFinishLegal(l.job, l.attempt, { ...e, resultJson: null, error: null });
        this.finishAttempt(w, l.job, l.attempt, e, now);
        l.attempt = { ...l.attempt, state: e.state };
        return true;
      });
      await this.flush(c, w, now);
      return applied;
    });
  }

  // ---------------------------------------------------------------- events and stats

  async eventAppendMany(p: { events: EventInsert[] }): Promise<void> {
    if (p.events.length === 0) return;
    const rows = p.events.map((e) => ({
      job_id: e.jobId,
      attempt_no: e.attemptNo,
      kind: e.kind,
      from_state: e.fromState ?? null,
      to_state: e.toState ?? null,
      actor: e.actor,
      detail_json: jsonOrNull(e.detail),
    }));
    await this.run((c) => c.query(this.sql.eventAppend, [JSON.stringify(rows)]));
  }

  // ---------------------------------------------------------------- approvals (approvals.ts)

  private target(): ApprovalTarget {
    return { schema: this.schema, channel: this.channel };
  }

  jobApprovalList(p: { operation?: string; limit: number }): Promise<JobRecord[]> {
    return this.run((c) => approvalList(c, this.target(), p), { reads: true });
  }

  async jobApprovalDecide(p: ApprovalDecide): Promise<ApprovalDecideResult> {
    const r = await this.run((c) => approvalDecide(c, this.target(), p));
    if (r.ok && r.job.state === 'QUEUED') this.wakeLocal([r.job.queue]);
    return r;
  }

  jobApprovalExpireMany(p: {
    limit: number;
    actor: string;
    error: ErrorInfo;
  }): Promise<JobRecord[]> {
    return this.run((c) => approvalExpireMany(c, this.target(), p));
  }

  jobApprovalStats(): Promise<ApprovalStats> {
    return this.run((c) => approvalStats(c, this.target()), { reads: true });
  }

  async statsGet(): Promise<StoreStats> {
    // Counting every job is a scan: allowed here (see the pool's `connect` handler).
    const r = await this.tx(async (c) => {
      await c.query('SET LOCAL enable_seqscan = on');
      return c.query<{
        now: Date;
        counts: { queue: string; state: JobState; n: number }[];
        oldest: { queue: string; t: string }[];
        by_operation: { operation: string; unknown: number; needs_review: number }[];
        expired: number;
      }>(this.sql.stats);
    });
    const row = r.rows[0]!;
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
    for (const c of row.counts) entry(c.queue).counts[c.state] = c.n;
    for (const o of row.oldest) entry(o.queue).oldestDueAt = toMs(o.t);
    return {
      now: toMs(row.now),
      queues: [...byQueue.values()].sort((a, b) => a.queue.localeCompare(b.queue)),
      byOperation: row.by_operation.map((b) => ({
        operation: b.operation,
        unknown: b.unknown,
        needsReview: b.needs_review,
      })),
      expiredLeases: row.expired,
    };
  }

  // ---------------------------------------------------------------- notifications

  async workSubscribe(p: {
    queues: string[];
    onWork: () => void;
  }): Promise<{ close(): Promise<void> }> {
    this.connPool();
    this.listener ??= new WorkListener(this.clientConfig, this.channel, (pid) =>
      this.ownBackends.has(pid),
    );
    return this.listener.subscribe(p.queues, p.onWork);
  }

  /** Outcome waiters' reads and wake-ups: see outcome-notify.ts. */
  jobStateMany(p: { ids: string[] }): Promise<JobStateRow[]> {
    return this.run((c) => jobStatesRead(c, this.schema, p.ids), { reads: true });
  }

  jobChangeSubscribe(p: {
    onChange: (jobIds: string[], states?: JobStateRow[]) => void;
  }): Promise<{ close(): Promise<void> }> {
    this.connPool();
    return jobChangesSubscribe({ config: this.clientConfig, schema: this.schema, ...p });
  }
}

// ------------------------------------------------------------------ helpers

function leaseKey(jobId: string, attemptNo: number): string {
  return `${jobId}#${attemptNo}`;
}

/** The claim statement's row: the job's columns (times in ms) and its new attempt's. */
type ClaimRow = JobRow & {
  a_lease_token: string;
  a_leased_at: number;
  a_lease_expires_at: number;
};

/** The event kind of an attempt's end, e.g. `attempt-failed-before-send`. */
function finishEventKind(state: string): string {
  return `attempt-${state.toLowerCase().replaceAll('_', '-')}`;
}

function finishEventDetail(
  f: AttemptFinish | AttemptExpire,
  error: ErrorInfo | null,
): Record<string, unknown> {
  return {
    attemptState: f.state,
    ...(f.reason ? { reason: f.reason } : {}),
    ...(error ? { error } : {}),
    ...(f.job.delayMs !== undefined ? { retryInMs: f.job.delayMs } : {}),
  };
}

/**
 * What rules.ts's `assertFinishLegal` says of a finish whose lease holds (so job and attempt are
 * LEASED, on the lease's attempt), given whether the attempt carries a dispatch marker: the
 * error it throws, or undefined. It reads nothing else of the locked rows; should it ever read
 * more, the statement that applies this verdict must pass that too.
 */
function finishViolation(
  f: AttemptFinish,
  dispatchedAt: number | null,
): InvariantViolation | undefined {
  const job = { id: f.lease.jobId, state: 'LEASED' } as JobRecord;
  const attempt = { attemptNo: f.lease.attemptNo, state: 'LEASED', dispatchedAt } as AttemptRecord;
  try {
    assertFinishLegal(job, attempt, f);
    return undefined;
  } catch (err) {
    if (err instanceof InvariantViolation) return err;
    throw err;
  }
}

/** The check named by a statement that sql.ts's `fail` aborted, or undefined for other errors. */
function failedCheck(err: unknown): string | undefined {
  if (!(err instanceof Error) || (err as { code?: unknown }).code !== '22P02') return undefined;
  const at = err.message.indexOf(FAIL_MARK);
  if (at < 0) return undefined;
  const rest = err.message.slice(at + FAIL_MARK.length);
  const end = rest.lastIndexOf('"');
  return end >= 0 ? rest.slice(0, end) : rest;
}

/**
 * The parameters of new jobs as `jobInsert` and `jobInsertAllNew` take them (sql.ts
 * `NEW_JOB_SHARED`): ids, keys, fingerprints and inputs as arrays; every other column as one
 * scalar when all the jobs share its value, else as an array. Also each job's backoff as written
 * (jobs of one operation share one policy object: serialized once).
 */
function newJobParams(jobs: JobInsert[]): { params: unknown[]; backoffJson: string[] } {
  const n = jobs.length;
  const ids = new Array<string>(n);
  const keys = new Array<string>(n);
  const fingerprints = new Array<string>(n);
  const inputs = new Array<string>(n);
  const backoffJson = new Array<string>(n);
  let lastBackoff: unknown = undefined;
  let lastJson = '';
  for (let i = 0; i < n; i++) {
    const j = jobs[i]!;
    ids[i] = j.id;
    keys[i] = j.requestKey;
    fingerprints[i] = j.fingerprint;
    inputs[i] = j.inputJson;
    if (j.backoff !== lastBackoff) {
      lastBackoff = j.backoff;
      lastJson = JSON.stringify(j.backoff);
    }
    backoffJson[i] = lastJson;
  }
  const params: unknown[] = [ids, keys, fingerprints, inputs];
  for (const [name] of NEW_JOB_SHARED) {
    const values: unknown[] =
      name === 'backoff_json' ? backoffJson : jobs.map((j) => sharedColumn(j, name));
    const first = values[0];
    if (values.every((v) => v === first)) params.push(first, []);
    else params.push(null, values);
  }
  return { params, backoffJson };
}

/** A shared column's value for one job; backoff_json is serialized once, by `newJobParams`. */
function sharedColumn(
  j: JobInsert,
  name: Exclude<(typeof NEW_JOB_SHARED)[number][0], 'backoff_json'>,
): unknown {
  switch (name) {
    case 'queue':
      return j.queue;
    case 'operation':
      return j.operation;
    case 'run_id':
      return j.runId;
    case 'step_id':
      return j.stepId;
    case 'priority':
      return j.priority;
    case 'delay_ms':
      return j.delayMs;
    case 'run_at':
      return j.runAt;
    case 'max_attempts':
      return j.maxAttempts;
    case 'timeout_ms':
      return j.timeoutMs;
    case 'approval':
      return j.approval !== undefined;
    case 'approval_reason':
      return j.approval?.reason ?? null;
    case 'approval_expires_ms':
      return j.approval?.expiresInMs ?? null;
  }
}

/** A unique violation of the request key: some job of the insert names a key that exists. */
function isRequestKeyTaken(err: unknown): boolean {
  const e = err as { code?: unknown; constraint?: unknown };
  return e.code === '23505' && e.constraint === REQUEST_KEY_CONSTRAINT;
}

/** The UNIQUE constraint of jobs.request_key (schema.ts), as PostgreSQL names it. */
const REQUEST_KEY_CONSTRAINT = 'jobs_request_key_key';

/** The caller's client for a transactional enqueue: anything with pg's `query` method. */
function callerClient(transaction: unknown): Queryable {
  if (
    typeof transaction !== 'object' ||
    transaction === null ||
    typeof (transaction as { query?: unknown }).query !== 'function'
  ) {
    throw new InvalidInput(
      'transaction must be a pg Client or PoolClient with an open transaction (BEGIN already run)',
    );
  }
  return transaction as Queryable;
}

/** Takes `?schema=` out of the URL (it is reckon's, not the driver's) and validates the name. */
function splitSchema(
  connectionString: string,
  option: string | undefined,
): { connectionString: string; schema: string } {
  let fromUrl: string | undefined;
  let rest = connectionString;
  const q = connectionString.indexOf('?');
  if (q >= 0) {
    const params = new URLSearchParams(connectionString.slice(q + 1));
    fromUrl = params.get('schema') ?? undefined;
    params.delete('schema');
    const tail = params.toString();
    rest = connectionString.slice(0, q) + (tail ? `?${tail}` : '');
  }
  if (option !== undefined && fromUrl !== undefined && option !== fromUrl)
    throw new InvalidInput(
      `the store URL names schema ${JSON.stringify(fromUrl)} but the schema option is ${JSON.stringify(option)}`,
    );
  const schema = option ?? fromUrl ?? DEFAULT_SCHEMA;
  if (typeof schema !== 'string' || !SCHEMA_NAME_RE.test(schema))
    throw new InvalidInput(
      `schema ${JSON.stringify(schema)} is not a valid name: 1-48 lower-case letters, digits or _, not starting with a digit`,
    );
  return { connectionString: rest, schema };
}

/** The URL without its password, for messages. */
function redact(url: string): string {
  return url.replace(/(\/\/[^:/@]+):[^@/]*@/, '$1:***@');
}

/**
 * Is this a failure to reach the server, rather than an answer from it? Driver errors without a
 * SQLSTATE can only be told apart by their message; SQLSTATE class 08 is "connection exception",
 * 57P01-57P03 are shutdowns, 3D000 a missing database, 28xxx refused credentials.
 */
function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error) || err instanceof InvariantViolation) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (NET_CODES.has(code)) return true;
    if (/^(08|28)/.test(code) || ['57P01', '57P02', '57P03', '3D000'].includes(code)) return true;
  }
  return /Connection terminated|connection timeout|timeout expired|Query read timeout|not queryable|Client was closed|Connection ended/i.test(
    err.message,
  );
}

const NET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
]);
