/**
 * AWAITING_APPROVAL on SQLite: listing, the decision and expiry. Each function runs inside the
 * store's write transaction (BEGIN IMMEDIATE: one writer at a time across processes), so a
 * decision is a conditional write on the state; the second of two deciders finds the job
 * decided and changes nothing. `now` is the store's clock.
 */
import type Database from 'better-sqlite3';
import type { ErrorInfo } from '../../core/errors.js';
import { jobFromRow, jsonOrNull, type JobRow } from '../rows.js';
import type { ApprovalDecide, ApprovalDecideResult, ApprovalStats, JobRecord } from '../store.js';

// LIMIT +? below: a bare bound LIMIT makes SQLite re-prepare the statement on every run.

/** Moves one awaiting job, if it still is; the row as written, or undefined. */
const MOVE = `UPDATE jobs SET state = ?, updated_at = ?, approval_expires_at = NULL,
  finished_at = ?, error_json = coalesce(?, error_json)
WHERE id = ? AND state = 'AWAITING_APPROVAL' RETURNING *`;

const EVENT = `INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state,
  actor, detail_json, at) VALUES (?, NULL, ?, ?, 'AWAITING_APPROVAL', ?, ?, ?, ?)`;

interface Move {
  id: string;
  to: 'QUEUED' | 'CANCELLED';
  kind: string;
  actor: string;
  detail: Record<string, unknown>;
  error: ErrorInfo | null;
}

function move(db: Database.Database, m: Move, now: number): JobRecord | undefined {
  const row = db
    .prepare(MOVE)
    .get(m.to, now, m.to === 'CANCELLED' ? now : null, jsonOrNull(m.error), m.id) as
    JobRow | undefined;
  if (!row) return undefined;
  db.prepare(EVENT).run(
    m.id,
    row.request_fingerprint,
    m.kind,
    m.to,
    m.actor,
    JSON.stringify(m.detail),
    now,
  );
  return jobFromRow(row);
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

export function approvalDecide(
  db: Database.Database,
  p: ApprovalDecide,
  now: number,
): ApprovalDecideResult {
  const job = move(db, { ...p, id: p.jobId }, now);
  if (job) return { ok: true, job };
  const row = db.prepare('SELECT * FROM jobs WHERE id = ?').get(p.jobId) as JobRow | undefined;
  return { ok: false, job: row ? jobFromRow(row) : null };
}

export function approvalExpireMany(
  db: Database.Database,
  p: { limit: number; actor: string; error: ErrorInfo },
  now: number,
): JobRecord[] {
  const due = db
    .prepare(
      `SELECT id, approval_expires_at AS at FROM jobs
       WHERE state = 'AWAITING_APPROVAL' AND approval_expires_at <= ?
       ORDER BY approval_expires_at LIMIT +?`,
    )
    .all(now, p.limit) as { id: string; at: number }[];
  const out: JobRecord[] = [];
  for (const d of due) {
    const job = move(
      db,
      {
        id: d.id,
        to: 'CANCELLED',
        kind: 'approval-expired',
        actor: p.actor,
        detail: { expiresAt: d.at },
        error: p.error,
      },
      now,
    );
    if (job) out.push(job);
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
