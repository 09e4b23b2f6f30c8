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
import { detailFromRows } from '../trail.js';
import type { ExpiredAttempt, JobDetail, JobListParams, JobRecord, StoreStats } from '../store.js';
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
