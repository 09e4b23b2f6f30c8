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
    const like = params.add(asciiLower(likePattern(p.text)));
    // Case folded for ASCII letters only, as SQLite's LIKE does: lower() under the "C"
    // collation. ILIKE under the database's collation folds every Unicode letter, at about
    // twice the cost per row, and a search that matches little reads its whole window.
    out.push(
      `(run_id = ${text} OR request_fingerprint = ${text}` +
        ` OR lower(input_json COLLATE "C") LIKE ${like} OR lower(request_key COLLATE "C") LIKE ${like})`,
    );
  }
  return out;
}

/** ASCII letters lowered, others as they are (what lower() does under the "C" collation). */
function asciiLower(s: string): string {
  return s.replace(/[A-Z]/g, (c) => c.toLowerCase());
}

const whereOf = (conditions: string[]) =>
  conditions.length ? `WHERE ${conditions.join(' AND ')}` : '';

/** One read-only statement's jobs: one statement is one snapshot, no transaction needed. */
async function readJobs(h: PgHandle, sql: string, args: unknown[]): Promise<JobRecord[]> {
  const r = await h.db.run((c) => c.query<JobRow>(sql, args), { reads: true });
  return r.rows.map(jobFromRow);
}

/**
 * `jobSearch` (see the SQLite store's for the plan): exact hits through the unique indexes; the
 * people-sized states through their partial indexes; else a window of at most `scanRowsMax` ids
 * below the cursor, stopped as soon as the page is full. Each read is one statement.
 */
export async function jobSearch(h: PgHandle, p: JobSearchParams): Promise<JobSearchPage> {
  if (p.text !== undefined && p.beforeId === undefined) {
    const exact = await readJobs(h, h.sql.jobSearchExact, [p.text]);
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
    return searchPage(
      p,
      await readJobs(h, p.states!.map(one).join(' UNION ALL '), params.args),
      null,
    );
  }
  if (!hasFilters(p)) {
    const sql = `${base} ${whereOf(ids)} ORDER BY id DESC LIMIT ${params.add(p.limit + 1)}`;
    return searchPage(p, await readJobs(h, sql, params.args), null);
  }
  return windowSearch(h, p);
}

/**
 * A search through its window in one statement (one snapshot, one round trip): the matches among
 * the window's rows, newest first, read until the page is full; only when it is not, the id
 * where the window ends (its `scanRowsMax`-th, from the index alone; null: the window holds
 * every job in range). With an operation, the window is that operation's newest jobs (index
 * jobs_operation), so a rare operation is found however old; else the newest jobs of all.
 */
async function windowSearch(h: PgHandle, p: JobSearchParams): Promise<JobSearchPage> {
  const params = new Params();
  const scoped = whereOf([
    ...idBounds(p, params),
    ...(p.operation === undefined ? [] : [operationRange(params.add(p.operation))]),
  ]);
  const order = newestOf(p.operation);
  const scan = params.add(p.scanRowsMax);
  const last = params.add(p.scanRowsMax - 1);
  const limit = params.add(p.limit);
  const take = params.add(p.limit + 1);
  const matches = `SELECT * FROM (${h.sql.jobListBase} ${scoped} ORDER BY ${order} LIMIT ${scan}) w
    ${whereOf(searchFilters(p, params, true))} ORDER BY id DESC LIMIT ${take}`;
  // The CASE reads the window's end (an InitPlan, run on first use) only for a page not full.
  const sql = `SELECT found, CASE WHEN json_array_length(found) > ${limit} THEN NULL ELSE
      (${h.sql.jobIdWindowBase} ${scoped} ORDER BY ${order} OFFSET ${last} LIMIT 1) END AS low
    FROM (SELECT coalesce(json_agg(m), '[]') AS found FROM (${matches}) m) f`;
  const r = await h.db.run(
    (c) => c.query<{ found: JobRow[]; low: string | null }>(sql, params.args),
    { reads: true },
  );
  const { found, low } = r.rows[0]!;
  const window = low === null ? null : { rows: p.scanRowsMax, lowId: low };
  return searchPage(p, found.map(jobFromRow), window);
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
