/**
 * The checks every store runs inside its write transactions, written once so that the stores
 * differ only in SQL. Fences report "did not apply"; broken invariants throw.
 */
import { randomUUID } from 'node:crypto';
import { assert } from '../core/errors.js';
import { assertAttemptTransition, assertJobTransition } from '../core/states.js';
import type { AttemptFinish, AttemptRecord, JobRecord, JobTransition, LeaseRef } from './store.js';

/** Does this lease still own the attempt (state LEASED, same token, job on this attempt)? */
export function leaseHolds(
  job: JobRecord | undefined,
  attempt: AttemptRecord | undefined,
  lease: LeaseRef,
): boolean {
  return (
    job !== undefined &&
    attempt !== undefined &&
    attempt.state === 'LEASED' &&
    attempt.leaseToken === lease.leaseToken &&
    job.state === 'LEASED' &&
    job.attemptCount === lease.attemptNo
  );
}

/** Throws if an outcome would break an invariant; call only when the lease holds. */
export function assertFinishLegal(job: JobRecord, attempt: AttemptRecord, f: AttemptFinish): void {
  assertAttemptTransition(attempt.state, f.state);
  assertJobTransition(job.state, f.job.to);
  if (f.state === 'FAILED_BEFORE_SEND' && attempt.dispatchedAt !== null) {
    // With a marker, only a classifier's proof that nothing left (e.g. connection refused) says so.
    assert(
      f.reason?.startsWith('not-sent') === true,
      `job ${job.id} attempt ${attempt.attemptNo}: FAILED_BEFORE_SEND after a dispatch marker without proof`,
    );
  }
  if (f.state === 'UNKNOWN') {
    assert(
      attempt.dispatchedAt !== null,
      `job ${job.id} attempt ${attempt.attemptNo}: UNKNOWN without a dispatch marker`,
    );
    assert(
      f.job.to === 'UNKNOWN' || f.job.to === 'NEEDS_REVIEW',
      `an UNKNOWN attempt cannot move its job to ${f.job.to}`,
    );
  }
  if (f.job.to === 'QUEUED') {
    // Invariant 5: a marker without outcome is never retried by this path.
    assert(
      f.state === 'FAILED_BEFORE_SEND' || f.state === 'FAILED',
      `attempt ${f.state} cannot requeue its job`,
    );
  }
}

/** Does a conditional transition apply to the job and its latest attempt as they are now? */
export function transitionApplies(
  job: JobRecord | undefined,
  attempt: AttemptRecord | undefined,
  t: JobTransition,
): boolean {
  if (!job || job.state !== t.from || job.attemptCount !== t.expectAttemptNo) return false;
  if (t.resolution) {
    if (!attempt || attempt.state !== 'UNKNOWN' || attempt.resolution !== null) return false;
  }
  return true;
}

export function assertTransitionLegal(t: JobTransition): void {
  if (t.from !== t.to) assertJobTransition(t.from, t.to);
  else
    assert(
      t.from === 'UNKNOWN',
      `a same-state update is only for deferring an UNKNOWN job, not ${t.from}`,
    );
}

/** A pseudo-random token for a lease; its only job is to differ between attempts and owners. */
export function newLeaseToken(): string {
  return randomUUID();
}
