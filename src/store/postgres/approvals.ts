/**
 * AWAITING_APPROVAL on PostgreSQL: listing, the decision and expiry, each one statement (its own
 * transaction). A decision is an UPDATE conditional on the state: of two deciders at once the
 * second waits for the first's row lock, then finds the row no longer AWAITING_APPROVAL and
 * changes nothing. Expiry takes due rows with SKIP LOCKED, so processes never wait on each
 * other and no job expires twice. Times are the database's clock.
 */
import type pg from 'pg';
import type { ErrorInfo } from '../../core/errors.js';
import { jobFromRow, jsonOrNull, type JobRow } from '../rows.js';
import type { ApprovalDecide, ApprovalDecideResult, ApprovalStats, JobRecord } from '../store.js';
import { NOW, quoteIdent } from './sql.js';

interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

/** Where the store's tables are, and the channel that wakes workers. */
export interface ApprovalTarget {
  schema: string;
  channel: string;
}

/**
 * The move of the rows of CTE `due` (columns id, expires_at) out of AWAITING_APPROVAL, with an
 * event each. $1 state, $2 event kind, $3 actor, $4 detail (JSON text, or null: `{ expiresAt }`),
 * $5 error (JSON text), $6 channel (woken when a job is QUEUED).
 */
function moveSql(schema: string, due: string): string {
  const s = quoteIdent(schema);
  return `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t),
due AS (${due}),
moved AS (
  UPDATE ${s}.jobs j SET state = $1::text, updated_at = now.t, approval_expires_at = NULL,
    finished_at = CASE WHEN $1::text = 'CANCELLED' THEN now.t END,
    error_json = coalesce($5::text, j.error_json)
  FROM due, now
  WHERE j.id = due.id AND j.state = 'AWAITING_APPROVAL'
  RETURNING j.*, due.expires_at AS due_expires_at
),
logged AS (
  INSERT INTO ${s}.events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
  SELECT m.id, NULL, m.request_fingerprint, $2::text, 'AWAITING_APPROVAL', $1::text, $3::text,
    coalesce($4::text, json_build_object('expiresAt',
      (extract(epoch FROM m.due_expires_at) * 1000)::bigint)::text), now.t
  FROM moved m, now
  ORDER BY m.id
)
SELECT row_to_json(m) AS job,
  (SELECT count(pg_notify($6::text, q.queue))
     FROM (SELECT DISTINCT queue FROM moved WHERE $1::text = 'QUEUED') q) AS woken
FROM moved m`;
}

export async function approvalList(
  c: Queryable,
  t: ApprovalTarget,
  p: { operation?: string; limit: number },
): Promise<JobRecord[]> {
  const r = await c.query<JobRow>(
    `SELECT * FROM ${quoteIdent(t.schema)}.jobs
     WHERE state = 'AWAITING_APPROVAL' AND ($1::text IS NULL OR operation = $1::text)
     ORDER BY created_at, id LIMIT $2`,
    [p.operation ?? null, p.limit],
  );
  return r.rows.map(jobFromRow);
}

export async function approvalDecide(
  c: Queryable,
  t: ApprovalTarget,
  p: ApprovalDecide,
): Promise<ApprovalDecideResult> {
  const r = await c.query<{ job: JobRow }>(
    moveSql(t.schema, `SELECT $7::text AS id, NULL::timestamptz AS expires_at`),
    [p.to, p.kind, p.actor, JSON.stringify(p.detail), jsonOrNull(p.error), t.channel, p.jobId],
  );
  const row = r.rows[0];
  if (row) return { ok: true, job: jobFromRow(row.job) };
  const current = await c.query<JobRow>(
    `SELECT * FROM ${quoteIdent(t.schema)}.jobs WHERE id = $1`,
    [p.jobId],
  );
  return { ok: false, job: current.rows[0] ? jobFromRow(current.rows[0]) : null };
}

export async function approvalExpireMany(
  c: Queryable,
  t: ApprovalTarget,
  p: { limit: number; actor: string; error: ErrorInfo },
): Promise<JobRecord[]> {
  const due = `
  SELECT j.id, j.approval_expires_at AS expires_at FROM ${quoteIdent(t.schema)}.jobs j
  WHERE j.state = 'AWAITING_APPROVAL' AND j.approval_expires_at <= (SELECT t FROM now)
  ORDER BY j.approval_expires_at
  LIMIT $7
  FOR UPDATE SKIP LOCKED`;
  const r = await c.query<{ job: JobRow }>(moveSql(t.schema, due), [
    'CANCELLED',
    'approval-expired',
    p.actor,
    null,
    JSON.stringify(p.error),
    t.channel,
    p.limit,
  ]);
  return r.rows.map((row) => jobFromRow(row.job));
}

export async function approvalStats(c: Queryable, t: ApprovalTarget): Promise<ApprovalStats> {
  const r = await c.query<{
    now: Date;
    by_operation: { operation: string; n: number; oldest: number }[];
  }>(
    `SELECT ${NOW} AS now, (SELECT coalesce(json_agg(b), '[]') FROM (
       SELECT operation, count(*)::int AS n,
         (extract(epoch FROM min(created_at)) * 1000)::bigint AS oldest
       FROM ${quoteIdent(t.schema)}.jobs WHERE state = 'AWAITING_APPROVAL'
       GROUP BY operation ORDER BY operation) b) AS by_operation`,
  );
  const row = r.rows[0]!;
  return {
    now: row.now.getTime(),
    byOperation: row.by_operation.map((b) => ({
      operation: b.operation,
      awaiting: b.n,
      oldestAt: Number(b.oldest),
    })),
  };
}
