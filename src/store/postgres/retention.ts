/**
 * Retention on PostgreSQL (invariant 8): deletes whole terminal histories, a batch at a time.
 *
 * Terminal jobs never change again, so the batch is read first, handed to the caller's archive,
 * and then deleted in one transaction by the ids read, each still checked to be terminal and old
 * enough (and locked, so two pruners do not count one job twice). Events go first (the events
 * trigger lets an event be deleted only while its job is there and terminal), then attempts,
 * then the jobs.
 */
import type pg from 'pg';
import { toMs, type AttemptRow, type EventRow, type JobRow } from '../rows.js';
import { detailFromRows } from '../trail.js';
import type { JobDetail, JobPruneParams, JobPruneResult, PrunableState } from '../store.js';
import { archivedAsIs, emptyCounts, statesOf } from '../prune.js';
import { quoteIdent } from './statements.js';

interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

export interface PruneHandle {
  schema: string;
  /** Runs `fn` in one transaction (retried as the store retries its own). */
  tx: <T>(fn: (c: Queryable) => Promise<T>) => Promise<T>;
  /** Runs reads outside a transaction. */
  read: <T>(fn: (c: Queryable) => Promise<T>) => Promise<T>;
}

/** `finished_at` old enough and a prunable state: $1 the cutoff (ms), $2 the states. */
const OLD_TERMINAL = `finished_at IS NOT NULL AND finished_at <= to_timestamp($1::bigint / 1000.0)
  AND state = ANY($2::text[])`;

async function cutoffOf(c: Queryable, olderThanMs: number): Promise<number> {
  const r = await c.query<{ t: Date }>('SELECT clock_timestamp() AS t');
  return toMs(r.rows[0]!.t) - olderThanMs;
}

export async function jobPruneMany(h: PruneHandle, p: JobPruneParams): Promise<JobPruneResult> {
  const states = statesOf(p);
  const s = quoteIdent(h.schema);
  const none: JobPruneResult = { jobs: emptyCounts(), attempts: 0, events: 0, more: false };
  if (states.length === 0 || (!p.dryRun && p.limit < 1)) return none;
  if (p.dryRun)
    return h.read(async (c) => {
      const cutoff = await cutoffOf(c, p.olderThanMs);
      const byState = await c.query<{ state: PrunableState; n: string }>(
        `SELECT state, count(*) AS n FROM ${s}.jobs WHERE ${OLD_TERMINAL} GROUP BY state`,
        [cutoff, states],
      );
      for (const r of byState.rows) none.jobs[r.state] = Number(r.n);
      const sub = `SELECT id FROM ${s}.jobs WHERE ${OLD_TERMINAL}`;
      const a = await c.query<{ n: string }>(
        `SELECT count(*) AS n FROM ${s}.attempts WHERE job_id IN (${sub})`,
        [cutoff, states],
      );
      const e = await c.query<{ n: string }>(
        `SELECT count(*) AS n FROM ${s}.events WHERE job_id IN (${sub})`,
        [cutoff, states],
      );
      return { ...none, attempts: Number(a.rows[0]!.n), events: Number(e.rows[0]!.n) };
    });
  const { cutoff, ids, histories } = await h.read(async (c) => {
    const cutoff = await cutoffOf(c, p.olderThanMs);
    const r = await c.query<{ id: string }>(
      `SELECT id FROM ${s}.jobs WHERE ${OLD_TERMINAL} ORDER BY finished_at LIMIT $3`,
      [cutoff, states, p.limit],
    );
    const ids = r.rows.map((row) => row.id);
    return { cutoff, ids, histories: p.archive ? await readHistories(c, s, ids) : [] };
  });
  if (ids.length === 0) return none;
  if (p.archive) await p.archive(histories);
  const deleted = await h.tx((c) =>
    deleteBatch(c, s, { cutoff, states, ids, archived: p.archive ? histories : undefined }),
  );
  const { leftGrown, ...counts } = deleted;
  return { ...counts, more: ids.length === p.limit || leftGrown > 0 };
}

/**
 * The delete of one batch, in its transaction: the jobs still old and terminal (and, given the
 * archived histories, still as archived), whole, and the waits of jobs that ended or went.
 */
async function deleteBatch(
  c: Queryable,
  s: string,
  b: { cutoff: number; states: PrunableState[]; ids: string[]; archived?: JobDetail[] },
): Promise<Omit<JobPruneResult, 'more'> & { leftGrown: number }> {
  // Locked FOR UPDATE: an event write on these jobs (eventAppend, a dedup) takes KEY SHARE on
  // its job first, so it waits for this transaction and then finds the job gone, or it got
  // there first and this batch skips the job. Either way no event outlives its job.
  const still = await c.query<{ id: string }>(
    `SELECT id FROM ${s}.jobs WHERE id = ANY($3::text[]) AND ${OLD_TERMINAL}
     ORDER BY id FOR UPDATE SKIP LOCKED`,
    [b.cutoff, b.states, b.ids],
  );
  let doomed = still.rows.map((r) => r.id);
  const result = { jobs: emptyCounts(), attempts: 0, events: 0, leftGrown: 0 };
  if (b.archived && doomed.length > 0) {
    const counts = await c.query<{ job_id: string; n: string }>(
      `SELECT job_id, count(*) AS n FROM ${s}.events WHERE job_id = ANY($1::text[]) GROUP BY job_id`,
      [doomed],
    );
    const same = archivedAsIs(b.archived, new Map(counts.rows.map((r) => [r.job_id, Number(r.n)])));
    const kept = doomed.filter((id) => same.has(id));
    result.leftGrown = doomed.length - kept.length;
    doomed = kept;
  }
  if (doomed.length === 0) return result;
  const ev = await c.query(`DELETE FROM ${s}.events WHERE job_id = ANY($1::text[])`, [doomed]);
  const at = await c.query(`DELETE FROM ${s}.attempts WHERE job_id = ANY($1::text[])`, [doomed]);
  const jobs = await c.query<{ state: PrunableState }>(
    `DELETE FROM ${s}.jobs WHERE id = ANY($1::text[]) RETURNING state`,
    [doomed],
  );
  for (const j of jobs.rows) result.jobs[j.state]++;
  result.events = ev.rowCount ?? 0;
  result.attempts = at.rowCount ?? 0;
  return result;
}

async function readHistories(c: Queryable, s: string, ids: string[]): Promise<JobDetail[]> {
  if (ids.length === 0) return [];
  const jobs = await c.query<JobRow>(`SELECT * FROM ${s}.jobs WHERE id = ANY($1::text[])`, [ids]);
  const attempts = await c.query<AttemptRow>(
    `SELECT * FROM ${s}.attempts WHERE job_id = ANY($1::text[]) ORDER BY job_id, attempt_no`,
    [ids],
  );
  const events = await c.query<EventRow>(
    `SELECT * FROM ${s}.events WHERE job_id = ANY($1::text[]) ORDER BY job_id, id`,
    [ids],
  );
  const byId = new Map<string, { job: JobRow; attempts: AttemptRow[]; events: EventRow[] }>();
  for (const j of jobs.rows) byId.set(j.id, { job: j, attempts: [], events: [] });
  for (const a of attempts.rows) byId.get(a.job_id)?.attempts.push(a);
  for (const e of events.rows) byId.get(e.job_id)?.events.push(e);
  return ids.flatMap((id) => {
    const r = byId.get(id);
    return r ? [detailFromRows(r.job, r.attempts, r.events)] : [];
  });
}
