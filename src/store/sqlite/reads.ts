/**
 * SQLite reads: a job with its history, listings, stats, expired leases. Outside any write
 * transaction (WAL: they wait for no writer).
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
import type {
  AttemptRecord,
  ExpiredAttempt,
  JobDetail,
  JobListParams,
  JobRecord,
  StoreStats,
} from '../store.js';
import { detailFromRows } from '../trail.js';
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

/** The job, its attempts, and its trail: stored events with the routine steps in place. */
export function jobGet(h: SqliteHandle, p: { id: string }): Promise<JobDetail | null> {
  return h.read(() => {
    const job = h.stmt('SELECT * FROM jobs WHERE id = ?').get(p.id) as JobRow | undefined;
    if (!job) return null;
    const attempts = h
      .stmt('SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt_no')
      .all(p.id) as AttemptRow[];
    const events = h
      .stmt('SELECT * FROM events WHERE job_id = ? ORDER BY id')
      .all(p.id) as EventRow[];
    return detailFromRows(job, attempts, events);
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
