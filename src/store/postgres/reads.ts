/**
 * PostgreSQL reads: a job with its history, listings, stats, expired leases.
 */
import type { JobState } from '../../core/states.js';
import {
  attemptFromRow,
  eventFromRow,
  jobFromRow,
  statsFromRows,
  type AttemptRow,
  type EventRow,
  type JobRow,
} from '../rows.js';
import { finishedBuckets, idRange, likePattern, matchesFilters, searchPage } from '../search.js';
import type {
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
import { fromMs } from './sql-parts.js';

export async function jobGet(h: PgHandle, p: { id: string }): Promise<JobDetail | null> {
  const r = await h.db.run(
    (c) =>
      c.query<{ job: JobRow; attempts: AttemptRow[]; events: EventRow[] }>(h.sql.jobDetail, [p.id]),
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

export async function jobList(h: PgHandle, p: JobListParams): Promise<JobRecord[]> {
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
    `${h.sql.jobListBase} ${where.length ? 'WHERE ' + where.join(' AND ') : ''}` +
    ` ORDER BY id DESC LIMIT ${param(p.limit)}`;
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
  return r.rows.map((row) => ({
    attempt: attemptFromRow(row.attempt),
    job: jobFromRow(row.job),
  }));
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
 * `jobSearch`: the exact hits by id and request key (first page only, through their indexes),
 * then the window of at most `scanRowsMax` ids below the cursor (the primary key's index), then
 * the matches within it, newest first. One snapshot for all three.
 */
export async function jobSearch(h: PgHandle, p: JobSearchParams): Promise<JobSearchPage> {
  return h.db.tx(async (c) => {
    await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
    const exact =
      p.text !== undefined && p.beforeId === undefined
        ? (await c.query<JobRow>(h.sql.jobSearchExact, [p.text])).rows
            .map(jobFromRow)
            .filter((j) => matchesFilters(j, p))
        : [];
    const { upper, lower } = idRange(p);
    const args: unknown[] = [];
    const param = (value: unknown) => {
      args.push(value);
      return `$${args.length}`;
    };
    const bounds: string[] = [];
    if (upper !== null) bounds.push(`id < ${param(upper)}`);
    if (lower !== null) bounds.push(`id >= ${param(lower)}`);
    const windowSql = `SELECT count(*)::int AS n, min(id) AS low FROM (${h.sql.jobIdWindowBase}
      ${bounds.length ? 'WHERE ' + bounds.join(' AND ') : ''} ORDER BY id DESC LIMIT ${param(p.scanRowsMax)}) w`;
    const window = (await c.query<{ n: number; low: string | null }>(windowSql, args)).rows[0]!;
    if (window.n === 0) return searchPage(p, exact, [], { rows: 0, lowId: null });
    args.pop(); // the window's LIMIT: the bounds keep their numbers, the rest follow them
    const where = [...bounds, `id >= ${param(window.low)}`];
    if (p.states?.length) where.push(`state = ANY(${param(p.states)}::text[])`);
    if (p.queue !== undefined) where.push(`queue = ${param(p.queue)}`);
    if (p.operation !== undefined) where.push(`operation = ${param(p.operation)}`);
    if (p.createdFrom !== undefined) where.push(`created_at >= ${fromMs(param(p.createdFrom))}`);
    if (p.createdTo !== undefined) where.push(`created_at < ${fromMs(param(p.createdTo))}`);
    if (p.text !== undefined) {
      const text = param(p.text);
      const like = param(likePattern(p.text));
      where.push(
        `(run_id = ${text} OR request_fingerprint = ${text} OR input_json ILIKE ${like} OR request_key ILIKE ${like})`,
      );
    }
    const sql = `${h.sql.jobListBase} WHERE ${where.join(' AND ')} ORDER BY id DESC LIMIT ${param(p.limit + 1)}`;
    const rows = (await c.query<JobRow>(sql, args)).rows;
    return searchPage(p, exact, rows.map(jobFromRow), { rows: window.n, lowId: window.low });
  });
}

/** `statsActivityGet`: see the statement `statsActivity`. */
export async function statsActivityGet(
  h: PgHandle,
  p: { windowMs: number; bucketMs: number },
): Promise<ActivityStats> {
  const buckets = Math.ceil(p.windowMs / p.bucketMs);
  const r = await h.db.run(
    (c) =>
      c.query<{
        now: number;
        start: number;
        finished: { b: number; state: string; n: number }[];
        unknown: { now: number; entered: number };
        needs_review: { now: number; entered: number };
      }>(h.sql.statsActivity, [buckets * p.bucketMs, p.bucketMs, p.windowMs]),
    { reads: true },
  );
  const row = r.rows[0]!;
  return {
    now: row.now,
    finished: finishedBuckets(row.start, p.bucketMs, buckets, row.finished),
    unknown: row.unknown,
    needsReview: row.needs_review,
  };
}
