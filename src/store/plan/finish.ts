/**
 * An attempt's end (a worker's outcome, or the reclaimer's expiry): what it does to the attempt,
 * to its job, and which event says so.
 */
import { assert } from '../../core/errors.js';
import type { JobState } from '../../core/states.js';
import { jsonOrNull } from '../rows.js';
import { assertFinishLegal, leaseHolds } from '../rules.js';
import type { AttemptExpire, AttemptFinish, AttemptRecord, JobRecord } from '../store.js';
import { planJobWrite } from './job.js';
import { failedOrReview, type AttemptFact } from './proof.js';
import type { WriteSet } from './types.js';

/**
 * What a finish writes that does not depend on the locked rows. The PostgreSQL one-statement
 * outcome passes these as parameters; `planFinish` builds on them.
 */
export interface FinishParams {
  jobTo: JobState;
  /** QUEUED: runs again this long after now. */
  runDelayMs: number | null;
  /** UNKNOWN: checked this long after the dispatch marker. */
  checkAfterDispatchMs: number | null;
  /** The job's result and error (null: keep). */
  jobResultJson: string | null;
  jobErrorJson: string | null;
  /** The job's lookup failures start again at 0 (UNKNOWN); else kept. */
  resetsLookupFailures: boolean;
  eventKind: string;
  eventDetailJson: string;
  /**
   * A worker's outcome that ends the job SUCCEEDED or FAILED: a routine step (invariant 8),
   * recorded as the attempt's `ended_job` instead of an event when the actor is the lease's owner
   * (the event it stands for is rebuilt from the attempt's columns: src/store/trail.ts).
   */
  routine: boolean;
}

const EVENT_KINDS = new Map<string, string>();

/** The event kind of an attempt's end, e.g. `attempt-failed-before-send`. */
export function attemptEventKind(state: string): string {
  let kind = EVENT_KINDS.get(state);
  if (kind === undefined) {
    kind = `attempt-${state.toLowerCase().replaceAll('_', '-')}`;
    EVENT_KINDS.set(state, kind);
  }
  return kind;
}

/** `unproven`: the attempts that sent a job planned FAILED to NEEDS_REVIEW (proof.ts). */
export function finishParams(
  f: AttemptFinish | AttemptExpire,
  unproven: readonly number[] = [],
): FinishParams {
  const to = f.job.to;
  const resultJson = 'resultJson' in f ? f.resultJson : null;
  const error = 'error' in f ? f.error : null;
  return {
    jobTo: to,
    runDelayMs: to === 'QUEUED' ? (f.job.delayMs ?? 0) : null,
    checkAfterDispatchMs: to === 'UNKNOWN' ? (f.job.checkAfterDispatchMs ?? 0) : null,
    jobResultJson: to === 'SUCCEEDED' ? resultJson : null,
    jobErrorJson: to === 'FAILED' || to === 'NEEDS_REVIEW' ? jsonOrNull(error) : null,
    resetsLookupFailures: to === 'UNKNOWN',
    eventKind: attemptEventKind(f.state),
    routine:
      (to === 'SUCCEEDED' || to === 'FAILED') &&
      'resultJson' in f &&
      f.job.delayMs === undefined &&
      unproven.length === 0,
    // Serialized by hand when it has only the constant part (the common case, on the hot path).
    eventDetailJson:
      f.reason || error || f.job.delayMs !== undefined || unproven.length > 0
        ? JSON.stringify({
            attemptState: f.state,
            ...(f.reason ? { reason: f.reason } : {}),
            ...(error ? { error } : {}),
            ...(f.job.delayMs !== undefined ? { retryInMs: f.job.delayMs } : {}),
            ...(unproven.length > 0 ? { unprovenAttempts: unproven, review: UNPROVEN } : {}),
          })
        : `{"attemptState":"${f.state}"}`,
  };
}

/** Why a job whose attempts ran out went to review instead of FAILED (its event says so). */
export const UNPROVEN =
  'attempts ran out, but an earlier attempt may have reached the downstream: nothing proves it had no effect';

type FenceJob = Pick<JobRecord, 'id' | 'state' | 'attemptCount' | 'nextCheckAt'>;
type FenceAttempt = Pick<
  AttemptRecord,
  'attemptNo' | 'state' | 'leaseToken' | 'leaseExpiresAt' | 'dispatchedAt' | 'ownerId'
>;

/**
 * A worker's outcome on its locked job and attempt: null when its lease no longer holds (it was
 * fenced out); throws (writing nothing) if the outcome would break an invariant.
 */
export function planFinish(p: {
  job: FenceJob | undefined;
  attempt: FenceAttempt | undefined;
  finish: AttemptFinish;
  /** The job's earlier attempts, read when `needsHistory(finish.job.to)`. */
  history?: readonly AttemptFact[];
  now: number;
}): WriteSet | null {
  const { job, attempt, finish: f } = p;
  if (!job || !attempt || !leaseHolds(job as JobRecord, attempt as AttemptRecord, f.lease))
    return null;
  assertFinishLegal(job as JobRecord, attempt as AttemptRecord, f);
  return endAttempt(job, attempt, judged(f, attempt, p.history), p.now);
}

/** The move with item 1's rule applied: FAILED only when the whole history proves it. */
function judged<F extends AttemptFinish | AttemptExpire>(
  f: F,
  attempt: FenceAttempt,
  earlier: readonly AttemptFact[] | undefined,
): { f: F; unproven: number[] } {
  const history = earlier && [
    ...earlier.filter((a) => a.attemptNo < attempt.attemptNo),
    {
      attemptNo: attempt.attemptNo,
      state: f.state,
      resolution: null,
      resolutionSource: null,
      error: 'error' in f ? f.error : null,
    },
  ];
  const { to, unproven } = failedOrReview(f.job.to, history);
  return to === f.job.to ? { f, unproven } : { f: { ...f, job: { to } }, unproven };
}

/**
 * The reclaimer's expiry, judged again on the locked rows: null when the lease no longer holds
 * or is not yet expired by `skewMs` (a second reclaimer, a late heartbeat).
 */
export function planExpire(p: {
  job: FenceJob | undefined;
  attempt: FenceAttempt | undefined;
  expire: AttemptExpire;
  skewMs: number;
  /** The job's earlier attempts, read when `needsHistory(expire.job.to)`. */
  history?: readonly AttemptFact[];
  now: number;
}): WriteSet | null {
  const { job, attempt, expire: e } = p;
  if (!job || !attempt || !leaseHolds(job as JobRecord, attempt as AttemptRecord, e.lease))
    return null;
  if (attempt.leaseExpiresAt + p.skewMs >= p.now) return null;
  assert(
    (attempt.dispatchedAt === null) === (e.state === 'FAILED_BEFORE_SEND'),
    `expiry of job ${job.id} attempt ${attempt.attemptNo} misread its dispatch marker`,
  );
  assertFinishLegal(job as JobRecord, attempt as AttemptRecord, {
    ...e,
    resultJson: null,
    error: null,
  });
  return endAttempt(job, attempt, judged(e, attempt, p.history), p.now);
}

function endAttempt(
  job: FenceJob,
  attempt: FenceAttempt,
  j: { f: AttemptFinish | AttemptExpire; unproven: readonly number[] },
  now: number,
): WriteSet {
  const { f } = j;
  const fp = finishParams(f, j.unproven);
  const resultJson = 'resultJson' in f ? f.resultJson : null;
  const error = 'error' in f ? f.error : null;
  const routine = fp.routine && f.actor === attempt.ownerId;
  return {
    attemptEnd: {
      attemptNo: attempt.attemptNo,
      leaseToken: attempt.leaseToken,
      state: f.state,
      finishedAt: now,
      resultJson,
      errorJson: jsonOrNull(error),
      reason: f.reason,
      endedJob: routine ? (fp.jobTo as 'SUCCEEDED' | 'FAILED') : null,
    },
    job: planJobWrite(job, fp.jobTo, now, {
      ...(fp.runDelayMs !== null ? { runAt: now + fp.runDelayMs } : {}),
      ...(fp.checkAfterDispatchMs !== null
        ? { nextCheckAt: (attempt.dispatchedAt ?? now) + fp.checkAfterDispatchMs }
        : {}),
      ...(fp.resetsLookupFailures ? { lookupFailures: 0 } : {}),
      resultJson: fp.jobResultJson,
      errorJson: fp.jobErrorJson,
    }),
    events: routine
      ? []
      : [
          {
            attemptNo: attempt.attemptNo,
            kind: fp.eventKind,
            fromState: 'LEASED',
            toState: fp.jobTo,
            actor: f.actor,
            detailJson: fp.eventDetailJson,
          },
        ],
    requeue: fp.jobTo === 'QUEUED',
  };
}
