/**
 * The moves out of AWAITING_APPROVAL (issue #33 item 3): a person's approval, denial or cancel,
 * and expiry. Judged on the locked job with the store's clock, so a decision after the job's
 * `approval_expires_at` never runs it, whether or not a worker expired it yet. Every move out
 * of AWAITING_APPROVAL also clears `approval_expires_at` (the stores' approvals.ts write that).
 */
import { assert, type ErrorInfo } from '../../core/errors.js';
import { assertJobTransition } from '../../core/states.js';
import type { ApprovalDecide, JobRecord } from '../store.js';
import { planJobWrite } from './job.js';
import type { WriteSet } from './types.js';

/** The error an expired approval leaves on its job. */
export const APPROVAL_EXPIRED_ERROR: ErrorInfo = {
  name: 'ApprovalExpired',
  message: 'no approval decision before the approval timed out',
};

/**
 * What a decision writes: the decision itself, or (`expired`) the expiry the decision came too
 * late for; `why` when the job is not awaiting approval (nothing is written).
 */
export type DecidePlan = { write: WriteSet; expired: boolean } | { why: string };

type ApprovalJob = Pick<
  JobRecord,
  'id' | 'state' | 'approvalExpiresAt' | 'nextCheckAt' | 'attemptCount'
>;

/** Has this awaiting job's approval timed out at `now` (store clock)? */
export function approvalExpired(job: ApprovalJob, now: number): boolean {
  return job.approvalExpiresAt !== null && job.approvalExpiresAt <= now;
}

export function planDecide(p: {
  job: ApprovalJob;
  decide: ApprovalDecide;
  now: number;
}): DecidePlan {
  const { job, decide: d, now } = p;
  if (job.state !== 'AWAITING_APPROVAL') return { why: `it is ${job.state}` };
  if (approvalExpired(job, now))
    return {
      write: expiryWrite(job, now, d.actor, { lateDecision: d.kind }),
      expired: true,
    };
  assertJobTransition('AWAITING_APPROVAL', d.to);
  assert(
    (d.to === 'CANCELLED') === (d.error !== null),
    `an approval decision to ${d.to} ${d.error ? 'carries' : 'lacks'} an error`,
  );
  return {
    expired: false,
    write: {
      // Approved: due from the decision on, so it neither jumps the claim order nor reads as
      // overdue since its enqueue in queue-age metrics.
      job: planJobWrite(job, d.to, now, {
        ...(d.to === 'QUEUED' ? { runAt: now } : {}),
        errorJson: d.error ? JSON.stringify(d.error) : null,
      }),
      events: [
        {
          attemptNo: null,
          kind: d.kind,
          fromState: 'AWAITING_APPROVAL',
          toState: d.to,
          actor: d.actor,
          detailJson: JSON.stringify(d.detail),
        },
      ],
      requeue: d.to === 'QUEUED',
    },
  };
}

/** The expiry pass's move of one job: null when it is no longer awaiting or not yet due. */
export function planApprovalExpire(p: {
  job: ApprovalJob;
  actor: string;
  now: number;
}): WriteSet | null {
  if (p.job.state !== 'AWAITING_APPROVAL' || !approvalExpired(p.job, p.now)) return null;
  return expiryWrite(p.job, p.now, p.actor, {});
}

function expiryWrite(
  job: ApprovalJob,
  now: number,
  actor: string,
  detail: Record<string, unknown>,
): WriteSet {
  assertJobTransition('AWAITING_APPROVAL', 'CANCELLED');
  return {
    job: planJobWrite(job, 'CANCELLED', now, { errorJson: JSON.stringify(APPROVAL_EXPIRED_ERROR) }),
    events: [
      {
        attemptNo: null,
        kind: 'approval-expired',
        fromState: 'AWAITING_APPROVAL',
        toState: 'CANCELLED',
        actor,
        detailJson: JSON.stringify({ expiresAt: job.approvalExpiresAt, ...detail }),
      },
    ],
    requeue: false,
  };
}
