/**
 * SQLite reads: a job with its history, listings, stats, expired leases. Outside any write
 * transaction (WAL: they wait for no writer).
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
  AttemptRecord,
  ExpiredAttempt,
  JobDetail,
  JobListParams,
  JobRecord,
  JobSearchPage,
  JobSearchParams,
  StoreStats,
} from '../store.js';
import type { SqliteHandle } from './handle.js';
import { LIMIT_PARAM } from './statements.js';

export function getJob(h: SqliteHandle, id: string): JobRecord | undefined {
  const row = h.stmt('SELECT * FROM jobs WHERE id = ?').get(id) as JobRow | undefined;
  return row && jobFromRow(row);
}

export function getAttempt(
  h: SqliteHandle,
  jobId: string,
  attemptNo: number,
): AttemptRecord | undefined {
  const row = h
    .stmt('SELECT * FROM attempts WHERE job_id = ? AND attempt_no = ?')
    .get(jobId, attemptNo) as AttemptRow | undefined;
  return row && attemptFromRow(row);
}

export function jobGet(h: SqliteHandle, p: { id: string }): Promise<JobDetail | null> {
  return h.read(() => {
    const job = getJob(h, p.id);
    if (!job) return null;
    const attempts = (
      h
        .stmt('SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt_no')
        .all(p.id) as AttemptRow[]
    ).map(attemptFromRow);
    const events = (
      h.stmt('SELECT * FROM events WHERE job_id = ? ORDER BY id').all(p.id) as EventRow[]
    ).map(eventFromRow);
    return { job, attempts, events };
  });
}

export function jobList(h: SqliteHandle, p: JobListParams): Promise<JobRecord[]> {
  return h.read(() => {
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
      h
        .conn()
        .prepare(sql)
        .all(...args, p.limit) as JobRow[]
    ).map(jobFromRow);
  });
}

export function attemptExpiredList(
  h: SqliteHandle,
  p: { skewMs: number; limit: number },
): Promise<ExpiredAttempt[]> {
  return h.read(() => {
    const now = h.now();
    const rows = h
      .stmt(
        `SELECT * FROM attempts WHERE state = 'LEASED' AND lease_expires_at + ? < ? ORDER BY lease_expires_at ${LIMIT_PARAM}`,
      )
      .all(p.skewMs, now, p.limit) as AttemptRow[];
    return rows.map((r) => ({ attempt: attemptFromRow(r), job: getJob(h, r.job_id)! }));
  });
}

export function statsGet(h: SqliteHandle): Promise<StoreStats> {
  return h.read(() => {
    const now = h.now();
    const counts = h
      .stmt('SELECT queue, state, count(*) AS n FROM jobs GROUP BY queue, state')
      .all() as { queue: string; state: JobState; n: number }[];
    const oldest = h
      .stmt(
        `SELECT queue, min(run_at) AS t FROM jobs WHERE state = 'QUEUED' AND run_at <= ? GROUP BY queue`,
      )
      .all(now) as { queue: string; t: number }[];
    const byOperation = h
      .stmt(
        `SELECT operation, sum(state = 'UNKNOWN') AS unknown, sum(state = 'NEEDS_REVIEW') AS needs_review
       FROM jobs WHERE state IN ('UNKNOWN','NEEDS_REVIEW') GROUP BY operation`,
      )
      .all() as { operation: string; unknown: number; needs_review: number }[];
    const expired = h
      .stmt(`SELECT count(*) AS n FROM attempts WHERE state = 'LEASED' AND lease_expires_at <= ?`)
      .get(now) as { n: number };
    return statsFromRows({ now, counts, oldest, byOperation, expired: expired.n });
  });
}

/**
 * `jobSearch`: the exact hits by id and request key (first page only, through their indexes),
 * then the window of at most `scanRowsMax` ids below the cursor (read from the primary key's
 * index alone), then the matches within it, newest first.
 */
export function jobSearch(h: SqliteHandle, p: JobSearchParams): Promise<JobSearchPage> {
  return h.read(() => {
    const exact =
      p.text !== undefined && p.beforeId === undefined
        ? (
            h
              .stmt(
                'SELECT * FROM jobs WHERE id = ? UNION SELECT * FROM jobs WHERE request_key = ?',
              )
              .all(p.text, p.text) as JobRow[]
          )
            .map(jobFromRow)
            .filter((j) => matchesFilters(j, p))
        : [];
    const { upper, lower } = idRange(p);
    const bounds: string[] = [];
    const boundArgs: unknown[] = [];
    if (upper !== null) {
      bounds.push('id < ?');
      boundArgs.push(upper);
    }
    if (lower !== null) {
      bounds.push('id >= ?');
      boundArgs.push(lower);
    }
    const boundSql = bounds.length ? `WHERE ${bounds.join(' AND ')}` : '';
    const window = h
      .conn()
      .prepare(
        `SELECT count(*) AS n, min(id) AS low FROM (SELECT id FROM jobs ${boundSql} ORDER BY id DESC ${LIMIT_PARAM})`,
      )
      .get(...boundArgs, p.scanRowsMax) as { n: number; low: string | null };
    if (window.n === 0) return searchPage(p, exact, [], { rows: 0, lowId: null });
    const where = [...bounds, 'id >= ?'];
    const args: unknown[] = [...boundArgs, window.low];
    if (p.states?.length) {
      where.push(`state IN (${p.states.map(() => '?').join(',')})`);
      args.push(...p.states);
    }
    const eq = (sql: string, value: unknown) => {
      if (value === undefined) return;
      where.push(sql);
      args.push(value);
    };
    eq('queue = ?', p.queue);
    eq('operation = ?', p.operation);
    eq('created_at >= ?', p.createdFrom);
    eq('created_at < ?', p.createdTo);
    if (p.text !== undefined) {
      const like = likePattern(p.text);
      where.push(
        `(run_id = ? OR request_fingerprint = ? OR input_json LIKE ? ESCAPE '\\' OR request_key LIKE ? ESCAPE '\\')`,
      );
      args.push(p.text, p.text, like, like);
    }
    // INDEXED BY: the id range is the bound on the work, whatever the planner guesses.
    const sql = `SELECT * FROM jobs INDEXED BY sqlite_autoindex_jobs_1 WHERE ${where.join(' AND ')} ORDER BY id DESC ${LIMIT_PARAM}`;
    const rows = h
      .conn()
      .prepare(sql)
      .all(...args, p.limit + 1) as JobRow[];
    return searchPage(p, exact, rows.map(jobFromRow), { rows: window.n, lowId: window.low });
  });
}

/** `statsActivityGet`: ended jobs per bucket (the finished index), UNKNOWN / NEEDS_REVIEW growth (their partial indexes). */
export function statsActivityGet(
  h: SqliteHandle,
  p: { windowMs: number; bucketMs: number },
): Promise<ActivityStats> {
  return h.read(() => {
    const now = h.now();
    const buckets = Math.ceil(p.windowMs / p.bucketMs);
    const start = now - buckets * p.bucketMs;
    const rows = h
      .stmt(
        `SELECT (finished_at - ?) / ? AS b, state, count(*) AS n FROM jobs INDEXED BY jobs_finished
         WHERE finished_at >= ? GROUP BY b, state`,
      )
      .all(start, p.bucketMs, start) as { b: number; state: JobState; n: number }[];
    const growth = (state: 'UNKNOWN' | 'NEEDS_REVIEW') =>
      h
        .stmt(
          `SELECT count(*) AS now, coalesce(sum(updated_at >= ?), 0) AS entered FROM jobs WHERE state = '${state}'`,
        )
        .get(now - p.windowMs) as { now: number; entered: number };
    return {
      now,
      finished: finishedBuckets(start, p.bucketMs, buckets, rows),
      unknown: growth('UNKNOWN'),
      needsReview: growth('NEEDS_REVIEW'),
    };
  });
}
