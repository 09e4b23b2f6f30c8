/**
 * AWAITING_APPROVAL on PostgreSQL: listing, the decision and expiry. A decision locks its job,
 * asks the plan (plan/approval.ts) with the database's clock and writes what it decided: of two
 * deciders at once the second waits for the first's row lock, then finds the job decided and
 * changes nothing. Expiry takes due rows with SKIP LOCKED, so processes never wait on each
 * other and no job expires twice.
 */
import type pg from 'pg';
import { planApprovalExpire, planDecide, type WriteSet } from '../plan/index.js';
import { jobFromRow, toMs, type JobRow } from '../rows.js';
import type { ApprovalDecide, ApprovalDecideResult, ApprovalStats, JobRecord } from '../store.js';
import { TxWrites, type Queryable as TxQueryable } from './commit.js';
import type { PgHandle } from './handle.js';
import { flush, lockJob } from './moves.js';
import { NOW, quoteIdent } from './statements.js';

interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

/** Where the store's tables are. */
export interface ApprovalTarget {
  schema: string;
}

/** Writes planned moves out of AWAITING_APPROVAL (which clear the expiry); the jobs as written. */
async function write(
  h: PgHandle,
  c: TxQueryable,
  moves: [JobRecord, WriteSet][],
  now: number,
): Promise<JobRecord[]> {
  if (moves.length === 0) return [];
  await c.query(h.sql.approvalClear, [moves.map(([job]) => job.id)]);
  const w = new TxWrites();
  for (const [job, plan] of moves) w.add(job, plan);
  return flush(h, c, w, now);
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

export function approvalDecide(h: PgHandle, p: ApprovalDecide): Promise<ApprovalDecideResult> {
  return h.db.tx(async (c): Promise<ApprovalDecideResult> => {
    const { job, now } = await lockJob(h, c, p.jobId);
    if (!job) return { ok: false, job: null };
    const plan = planDecide({ job, decide: p, now });
    if ('why' in plan) return { ok: false, job };
    const [after] = await write(h, c, [[job, plan.write]], now);
    return plan.expired ? { ok: false, job: after!, expired: true } : { ok: true, job: after! };
  });
}

export function approvalExpireMany(
  h: PgHandle,
  p: { limit: number; actor: string },
): Promise<JobRecord[]> {
  return h.db.tx(async (c) => {
    const r = await c.query<JobRow & { now: Date }>(h.sql.approvalDueLock, [p.limit]);
    const now = r.rows[0] ? toMs(r.rows[0].now) : 0;
    const moves: [JobRecord, WriteSet][] = [];
    for (const row of r.rows) {
      const job = jobFromRow(row);
      const plan = planApprovalExpire({ job, actor: p.actor, now });
      if (plan) moves.push([job, plan]);
    }
    return write(h, c, moves, now);
  });
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
