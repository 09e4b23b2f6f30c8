/**
 * Retention on SQLite (invariant 8): deletes whole terminal histories, a batch at a time.
 *
 * Terminal jobs never change again, so the batch is read outside the write, handed to the
 * caller's archive, and then deleted in one transaction by the ids read, each still checked to be
 * terminal and old enough. Events go first (the events trigger lets an event be deleted only while
 * its job is there and terminal), then attempts, then the jobs.
 */
import type Database from 'better-sqlite3';
import { type AttemptRow, type EventRow, type JobRow } from '../rows.js';
import { detailFromRows } from '../trail.js';
import type { JobDetail, JobPruneParams, JobPruneResult, PrunableState } from '../store.js';
import { archivedAsIs, emptyCounts, statesOf } from '../prune.js';

const marks = (n: number) => Array.from({ length: n }, () => '?').join(',');

/** Counts what a prune would delete (every match), without deleting. */
export function pruneCount(db: Database.Database, p: JobPruneParams, now: number): JobPruneResult {
  const states = statesOf(p);
  const result: JobPruneResult = { jobs: emptyCounts(), attempts: 0, events: 0, more: false };
  if (states.length === 0) return result;
  const where = `finished_at IS NOT NULL AND finished_at <= ? AND state IN (${marks(states.length)})`;
  const cutoff = now - p.olderThanMs;
  const rows = db
    .prepare(`SELECT state, count(*) AS n FROM jobs WHERE ${where} GROUP BY state`)
    .all(cutoff, ...states) as { state: PrunableState; n: number }[];
  for (const r of rows) result.jobs[r.state] = r.n;
  const sub = `SELECT id FROM jobs WHERE ${where}`;
  result.attempts = (
    db
      .prepare(`SELECT count(*) AS n FROM attempts WHERE job_id IN (${sub})`)
      .get(cutoff, ...states) as { n: number }
  ).n;
  result.events = (
    db
      .prepare(`SELECT count(*) AS n FROM events WHERE job_id IN (${sub})`)
      .get(cutoff, ...states) as { n: number }
  ).n;
  return result;
}

/** The oldest `limit` prunable jobs (ids and states), along the jobs_finished index. */
export function pruneSelect(
  db: Database.Database,
  p: JobPruneParams,
  now: number,
): { id: string; state: PrunableState }[] {
  const states = statesOf(p);
  if (states.length === 0 || p.limit < 1) return [];
  return db
    .prepare(
      `SELECT id, state FROM jobs INDEXED BY jobs_finished
       WHERE finished_at IS NOT NULL AND finished_at <= ? AND state IN (${marks(states.length)})
       ORDER BY finished_at LIMIT +?`,
    )
    .all(now - p.olderThanMs, ...states, p.limit) as { id: string; state: PrunableState }[];
}

/** The whole histories of these jobs, for an archive. */
export function pruneHistories(db: Database.Database, ids: string[]): JobDetail[] {
  if (ids.length === 0) return [];
  const m = marks(ids.length);
  const jobs = db.prepare(`SELECT * FROM jobs WHERE id IN (${m})`).all(...ids) as JobRow[];
  const attempts = db
    .prepare(`SELECT * FROM attempts WHERE job_id IN (${m}) ORDER BY job_id, attempt_no`)
    .all(...ids) as AttemptRow[];
  const events = db
    .prepare(`SELECT * FROM events WHERE job_id IN (${m}) ORDER BY job_id, id`)
    .all(...ids) as EventRow[];
  const byId = new Map<string, { job: JobRow; attempts: AttemptRow[]; events: EventRow[] }>();
  for (const j of jobs) byId.set(j.id, { job: j, attempts: [], events: [] });
  for (const a of attempts) byId.get(a.job_id)?.attempts.push(a);
  for (const e of events) byId.get(e.job_id)?.events.push(e);
  return ids.flatMap((id) => {
    const r = byId.get(id);
    return r ? [detailFromRows(r.job, r.attempts, r.events)] : [];
  });
}

/**
 * Deletes the histories of `ids` that are still terminal (in `states`) and finished at or before
 * `cutoff`, and (given `archived`) whose events are still those archived; runs inside the
 * caller's write transaction. Returns the counts deleted and how many were left for later.
 */
export function pruneDelete(
  db: Database.Database,
  p: { ids: string[]; states: PrunableState[]; cutoff: number; archived?: JobDetail[] },
): Omit<JobPruneResult, 'more'> & { leftGrown: number } {
  const result = { jobs: emptyCounts(), attempts: 0, events: 0, leftGrown: 0 };
  if (p.ids.length === 0) return result;
  let still = db
    .prepare(
      `SELECT id FROM jobs WHERE id IN (${marks(p.ids.length)}) AND finished_at IS NOT NULL
       AND finished_at <= ? AND state IN (${marks(p.states.length)})`,
    )
    .pluck()
    .all(...p.ids, p.cutoff, ...p.states) as string[];
  if (p.archived && still.length > 0) {
    const counts = db
      .prepare(
        `SELECT job_id, count(*) AS n FROM events WHERE job_id IN (${marks(still.length)}) GROUP BY job_id`,
      )
      .all(...still) as { job_id: string; n: number }[];
    const same = archivedAsIs(p.archived, new Map(counts.map((c) => [c.job_id, c.n])));
    const kept = still.filter((id) => same.has(id));
    result.leftGrown = still.length - kept.length;
    still = kept;
  }
  if (still.length === 0) return result;
  const m = marks(still.length);
  result.events = db.prepare(`DELETE FROM events WHERE job_id IN (${m})`).run(...still).changes;
  result.attempts = db.prepare(`DELETE FROM attempts WHERE job_id IN (${m})`).run(...still).changes;
  const gone = db.prepare(`DELETE FROM jobs WHERE id IN (${m}) RETURNING state`).all(...still) as {
    state: PrunableState;
  }[];
  for (const g of gone) result.jobs[g.state]++;
  return result;
}

/** Store glue: what `SqliteStore.jobPruneMany` does, given its handle, clock and write queue. */
export async function jobPruneMany(
  h: {
    db: Database.Database;
    now: () => number;
    write: <T>(fn: () => T) => Promise<T>;
  },
  p: JobPruneParams,
): Promise<JobPruneResult> {
  const now = h.now();
  if (p.dryRun) return pruneCount(h.db, p, now);
  const states = statesOf(p);
  const batch = pruneSelect(h.db, p, now);
  if (batch.length === 0) return { jobs: emptyCounts(), attempts: 0, events: 0, more: false };
  const ids = batch.map((b) => b.id);
  const archived = p.archive ? pruneHistories(h.db, ids) : undefined;
  if (archived) await p.archive!(archived);
  const { leftGrown, ...deleted } = await h.write(() =>
    pruneDelete(h.db, { ids, states, cutoff: now - p.olderThanMs, archived }),
  );
  return { ...deleted, more: batch.length === p.limit || leftGrown > 0 };
}

/**
 * Gives the space of deleted rows back to the file system: `VACUUM` (rewrites the file; holds
 * the write lock while it runs, so workers wait) and a truncating WAL checkpoint. Without it,
 * SQLite keeps freed pages on its freelist and reuses them for new rows: the file stops
 * growing but does not shrink. Returns the sizes before and after, in bytes.
 */
export function sqliteVacuum(
  db: Database.Database,
  fileSize: () => number,
): { bytesBefore: number; bytesAfter: number } {
  const bytesBefore = fileSize();
  db.exec('VACUUM');
  db.pragma('wal_checkpoint(TRUNCATE)');
  return { bytesBefore, bytesAfter: fileSize() };
}
