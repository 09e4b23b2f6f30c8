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
 *    locked rows are the statement's SQL (statements.ts), and a broken invariant aborts it whole.
 *    Colder paths (reclaimer, reconciler, cancel) lock, judge in JS and write in a transaction.
 *  - Migrations run in one transaction under an advisory lock, so processes starting together
 *    migrate one after the other.
 *  - Work notifications: LISTEN/NOTIFY on a channel per schema (notify.ts).
 *
 * Connection loss: a pool or listener connection that dies never crashes the process; calls fail
 * with `StoreUnavailable` until the server is back, and the pool reconnects by itself.
 */
import pg from 'pg';
import { InvalidInput, InvariantViolation, SchemaTooNew, assert } from '../../core/errors.js';
import type { JobState } from '../../core/states.js';
import type { ErrorInfo } from '../../core/errors.js';
import { assertFinishLegal, assertTransitionLegal } from '../rules.js';
import {
  attemptFromRow,
  eventFromRow,
  jobFromRow,
  jsonOrNull,
  newLeasedAttempt,
  statsFromRows,
  toMs,
  type AttemptRow,
  type EventRow,
  type JobRow,
} from '../rows.js';
import {
  approvalDecide,
  approvalExpireMany,
  approvalList,
  approvalStats,
  type ApprovalTarget,
} from './approvals.js';
import { jobChangesSubscribe, jobStatesRead } from './outcome-notify.js';
import { jobPruneMany as pruneJobs } from './retention.js';
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
  finishParams,
  isTerminal,
  planCancel,
  planExpire,
  planTransition,
  type FinishParams,
} from '../plan/index.js';
import { GroupCommit } from '../group-commit.js';
import { WorkListener } from './notify.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, MIGRATIONS_TABLE_SQL } from './schema.js';
import {
  claimLimitInline,
  quoteIdent,
  SCHEMA_NAME_RE,
  statements,
  workChannel,
  type Statements,
} from './statements.js';
import { JobInserter } from './insert.js';
import {
  FINISH_YIELD_MS,
  PgConnection,
  TxWrites,
  pgGroupCommit,
  type Queryable,
} from './commit.js';

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
/**
 * The hot statements are prepared once per pooled connection under these names, so the server
 * parses and plans each once per connection instead of once per call. The claims' names take a
 * suffix: their limit, or `n` for the one statement of the other sizes (`claimLimitInline`).
 */
const PREPARED = {
  attemptClaim: 'reckon_attempt_claim',
  attemptClaimQueues: 'reckon_attempt_claim_queues',
  attemptDispatch: 'reckon_attempt_dispatch',
  attemptFinish: 'reckon_attempt_finish',
  attemptHeartbeat: 'reckon_attempt_heartbeat',
} as const;
/** pg_advisory_xact_lock's first key: "reckon migrations". */
const MIGRATION_LOCK_NAMESPACE = 0x7265636b;

interface LockedLease {
  job: JobRecord;
  attempt: AttemptRecord;
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
  private readonly db: PgConnection;
  private readonly inserter: JobInserter;
  private listener: WorkListener | null = null;
  /** Backend process ids of the pool's connections (see `WorkListener`). */
  private readonly ownBackends = new Set<number>();
  /** Errors of idle pool connections (e.g. the server restarted); kept for health, never thrown. */
  poolErrors = 0;
  /** Concurrent callers of the hot write paths share transactions (see ../group-commit.ts). */
  private readonly commits = new CommitObservers();
  private readonly dispatches = pgGroupCommit(this.commits, 'dispatch', (leases: LeaseRef[]) =>
    this.dispatchNow(leases),
  );
  private readonly finishes = pgGroupCommit(
    this.commits,
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
    this.db = new PgConnection({
      location: this.location,
      poolMax: this.poolMax,
      onCommitWakes: (queues) => this.wakeLocal(queues),
    });
    this.inserter = new JobInserter({
      db: this.db,
      sql: this.sql,
      channel: this.channel,
      commits: this.commits,
      wakeLocal: (queues) => this.wakeLocal(queues),
      clockOn: (c) => this.clockOn(c),
    });
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
    if (this.db.pool) return;
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
    // synchronous_commit is pinned on: "durable when it returns" must not depend on a role's or
    // server's default (a claim turns it off for its own transaction only, see statements.ts).
    pool.on('connect', (client) => {
      client.query('SET enable_seqscan = off; SET synchronous_commit = on').catch(() => undefined);
      const pid = (client as { processID?: number | null }).processID;
      if (typeof pid === 'number') {
        this.ownBackends.add(pid);
        client.once('end', () => this.ownBackends.delete(pid));
      }
    });
    this.db.pool = pool;
    try {
      await this.migrate();
    } catch (err) {
      this.db.pool = null;
      await pool.end().catch(() => undefined);
      throw err;
    }
  }

  private async migrate(): Promise<void> {
    await this.db.tx(async (c) => {
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
    return this.db.run((c) => this.versionOn(c), { reads: true });
  }

  async close(): Promise<void> {
    const pool = this.db.pool;
    const listener = this.listener;
    this.db.pool = null;
    this.listener = null;
    await listener?.stop();
    await pool?.end();
  }

  async clockNow(): Promise<number> {
    const r = await this.db.run((c) => c.query<{ now: Date }>(this.sql.clockNow), { reads: true });
    return toMs(r.rows[0]!.now);
  }

  // ---------------------------------------------------------------- connections

  jobPruneMany(p: JobPruneParams): Promise<JobPruneResult> {
    const db = this.db;
    const h = { schema: this.schema, tx: db.tx.bind(db), read: db.run.bind(db) };
    return pruneJobs({ ...h, read: (fn) => h.read(fn, { reads: true }) }, p);
  }

  onCommit(fn: (c: StoreCommit) => void): () => void {
    return this.commits.add(fn);
  }

  /** Work that a statement of ours made due, committed: wakes this process's subscribers. */
  private wakeLocal(queues: Iterable<string>): void {
    this.listener?.wake(queues);
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
  private async flush(c: Queryable, w: TxWrites, now: number): Promise<JobRecord[]> {
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
      const wakes = this.db.wakesOf.get(c);
      if (wakes) for (const q of w.requeued) wakes.add(q);
    }
    return moved;
  }

  // ---------------------------------------------------------------- jobs

  jobInsertMany(p: {
    jobs: JobInsert[];
    actor: string;
    transaction?: unknown;
  }): Promise<JobInsertResult[]> {
    return this.inserter.insertMany(p);
  }

  async jobGet(p: { id: string }): Promise<JobDetail | null> {
    const r = await this.db.run(
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
    const r = await this.db.run((c) => c.query<JobRow>(sql, args), { reads: true });
    return r.rows.map(jobFromRow);
  }

  async jobTransition(t: JobTransition): Promise<boolean> {
    assertTransitionLegal(t);
    return this.db.tx(async (c) => {
      const { job, now } = await this.lockJob(c, t.jobId);
      const attempt =
        job && job.attemptCount > 0
          ? await this.lockAttempt(c, job.id, job.attemptCount)
          : undefined;
      const plan = planTransition({ job, attempt, t, now });
      if (!plan || !job) return false;
      const r = plan.resolution;
      if (r) {
        const done = await c.query(this.sql.attemptResolve, [
          job.id,
          r.attemptNo,
          r.kind,
          r.source,
          r.evidenceJson,
          r.resolvedAt,
        ]);
        assert(done.rowCount === 1, `job ${job.id} attempt ${r.attemptNo} took its resolution`);
      }
      const w = new TxWrites();
      w.add(job, plan);
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
    return this.db.tx(async (c): Promise<JobCancelResult | null> => {
      const { job, now } = await this.lockJob(c, p.id);
      if (!job) return null;
      const attempt =
        job.state === 'LEASED' ? await this.lockAttempt(c, job.id, job.attemptCount) : undefined;
      const plan = planCancel({ job, attempt, actor: p.actor, reason: p.reason, now });
      if ('why' in plan) return { cancelled: false, job, why: plan.why };
      const w = new TxWrites();
      w.add(job, plan.write);
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
    const r = await this.db.run((c) =>
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
    const r = await this.db.statement<ClaimRow>(
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
    const r = await this.db.statement<{
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
      group = pgGroupCommit(this.commits, 'heartbeat', (leases: LeaseRef[]) =>
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
    const r = await this.db.statement<{
      job_id: string;
      attempt_no: number;
      lease_expires_at: Date;
    }>(PREPARED.attemptHeartbeat, this.sql.attemptHeartbeat, [JSON.stringify(refs), leaseMs]);
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
    // What the plan decides without the rows; the statement adds the fence and the clock.
    const planned = finishes.map(finishParams);
    const pcol = <T>(fn: (f: FinishParams) => T): T[] => planned.map(fn);
    const r = await this.db.statement<{ applied: boolean; requeued: string | null }>(
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
        pcol((f) => f.jobTo),
        pcol((f) => f.runDelayMs),
        pcol((f) => f.checkAfterDispatchMs),
        pcol((f) => f.jobResultJson),
        pcol((f) => f.jobErrorJson),
        pcol((f) => f.eventKind),
        col((f) => f.actor),
        pcol((f) => f.eventDetailJson),
        verdicts.map((v) => v.unmarked !== undefined),
        verdicts.map((v) => v.marked !== undefined),
        this.channel,
        pcol((f) => f.resetsLookupFailures),
        pcol((f) => isTerminal(f.jobTo)),
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
    const r = await this.db.run(
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
    return this.db.tx(async (c) => {
      const { now, locked } = await this.lockLeases(
        c,
        p.expiries.map((e) => e.lease),
      );
      const w = new TxWrites();
      const applied = p.expiries.map((e) => {
        const l = locked.get(leaseKey(e.lease.jobId, e.lease.attemptNo));
        // Judged again under the lock: a second reclaimer, or a late heartbeat, finds nothing to do.
        const plan = planExpire({
          job: l?.job,
          attempt: l?.attempt,
          expire: e,
          skewMs: p.skewMs,
          now,
        });
        if (!plan || !l) return false;
        w.add(l.job, plan);
        // A second expiry of the same lease in this batch finds it ended.
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
    await this.db.run((c) => c.query(this.sql.eventAppend, [JSON.stringify(rows)]));
  }

  // ---------------------------------------------------------------- approvals (approvals.ts)

  private target(): ApprovalTarget {
    return { schema: this.schema, channel: this.channel };
  }

  jobApprovalList(p: { operation?: string; limit: number }): Promise<JobRecord[]> {
    return this.db.run((c) => approvalList(c, this.target(), p), { reads: true });
  }

  async jobApprovalDecide(p: ApprovalDecide): Promise<ApprovalDecideResult> {
    const r = await this.db.run((c) => approvalDecide(c, this.target(), p));
    if (r.ok && r.job.state === 'QUEUED') this.wakeLocal([r.job.queue]);
    return r;
  }

  jobApprovalExpireMany(p: {
    limit: number;
    actor: string;
    error: ErrorInfo;
  }): Promise<JobRecord[]> {
    return this.db.run((c) => approvalExpireMany(c, this.target(), p));
  }

  jobApprovalStats(): Promise<ApprovalStats> {
    return this.db.run((c) => approvalStats(c, this.target()), { reads: true });
  }

  async statsGet(): Promise<StoreStats> {
    // Counting every job is a scan: allowed here (see the pool's `connect` handler).
    const r = await this.db.tx(async (c) => {
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
    return statsFromRows({ ...row, byOperation: row.by_operation });
  }

  // ---------------------------------------------------------------- notifications

  async workSubscribe(p: {
    queues: string[];
    onWork: () => void;
  }): Promise<{ close(): Promise<void> }> {
    this.db.connPool();
    this.listener ??= new WorkListener(this.clientConfig, this.channel, (pid) =>
      this.ownBackends.has(pid),
    );
    return this.listener.subscribe(p.queues, p.onWork);
  }

  /** Outcome waiters' reads and wake-ups: see outcome-notify.ts. */
  jobStateMany(p: { ids: string[] }): Promise<JobStateRow[]> {
    return this.db.run((c) => jobStatesRead(c, this.schema, p.ids), { reads: true });
  }

  jobChangeSubscribe(p: {
    onChange: (jobIds: string[], states?: JobStateRow[]) => void;
  }): Promise<{ close(): Promise<void> }> {
    this.db.connPool();
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
