/**
 * PostgreSQL reads: a job with its history, listings, stats, expired leases.
 */
import type { JobState } from '../../core/states.js';
import {
  attemptFromRow,
  jobFromRow,
  statsFromRows,
  type AttemptRow,
  type EventRow,
  type JobRow,
} from '../rows.js';
import {
  exactPage,
  finishedBuckets,
  hasFilters,
  idRange,
  likePattern,
  onlyIndexedStates,
  searchPage,
} from '../search.js';
import { detailFromRows } from '../trail.js';
import type {
  ActivityParams,
  ActivityStats,
  ExpiredAttempt,
  JobDetail,
  JobListParams,
  JobRecord,
  JobSearchPage,
  JobSearchParams,
  StoreStats,
} from '../store.js';
import type { PgHandle } from './handle.js';

export async function jobGet(h: PgHandle, p: { id: string }): Promise<JobDetail | null> {
  const r = await h.db.run(
    (c) =>
      c.query<{ job: JobRow; attempts: AttemptRow[]; events: EventRow[] }>(h.sql.jobDetail, [p.id]),
    { reads: true },
  );
  const row = r.rows[0];
  if (!row) return null;
  return detailFromRows(row.job, row.attempts, row.events);
}

export async function jobList(h: PgHandle, p: JobListParams): Promise<JobRecord[]> {
  const where: string[] = [];
  const args: unknown[] = [];
  const param = (value: unknown) => {
    args.push(value);
    return `$${args.length}`;
  };
  if (p.states?.length) where.push(`state = ANY(${param(p.states)}::text[])`);
  if (p.queue !== undefined) where.push(`queue = ${param(p.queue)}`);
  if (p.operation !== undefined) where.push(operationRange(param(p.operation)));
  if (p.runId !== undefined) where.push(`run_id = ${param(p.runId)}`);
  if (p.beforeId !== undefined) where.push(`id < ${param(p.beforeId)}`);
  const sql =
    `${h.sql.jobListBase} ${where.length ? 'WHERE ' + where.join(' AND ') : ''}` +
    ` ORDER BY ${newestOf(p.operation)} LIMIT ${param(p.limit)}`;
  const r = await h.db.run((c) => c.query<JobRow>(sql, args), { reads: true });
  return r.rows.map(jobFromRow);
}

export async function attemptExpiredList(
  h: PgHandle,
  p: { skewMs: number; limit: number },
): Promise<ExpiredAttempt[]> {
  const r = await h.db.run(
    (c) =>
      c.query<{ job: JobRow; attempt: AttemptRow }>(h.sql.attemptExpiredList, [p.skewMs, p.limit]),
    { reads: true },
  );
  return r.rows.map((row) => {
    const job = jobFromRow(row.job);
    return { attempt: attemptFromRow(row.attempt, job), job };
  });
}

export async function statsGet(h: PgHandle): Promise<StoreStats> {
  // Counting every job is a scan: allowed here (see the pool's `connect` handler).
  const r = await h.db.tx(async (c) => {
    await c.query('SET LOCAL enable_seqscan = on');
    return c.query<{
      now: Date;
      counts: { queue: string; state: JobState; n: number }[];
      oldest: { queue: string; t: string }[];
      by_operation: { operation: string; unknown: number; needs_review: number }[];
      expired: number;
    }>(h.sql.stats);
  });
  const row = r.rows[0]!;
  return statsFromRows({ ...row, byOperation: row.by_operation });
}

/**
 * One operation's jobs, written so that PostgreSQL reads them along `jobs_operation` whatever
 * its statistics say. As a range (`>=` and `<=`, not `=`) the operation is no constant of the
 * sort, so only that index yields `newestOf(operation)` without sorting every match. With `=`,
 * the planner walks the primary key backwards and filters, expecting an operation's jobs spread
 * evenly over time: an operation whose newest jobs are old, or came in a burst, then costs a
 * read of every job above them (70,000 rows for a list of 50 with 1,000,000 jobs).
 */
function operationRange(param: string): string {
  return `operation >= ${param} AND operation <= ${param}`;
}

/** Newest first: with an operation (`operationRange`), in the order of `jobs_operation`. */
function newestOf(operation: string | undefined): string {
  return operation === undefined ? 'id DESC' : 'operation DESC, id DESC';
}

/** Numbered parameters ($1, $2, …) in the order they are added. */
class Params {
  readonly args: unknown[] = [];
  add(value: unknown): string {
    this.args.push(value);
    return `$${this.args.length}`;
  }
}

/** The id range of a search (`idRange`) as SQL conditions. */
function idBounds(p: JobSearchParams, params: Params): string[] {
  const { upper, lower } = idRange(p);
  const out: string[] = [];
  if (upper !== null) out.push(`id < ${params.add(upper)}`);
  if (lower !== null) out.push(`id >= ${params.add(lower)}`);
  return out;
}

/** Every filter of a search but the id range (and the states, unless `withStates`). */
function searchFilters(p: JobSearchParams, params: Params, withStates: boolean): string[] {
  const out: string[] = [];
  if (withStates && p.states?.length) out.push(`state = ANY(${params.add(p.states)}::text[])`);
  if (p.queue !== undefined) out.push(`queue = ${params.add(p.queue)}`);
  if (p.operation !== undefined) out.push(`operation = ${params.add(p.operation)}`);
  if (p.runId !== undefined) out.push(`run_id = ${params.add(p.runId)}`);
  if (p.text !== undefined) {
    const text = params.add(p.text);
    const like = params.add(likePattern(p.text));
    out.push(
      `(run_id = ${text} OR request_fingerprint = ${text} OR input_json ILIKE ${like} OR request_key ILIKE ${like})`,
    );
  }
  return out;
}

const whereOf = (conditions: string[]) =>
  conditions.length ? `WHERE ${conditions.join(' AND ')}` : '';

/**
 * `jobSearch` (see the SQLite store's for the plan): exact hits through the unique indexes; the
 * people-sized states through their partial indexes; else a window of at most `scanRowsMax` ids
 * below the cursor, stopped as soon as the page is full. One read-only snapshot.
 */
export async function jobSearch(h: PgHandle, p: JobSearchParams): Promise<JobSearchPage> {
  return h.db.tx(async (c) => {
    await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
    const jobs = async (sql: string, args: unknown[]) =>
      (await c.query<JobRow>(sql, args)).rows.map(jobFromRow);
    if (p.text !== undefined && p.beforeId === undefined) {
      const exact = await jobs(h.sql.jobSearchExact, [p.text]);
      if (exact.length) return exactPage(p, exact);
    }
    const params = new Params();
    const ids = idBounds(p, params);
    const base = h.sql.jobListBase;
    if (onlyIndexedStates(p)) {
      const rest = searchFilters(p, params, false);
      const take = params.add(p.limit + 1);
      const one = (s: string) =>
        `(${base} ${whereOf([`state = '${s}'`, ...ids, ...rest])} ORDER BY id DESC LIMIT ${take})`;
      return searchPage(p, await jobs(p.states!.map(one).join(' UNION ALL '), params.args), null);
    }
    if (!hasFilters(p)) {
      const sql = `${base} ${whereOf(ids)} ORDER BY id DESC LIMIT ${params.add(p.limit + 1)}`;
      return searchPage(p, await jobs(sql, params.args), null);
    }
    // With an operation, the window is that operation's newest jobs (index jobs_operation), so
    // a rare operation is found however old; else the newest jobs of all.
    const scope = (ps: Params) =>
      p.operation === undefined ? [] : [operationRange(ps.add(p.operation))];
    const order = newestOf(p.operation);
    const scoped = [...ids, ...scope(params)];
    const scan = params.add(p.scanRowsMax);
    const f = searchFilters(p, params, true);
    const sql = `SELECT * FROM (${base} ${whereOf(scoped)} ORDER BY ${order} LIMIT ${scan}) w
      ${whereOf(f)} ORDER BY id DESC LIMIT ${params.add(p.limit + 1)}`;
    const found = await jobs(sql, params.args);
    if (found.length > p.limit) return searchPage(p, found, null);
    const windowParams = new Params();
    const windowIds = [...idBounds(p, windowParams), ...scope(windowParams)];
    const windowSql = `SELECT count(*)::int AS n, min(id) AS low FROM (${h.sql.jobIdWindowBase}
      ${whereOf(windowIds)} ORDER BY ${order} LIMIT ${windowParams.add(p.scanRowsMax)}) w`;
    const window = (await c.query<{ n: number; low: string | null }>(windowSql, windowParams.args))
      .rows[0]!;
    return searchPage(p, found, { rows: window.n, lowId: window.low });
  });
}

/** `statsActivityGet`: see the statement `statsActivity`. */
export async function statsActivityGet(h: PgHandle, p: ActivityParams): Promise<ActivityStats> {
  const buckets = Math.ceil(p.windowMs / p.bucketMs);
  const r = await h.db.run(
    (c) =>
      c.query<{
        now: number;
        start: number;
        finished: { b: number; state: string; n: number; oldest: number }[];
        unknown: { now: number; entered: number };
        needs_review: { now: number; entered: number };
      }>(h.sql.statsActivity, [
        buckets * p.bucketMs,
        p.bucketMs,
        p.windowMs,
        buckets,
        p.bucketRowsMax,
      ]),
    { reads: true },
  );
  const row = r.rows[0]!;
  return {
    now: row.now,
    finished: finishedBuckets(row.start, p.bucketMs, buckets, row.finished, p.bucketRowsMax),
    unknown: row.unknown,
    needsReview: row.needs_review,
  };
}
