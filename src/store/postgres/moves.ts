/**
 * PostgreSQL moves planned by the plan layer (src/store/plan), on the colder paths (reclaimer,
 * reconciler, cancel): each locks the rows in a transaction, calls the plan and writes what it
 * says (`flush`).
 */
import { assert } from '../../core/errors.js';
import { assertTransitionLegal } from '../rules.js';
import {
  attemptFactFromRow,
  attemptFromRow,
  jobFromRow,
  toMs,
  type AttemptFactRow,
  type AttemptRow,
  type JobRow,
} from '../rows.js';
import type {
  AttemptExpire,
  AttemptFinish,
  AttemptRecord,
  JobCancelResult,
  JobRecord,
  JobTransition,
} from '../store.js';
import {
  needsHistory,
  planCancel,
  planExpire,
  planFinish,
  planTransition,
  type AttemptFact,
} from '../plan/index.js';
import type { PgHandle } from './handle.js';
import { TxWrites, type Queryable } from './commit.js';
import { leaseKey } from './attempts.js';

interface LockedLease {
  job: JobRecord;
  attempt: AttemptRecord;
}

export async function clockOn(h: PgHandle, c: Queryable): Promise<number> {
  const r = await c.query<{ now: Date }>(h.sql.clockNow);
  return toMs(r.rows[0]!.now);
}

/** Locks each lease's job and attempt (job id order); `now` is the clock once all are held. */
export async function lockLeases(
  h: PgHandle,
  c: Queryable,
  leases: { jobId: string; attemptNo: number }[],
): Promise<{ now: number; locked: Map<string, LockedLease> }> {
  const refs = leases.map((l) => ({ job_id: l.jobId, attempt_no: l.attemptNo }));
  const r = await c.query<{ job: JobRow; attempt: AttemptRow; now: Date }>(h.sql.leaseLock, [
    JSON.stringify(refs),
  ]);
  const locked = new Map<string, LockedLease>();
  let now = 0;
  for (const row of r.rows) {
    const job = jobFromRow(row.job);
    const attempt = attemptFromRow(row.attempt, job);
    locked.set(leaseKey(attempt.jobId, attempt.attemptNo), { job, attempt });
    now = Math.max(now, toMs(row.now));
  }
  if (r.rows.length === 0) now = await clockOn(h, c);
  return { now, locked };
}

export async function lockJob(
  h: PgHandle,
  c: Queryable,
  id: string,
): Promise<{ job?: JobRecord; now: number }> {
  const r = await c.query<JobRow & { now: Date }>(h.sql.jobLock, [id]);
  const row = r.rows[0];
  if (!row) return { now: await clockOn(h, c) };
  return { job: jobFromRow(row), now: toMs(row.now) };
}

/** Locks the job's attempt `attemptNo` (the job is locked: see `lockJob`). */
export async function lockAttempt(
  h: PgHandle,
  c: Queryable,
  job: JobRecord,
  attemptNo: number,
): Promise<AttemptRecord | undefined> {
  const r = await c.query<AttemptRow>(h.sql.attemptLock, [job.id, attemptNo]);
  return r.rows[0] && attemptFromRow(r.rows[0], job);
}

/** The job's attempts as plan/proof.ts reads them, when a move planned to `to` needs them. */
async function historyFor(
  h: PgHandle,
  c: Queryable,
  jobId: string,
  to: JobTransition['to'],
): Promise<AttemptFact[] | undefined> {
  if (!needsHistory(to)) return undefined;
  const r = await c.query<AttemptFactRow>(h.sql.attemptFacts, [jobId]);
  return r.rows.map(attemptFactFromRow);
}

/** Writes what a transaction gathered: attempt ends, then jobs, then events, then wake-ups. */
export async function flush(
  h: PgHandle,
  c: Queryable,
  w: TxWrites,
  now: number,
): Promise<JobRecord[]> {
  if (w.attemptEnds.length > 0) {
    const r = await c.query(h.sql.attemptEnd, [JSON.stringify(w.attemptEnds)]);
    assert(r.rowCount === w.attemptEnds.length, 'every locked attempt the rules ended was written');
  }
  let moved: JobRecord[] = [];
  if (w.jobs.length > 0) {
    const r = await c.query<JobRow>(h.sql.jobUpdate, [JSON.stringify(w.jobs)]);
    assert(r.rowCount === w.jobs.length, 'every locked job the rules moved was written');
    moved = r.rows.map(jobFromRow);
  }
  if (w.events.length > 0) await c.query(h.sql.eventInsert, [JSON.stringify(w.events), now]);
  if (w.requeued.size > 0) {
    await c.query(h.sql.notify, [[...w.requeued], h.channel]);
    const wakes = h.db.wakesOf.get(c);
    if (wakes) for (const q of w.requeued) wakes.add(q);
  }
  return moved;
}

export async function jobTransition(h: PgHandle, t: JobTransition): Promise<boolean> {
  assertTransitionLegal(t);
  return h.db.tx(async (c) => {
    const { job, now } = await lockJob(h, c, t.jobId);
    const attempt =
      job && job.attemptCount > 0 ? await lockAttempt(h, c, job, job.attemptCount) : undefined;
    const history = job && (await historyFor(h, c, job.id, t.to));
    const plan = planTransition({ job, attempt, t, history, now });
    if (!plan || !job) return false;
    const r = plan.resolution;
    if (r) {
      const done = await c.query(h.sql.attemptResolve, [
        job.id,
        r.attemptNo,
        r.kind,
        r.source,
        r.evidenceJson,
        r.resolvedAt,
      ]);
      assert(done.rowCount === 1, `job ${job.id} attempt ${r.attemptNo} took its resolution`);
    }
    const w = new TxWrites();
    w.add(job, plan);
    await flush(h, c, w, now);
    return true;
  });
}

export async function jobCancel(
  h: PgHandle,
  p: {
    id: string;
    actor: string;
    reason: string;
    by?: Record<string, unknown>;
  },
): Promise<JobCancelResult | null> {
  return h.db.tx(async (c): Promise<JobCancelResult | null> => {
    const { job, now } = await lockJob(h, c, p.id);
    if (!job) return null;
    const attempt =
      job.state === 'LEASED' ? await lockAttempt(h, c, job, job.attemptCount) : undefined;
    const plan = planCancel({ job, attempt, actor: p.actor, reason: p.reason, by: p.by, now });
    if ('why' in plan) return { cancelled: false, job, why: plan.why };
    const w = new TxWrites();
    w.add(job, plan.write);
    const [after] = await flush(h, c, w, now);
    assert(after, `cancelled job ${job.id} was written`);
    return { cancelled: true, job: after };
  });
}

export async function attemptExpireMany(
  h: PgHandle,
  p: { expiries: AttemptExpire[]; skewMs: number },
): Promise<boolean[]> {
  if (p.expiries.length === 0) return [];
  return h.db.tx(async (c) => {
    const { now, locked } = await lockLeases(
      h,
      c,
      p.expiries.map((e) => e.lease),
    );
    const w = new TxWrites();
    const applied: boolean[] = [];
    for (const e of p.expiries) {
      const l = locked.get(leaseKey(e.lease.jobId, e.lease.attemptNo));
      // Judged again under the lock: a second reclaimer, or a late heartbeat, finds nothing to do.
      const plan = planExpire({
        job: l?.job,
        attempt: l?.attempt,
        expire: e,
        skewMs: p.skewMs,
        history: await historyFor(h, c, e.lease.jobId, e.job.to),
        now,
      });
      applied.push(plan !== null && l !== undefined);
      if (!plan || !l) continue;
      w.add(l.job, plan);
      // A second expiry of the same lease in this batch finds it ended.
      l.attempt = { ...l.attempt, state: e.state };
    }
    await flush(h, c, w, now);
    return applied;
  });
}

/**
 * Outcomes that would end their job FAILED: off the one-statement hot path, because the plan
 * judges them with the job's attempt history (plan/proof.ts). Rare: attempts ran out, or the
 * downstream refused.
 */
export async function attemptFinishWithHistory(
  h: PgHandle,
  finishes: AttemptFinish[],
): Promise<boolean[]> {
  if (finishes.length === 0) return [];
  return h.db.tx(async (c) => {
    const { now, locked } = await lockLeases(
      h,
      c,
      finishes.map((f) => f.lease),
    );
    const w = new TxWrites();
    const applied: boolean[] = [];
    for (const f of finishes) {
      const l = locked.get(leaseKey(f.lease.jobId, f.lease.attemptNo));
      const history = await historyFor(h, c, f.lease.jobId, f.job.to);
      const plan = planFinish({ job: l?.job, attempt: l?.attempt, finish: f, history, now });
      applied.push(plan !== null && l !== undefined);
      if (!plan || !l) continue;
      w.add(l.job, plan);
      l.attempt = { ...l.attempt, state: f.state };
    }
    await flush(h, c, w, now);
    return applied;
  });
}
