/**
 * The shared store: one PostgreSQL schema used by many worker processes on many hosts.
 *
 * Same semantics as the SQLite store, method by method; the differences are how they are made
 * safe with concurrent writers:
 *  - Lease expiry is judged by the database's clock (`clock_timestamp()`), never a worker's.
 *  - Claims take rows with `FOR UPDATE SKIP LOCKED`, so claimers never wait on each other. Fenced
 *    writes lock the rows they judge (`FOR UPDATE`, in job id order, a job before its attempt),
 *    judge them by the shared rules of ../rules.ts, then write; the dispatch marker and the
 *    outcome take no lock step: their conditional updates are the fence, judged on each row's
 *    latest version (a row lock is a WAL record of its own).
 *  - The worker's hot path (claim, dispatch marker, outcome) and the common enqueue are ONE
 *    statement each (a data-modifying CTE that judges, writes and appends its events), so
 *    each costs one round trip and one commit, and concurrent callers share it (group commit).
 *    The rules that need no row are applied here before the statement; those that need the
 *    rows are the statement's SQL (statements.ts), and a broken invariant aborts it whole.
 *    Colder paths (reclaimer, reconciler, cancel) lock, judge in JS and write in a transaction.
 *  - Migrations run in one transaction under an advisory lock, so processes starting together
 *    migrate one after the other.
 *  - Work notifications: LISTEN/NOTIFY on a channel per schema (notify.ts).
 *
 * Connection loss: a pool or listener connection that dies never crashes the process; calls fail
 * with `StoreUnavailable` until the server is back, and the pool reconnects by itself.
 */
import pg from 'pg';
import { InvalidInput, SchemaTooNew } from '../../core/errors.js';
import { jsonOrNull, toMs } from '../rows.js';
import {
  approvalDecide,
  approvalExpireMany,
  approvalList,
  approvalStats,
  type ApprovalTarget,
} from './approvals.js';
import { tokenFind, tokenInsert, tokenList, tokenRevoke } from './tokens.js';
import { jobChangesSubscribe, jobStatesRead } from './outcome-notify.js';
import { jobPruneMany as pruneJobs } from './retention.js';
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
import { GroupCommit } from '../group-commit.js';
import { needsHistory } from '../plan/index.js';
import { WorkListener } from './notify.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, MIGRATIONS_TABLE_SQL } from './schema.js';
import {
  quoteIdent,
  SCHEMA_NAME_RE,
  statements,
  workChannel,
  type Statements,
} from './statements.js';
import { JobInserter } from './insert.js';
import type { PgHandle } from './handle.js';
import * as attempts from './attempts.js';
import * as flow from './flow.js';
import * as moves from './moves.js';
import * as reads from './reads.js';
import { FINISH_YIELD_MS, PgConnection, pgGroupCommit, type Queryable } from './commit.js';

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
/** A journal with fewer jobs than this plans well enough without statistics. */
const ANALYZE_ROWS_MIN = 10_000;

/** pg_advisory_xact_lock's first key: "reckon migrations". */
const MIGRATION_LOCK_NAMESPACE = 0x7265636b;

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
  /** What reads.ts, attempts.ts and moves.ts use of this store. */
  private readonly h: PgHandle;
  private listener: WorkListener | null = null;
  /** Backend process ids of the pool's connections (see `WorkListener`). */
  private readonly ownBackends = new Set<number>();
  /** Errors of idle pool connections (e.g. the server restarted); kept for health, never thrown. */
  poolErrors = 0;
  /** Concurrent callers of the hot write paths share transactions (see ../group-commit.ts). */
  private readonly commits = new CommitObservers();
  private readonly dispatches = pgGroupCommit(this.commits, 'dispatch', (leases: LeaseRef[]) =>
    attempts.dispatchNow(this.h, leases),
  );
  private readonly finishes = pgGroupCommit(
    this.commits,
    'finish',
    (finishes: AttemptFinish[]) => attempts.finishNow(this.h, finishes),
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
    this.h = {
      db: this.db,
      sql: this.sql,
      channel: this.channel,
      commits: this.commits,
      wakeLocal: (queues) => this.wakeLocal(queues),
    };
    this.inserter = new JobInserter({
      db: this.db,
      sql: this.sql,
      channel: this.channel,
      commits: this.commits,
      wakeLocal: (queues) => this.wakeLocal(queues),
      clockOn: (c) => moves.clockOn(this.h, c),
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
      await this.analyzeIfNeeded(c);
    });
  }

  /**
   * Planner statistics for a journal that has rows but no statistics yet: filled by a bulk
   * enqueue, or restored with pg_restore (a dump carries none), before autovacuum's first
   * analyze. Without them PostgreSQL guesses every operation to be rare and plans a list by
   * operation as a read and sort of all its jobs instead of a walk of `jobs_operation` (issue
   * #28: 1.4 s with 250,000 jobs of the operation). Runs once: afterwards the statistics exist
   * and autovacuum keeps them. ANALYZE reads a fixed sample and takes no lock that blocks
   * reads or writes.
   */
  private async analyzeIfNeeded(c: Queryable): Promise<void> {
    const r = await c.query<{ missing: boolean }>(this.sql.jobsStatisticsMissing, [
      this.schema,
      ANALYZE_ROWS_MIN,
    ]);
    if (r.rows[0]?.missing) await c.query(this.sql.analyzeJobs);
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
    return this.dispatches.call(p.leases);
  }

  attemptHeartbeatMany(p: { leases: LeaseRef[]; leaseMs: number }): Promise<HeartbeatResult[]> {
    let group = this.heartbeats.get(p.leaseMs);
    if (!group) {
      const leaseMs = p.leaseMs;
      group = pgGroupCommit(this.commits, 'heartbeat', (leases: LeaseRef[]) =>
        attempts.heartbeatNow(this.h, leases, leaseMs),
      );
      this.heartbeats.set(leaseMs, group);
    }
    return group.call(p.leases);
  }

  attemptFinishMany(p: { finishes: AttemptFinish[] }): Promise<boolean[]> {
    if (!p.finishes.some((f) => needsHistory(f.job.to))) return this.finishes.call(p.finishes);
    return this.finishSplit(p.finishes);
  }

  /** Outcomes that need their job's history go through a transaction (moves.ts), the rest as usual. */
  private async finishSplit(finishes: AttemptFinish[]): Promise<boolean[]> {
    const judged = finishes.filter((f) => needsHistory(f.job.to));
    const hot = finishes.filter((f) => !needsHistory(f.job.to));
    const [a, b] = await Promise.all([
      moves.attemptFinishWithHistory(this.h, judged),
      hot.length > 0 ? this.finishes.call(hot) : Promise.resolve([]),
    ]);
    let i = 0;
    let j = 0;
    return finishes.map((f) => (needsHistory(f.job.to) ? a[i++]! : b[j++]!));
  }

  attemptExpiredList(p: { skewMs: number; limit: number }): Promise<ExpiredAttempt[]> {
    return reads.attemptExpiredList(this.h, p);
  }

  attemptExpireMany(p: { expiries: AttemptExpire[]; skewMs: number }): Promise<boolean[]> {
    return moves.attemptExpireMany(this.h, p);
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
    return { schema: this.schema };
  }

  jobApprovalList(p: { operation?: string; limit: number }): Promise<JobRecord[]> {
    return this.db.run((c) => approvalList(c, this.target(), p), { reads: true });
  }

  jobApprovalDecide(p: ApprovalDecide): Promise<ApprovalDecideResult> {
    return approvalDecide(this.h, p);
  }

  jobApprovalExpireMany(p: { limit: number; actor: string }): Promise<JobRecord[]> {
    return approvalExpireMany(this.h, p);
  }

  jobApprovalStats(): Promise<ApprovalStats> {
    return this.db.run((c) => approvalStats(c, this.target()), { reads: true });
  }

  statsGet(): Promise<StoreStats> {
    return reads.statsGet(this.h);
  }
  // ---------------------------------------------------------------- flow control (flow.ts)

  attemptClaimLimited(p: FlowClaimParams): Promise<FlowClaimResult> {
    return flow.attemptClaimLimited(this.h, this.schema, p);
  }

  flowBackoff(p: { operation: string; rateKey: string; delayMs: number }): Promise<void> {
    return flow.flowBackoff(this.h, this.schema, p);
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
    return this.db.run((c) => tokenInsert(c, this.schema, p));
  }

  tokenList(p: { includeRevoked?: boolean }): Promise<TokenRecord[]> {
    return this.db.run((c) => tokenList(c, this.schema, p), { reads: true });
  }

  tokenFind(p: { hash: string } | { id: string }): Promise<TokenRecord | null> {
    return this.db.run((c) => tokenFind(c, this.schema, p), { reads: true });
  }

  tokenRevoke(p: { name: string }): Promise<TokenRecord | null> {
    return this.db.run((c) => tokenRevoke(c, this.schema, p));
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
