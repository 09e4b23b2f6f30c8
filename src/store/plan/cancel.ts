/**
 * Cancelling: a QUEUED job, or a LEASED one whose attempt has not dispatched (ending that
 * attempt fences its worker: its dispatch marker will not apply). Anything else is refused.
 */
import type { AttemptRecord, JobRecord } from '../store.js';
import { cancelledErrorJson, planJobWrite } from './job.js';
import type { WriteSet } from './types.js';

export type CancelPlan = { write: WriteSet } | { why: string };

/** `attempt`: the job's current attempt, read (locked) when the job is LEASED. */
export function planCancel(p: {
  job: JobRecord;
  attempt: AttemptRecord | undefined;
  actor: string;
  reason: string;
  /** Who decided, when a person did (recorded in the event's detail). */
  by?: Record<string, unknown> | undefined;
  now: number;
}): CancelPlan {
  const { job, attempt, now } = p;
  const errorJson = cancelledErrorJson(p.reason);
  if (job.state === 'QUEUED')
    return {
      write: {
        job: planJobWrite(job, 'CANCELLED', now, { errorJson }),
        events: [
          {
            attemptNo: job.attemptCount || null,
            kind: 'cancelled',
            fromState: 'QUEUED',
            toState: 'CANCELLED',
            actor: p.actor,
            detailJson: JSON.stringify({ reason: p.reason, ...(p.by ? { by: p.by } : {}) }),
          },
        ],
        requeue: false,
      },
    };
  if (job.state !== 'LEASED') return { why: `it is ${job.state}` };
  if (!attempt || attempt.state !== 'LEASED' || attempt.dispatchedAt !== null)
    return { why: 'its current attempt has already dispatched the request' };
  return {
    write: {
      attemptEnd: {
        attemptNo: attempt.attemptNo,
        leaseToken: attempt.leaseToken,
        state: 'FAILED_BEFORE_SEND',
        finishedAt: now,
        resultJson: null,
        errorJson: null,
        reason: 'cancelled',
        endedJob: null,
      },
      job: planJobWrite(job, 'CANCELLED', now, { errorJson }),
      events: [
        {
          attemptNo: attempt.attemptNo,
          kind: 'cancelled',
          fromState: 'LEASED',
          toState: 'CANCELLED',
          actor: p.actor,
          detailJson: JSON.stringify({
            reason: p.reason,
            fencedOwner: attempt.ownerId,
            ...(p.by ? { by: p.by } : {}),
          }),
        },
      ],
      requeue: false,
    },
  };
}
