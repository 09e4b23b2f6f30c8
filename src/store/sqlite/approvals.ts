/**
 * AWAITING_APPROVAL on SQLite: listing, the decision and expiry. Each write runs inside the
 * store's write transaction (BEGIN IMMEDIATE: one writer at a time across processes): it reads
 * the job, asks the plan (plan/approval.ts) and writes what it decided, so the second of two
 * deciders finds the job decided and changes nothing. `now` is the store's clock.
 */
import type Database from 'better-sqlite3';
import { planApprovalExpire, planDecide, type WriteSet } from '../plan/index.js';
import { jobFromRow, type JobRow } from '../rows.js';
import type { ApprovalDecide, ApprovalDecideResult, ApprovalStats, JobRecord } from '../store.js';
import type { SqliteHandle } from './handle.js';
import { getJob } from './reads.js';
import { writePlan } from './moves.js';

// LIMIT +? below: a bare bound LIMIT makes SQLite re-prepare the statement on every run.

/** Writes a planned move out of AWAITING_APPROVAL; the job as written. */
function write(h: SqliteHandle, job: JobRecord, w: WriteSet): JobRecord {
  h.stmt('UPDATE jobs SET approval_expires_at = NULL WHERE id = ?').run(job.id);
  writePlan(h, { job }, w);
  return getJob(h, job.id)!;
}

export function approvalList(
  db: Database.Database,
  p: { operation?: string; limit: number },
): JobRecord[] {
  const byOp = p.operation === undefined ? '' : 'AND operation = ?';
  const rows = db
    .prepare(
      `SELECT * FROM jobs WHERE state = 'AWAITING_APPROVAL' ${byOp} ORDER BY created_at, id LIMIT +?`,
    )
    .all(...(p.operation === undefined ? [] : [p.operation]), p.limit) as JobRow[];
  return rows.map(jobFromRow);
}

export function approvalDecide(h: SqliteHandle, p: ApprovalDecide): ApprovalDecideResult {
  const now = h.now();
  const job = getJob(h, p.jobId);
  if (!job) return { ok: false, job: null };
  const plan = planDecide({ job, decide: p, now });
  if ('why' in plan) return { ok: false, job };
  const after = write(h, job, plan.write);
  return plan.expired ? { ok: false, job: after, expired: true } : { ok: true, job: after };
}

export function approvalExpireMany(
  h: SqliteHandle,
  p: { limit: number; actor: string },
): JobRecord[] {
  const now = h.now();
  const due = h
    .stmt(
      `SELECT * FROM jobs WHERE state = 'AWAITING_APPROVAL' AND approval_expires_at <= ?
       ORDER BY approval_expires_at LIMIT +?`,
    )
    .all(now, p.limit) as JobRow[];
  const out: JobRecord[] = [];
  for (const row of due) {
    const job = jobFromRow(row);
    const w = planApprovalExpire({ job, actor: p.actor, now });
    if (w) out.push(write(h, job, w));
  }
  return out;
}

export function approvalStats(db: Database.Database, now: number): ApprovalStats {
  const rows = db
    .prepare(
      `SELECT operation, count(*) AS n, min(created_at) AS oldest FROM jobs
       WHERE state = 'AWAITING_APPROVAL' GROUP BY operation ORDER BY operation`,
    )
    .all() as { operation: string; n: number; oldest: number }[];
  return {
    now,
    byOperation: rows.map((r) => ({ operation: r.operation, awaiting: r.n, oldestAt: r.oldest })),
  };
}
