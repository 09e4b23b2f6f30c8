/**
 * SQLite moves planned by the plan layer (src/store/plan): each locks (the write transaction),
 * fences, reads, calls the plan and writes what it says (`writePlan`).
 */
import type { AttemptState, JobState } from '../../core/states.js';
import { assertTransitionLegal } from '../rules.js';
import {
  needsHistory,
  planCancel,
  planExpire,
  planFinish,
  planTransition,
  type EventWrite,
  type WriteSet,
} from '../plan/index.js';
import type {
  AttemptExpire,
  AttemptFinish,
  AttemptRecord,
  JobCancelResult,
  JobRecord,
  JobTransition,
  LeaseRef,
} from '../store.js';
import type { SqliteHandle } from './handle.js';
import { attemptFacts, getAttempt, getJob } from './reads.js';
import { SET_JOB_STATE_BY_ID, SET_JOB_STATE_BY_ROWID } from './statements.js';

/** The columns of `fenceView`, in order. */
type FenceRow = [
  attemptRowid: number,
  attemptState: AttemptState,
  leaseToken: string,
  leaseExpiresAt: number,
  dispatchedAt: number | null,
  fingerprint: string,
  ownerId: string,
  jobRowid: number,
  jobState: JobState,
  attemptCount: number,
  nextCheckAt: number | null,
];

/** An attempt and its job as the lease fence sees them (partial records: see `fenceView`). */
export interface FenceView {
  job: JobRecord;
  attempt: AttemptRecord;
  jobRowid: number;
  attemptRowid: number;
}

/**
 * The lease fence's view of an attempt and its job, in one narrow read (no JSON parsed): the
 * fields that `leaseHolds` and `assertFinishLegal` judge, plus the rowids to write by.
 */
export function fenceView(h: SqliteHandle, lease: LeaseRef): FenceView | undefined {
  const r = h
    .rawStmt(
      `SELECT a.rowid, a.state, a.lease_token, a.lease_expires_at, a.dispatched_at, j.request_fingerprint,
            a.owner_id, j.rowid, j.state, j.attempt_count, j.next_check_at
     FROM attempts a JOIN jobs j ON j.id = a.job_id
     WHERE a.job_id = ? AND a.attempt_no = ?`,
    )
    .get(lease.jobId, lease.attemptNo) as FenceRow | undefined;
  if (!r) return undefined;
  // Only the fields the shared rules read (see rules.ts): the rest of each record is not needed.
  const job = {
    id: lease.jobId,
    state: r[8],
    attemptCount: r[9],
    nextCheckAt: r[10],
    fingerprint: r[5],
  } as JobRecord;
  const attempt = {
    jobId: lease.jobId,
    attemptNo: lease.attemptNo,
    state: r[1],
    leaseToken: r[2],
    leaseExpiresAt: r[3],
    dispatchedAt: r[4],
    ownerId: r[6],
    fingerprint: r[5],
  } as AttemptRecord;
  return { job, attempt, jobRowid: r[7], attemptRowid: r[0] };
}

/**
 * Writes what a plan decided for a locked job: the attempt's end (by rowid when the fence
 * read it, fenced on its token) or resolution, the job's columns, the events, a wake-up.
 */
export function writePlan(
  h: SqliteHandle,
  at: { job: Pick<JobRecord, 'id' | 'fingerprint'>; jobRowid?: number; attemptRowid?: number },
  w: WriteSet,
): void {
  const jobId = at.job.id;
  const e = w.attemptEnd;
  if (e && at.attemptRowid !== undefined)
    h.stmt(
      `UPDATE attempts SET state = ?, finished_at = ?, result_json = ?, error_json = ?, reason = ?,
         ended_job = ?
       WHERE rowid = ? AND lease_token = ? AND state = 'LEASED'`,
    ).run(
      e.state,
      e.finishedAt,
      e.resultJson,
      e.errorJson,
      e.reason,
      e.endedJob,
      at.attemptRowid,
      e.leaseToken,
    );
  else if (e)
    h.stmt(
      `UPDATE attempts SET state = ?, finished_at = ?, result_json = ?, error_json = ?, reason = ?,
         ended_job = ?
       WHERE job_id = ? AND attempt_no = ? AND lease_token = ? AND state = 'LEASED'`,
    ).run(
      e.state,
      e.finishedAt,
      e.resultJson,
      e.errorJson,
      e.reason,
      e.endedJob,
      jobId,
      e.attemptNo,
      e.leaseToken,
    );
  const r = w.resolution;
  if (r)
    h.stmt(
      `UPDATE attempts SET resolution = ?, resolution_source = ?, resolution_evidence_json = ?, resolved_at = ?
       WHERE job_id = ? AND attempt_no = ? AND state = 'UNKNOWN' AND resolution IS NULL`,
    ).run(r.kind, r.source, r.evidenceJson, r.resolvedAt, jobId, r.attemptNo);
  const j = w.job;
  h.stmt(at.jobRowid !== undefined ? SET_JOB_STATE_BY_ROWID : SET_JOB_STATE_BY_ID).run(
    j.state,
    j.updatedAt,
    j.runAt,
    j.nextCheckAt,
    j.lookupFailures,
    j.resultJson,
    j.errorJson,
    j.finishedAt,
    at.jobRowid ?? jobId,
  );
  if (w.requeue) h.writer.newWork = true;
  for (const ev of w.events) writeEvent(h, at.job, ev, j.updatedAt);
}

export function writeEvent(
  h: SqliteHandle,
  job: Pick<JobRecord, 'id' | 'fingerprint'>,
  e: EventWrite,
  at: number,
): void {
  h.writer.event(
    job.id,
    e.attemptNo,
    job.fingerprint,
    e.kind,
    e.fromState,
    e.toState,
    e.actor,
    e.detailJson,
    at,
  );
}

export function jobTransition(h: SqliteHandle, t: JobTransition): Promise<boolean> {
  return h.writer.write(() => {
    assertTransitionLegal(t);
    const now = h.now();
    const job = getJob(h, t.jobId);
    const attempt = job && job.attemptCount > 0 ? getAttempt(h, job, job.attemptCount) : undefined;
    const history = job && needsHistory(t.to) ? attemptFacts(h, job.id) : undefined;
    const w = planTransition({ job, attempt, t, history, now });
    if (!w) return false;
    writePlan(h, { job: job! }, w);
    return true;
  });
}

export function jobCancel(
  h: SqliteHandle,
  p: { id: string; actor: string; reason: string; by?: Record<string, unknown> },
): Promise<JobCancelResult | null> {
  return h.writer.write((): JobCancelResult | null => {
    const now = h.now();
    const job = getJob(h, p.id);
    if (!job) return null;
    const attempt = job.state === 'LEASED' ? getAttempt(h, job, job.attemptCount) : undefined;
    const plan = planCancel({ job, attempt, actor: p.actor, reason: p.reason, by: p.by, now });
    if ('why' in plan) return { cancelled: false, job, why: plan.why };
    writePlan(h, { job }, plan.write);
    return { cancelled: true, job: getJob(h, job.id)! };
  });
}

export function attemptFinishMany(
  h: SqliteHandle,
  p: { finishes: AttemptFinish[] },
): Promise<boolean[]> {
  if (p.finishes.length === 0) return Promise.resolve([]);
  return h.writer.write(() => {
    const now = h.now();
    return p.finishes.map((f) => {
      // The fence read first (one join, both rowids), then both rows written by rowid: cheaper
      // than a conditional UPDATE of the attempt followed by the job's by id.
      const v = fenceView(h, f.lease);
      const history = v && needsHistory(f.job.to) ? attemptFacts(h, f.lease.jobId) : undefined;
      const w = planFinish({ job: v?.job, attempt: v?.attempt, finish: f, history, now });
      if (!w) return false;
      writePlan(h, v!, w);
      return true;
    });
  });
}

export function attemptExpireMany(
  h: SqliteHandle,
  p: { expiries: AttemptExpire[]; skewMs: number },
): Promise<boolean[]> {
  if (p.expiries.length === 0) return Promise.resolve([]);
  return h.writer.write(() => {
    const now = h.now();
    return p.expiries.map((e) => {
      // Judged again under the write lock: a second reclaimer, or a late heartbeat, finds nothing to do.
      const v = fenceView(h, e.lease);
      const w = planExpire({
        job: v?.job,
        attempt: v?.attempt,
        expire: e,
        skewMs: p.skewMs,
        history: v && needsHistory(e.job.to) ? attemptFacts(h, e.lease.jobId) : undefined,
        now,
      });
      if (!w) return false;
      writePlan(h, v!, w);
      return true;
    });
  });
}
