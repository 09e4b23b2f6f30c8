/**
 * The plan of moves (src/store/plan), tested directly: pure functions from the locked rows and
 * a request to the write set both stores write. The conformance suite checks the stores write it.
 */
import { describe, expect, it } from 'vitest';
import { IllegalTransition, InvariantViolation, RequestKeyConflict } from '../src/core/errors.js';
import {
  finishParams,
  planCancel,
  planDedup,
  planExpire,
  planFinish,
  planTransition,
} from '../src/store/plan/index.js';
import type { AttemptFinish, AttemptRecord, JobRecord, LeaseRef } from '../src/store/store.js';

const NOW = 1_000_000;

function job(o: Partial<JobRecord> = {}): JobRecord {
  return {
    id: 'j1',
    queue: 'default',
    operation: 'op.a',
    input: {},
    requestKey: 'k1',
    fingerprint: 'fp',
    runId: null,
    stepId: null,
    state: 'LEASED',
    priority: 0,
    runAt: 0,
    createdAt: 0,
    updatedAt: 0,
    finishedAt: null,
    attemptCount: 1,
    maxAttempts: 3,
    backoff: { initialMs: 10, factor: 2, maxMs: 100 },
    timeoutMs: 1_000,
    reconcileGraceMs: 5_000,
    approvalReason: null,
    approvalExpiresAt: null,
    nextCheckAt: null,
    lookupFailures: 0,
    result: null,
    error: null,
    ...o,
  };
}

function attempt(o: Partial<AttemptRecord> = {}): AttemptRecord {
  return {
    jobId: 'j1',
    attemptNo: 1,
    requestKey: 'k1',
    fingerprint: 'fp',
    state: 'LEASED',
    ownerId: 'w1',
    leaseToken: 't1',
    leasedAt: 0,
    leaseExpiresAt: NOW + 10_000,
    dispatchedAt: null,
    finishedAt: null,
    result: null,
    error: null,
    reason: null,
    resolution: null,
    resolutionSource: null,
    resolutionEvidence: null,
    resolvedAt: null,
    ...o,
  };
}

const lease: LeaseRef = { jobId: 'j1', attemptNo: 1, leaseToken: 't1' };

function finish(o: Partial<AttemptFinish> = {}): AttemptFinish {
  return {
    lease,
    state: 'SUCCEEDED',
    reason: null,
    resultJson: '{"ok":true}',
    error: null,
    job: { to: 'SUCCEEDED' },
    actor: 'w1',
    ...o,
  };
}

describe('planFinish', () => {
  it('a held lease: ends the attempt, moves the job, one event; a terminal state is stamped', () => {
    // Another actor than the lease's owner: the outcome is an event, not a routine step.
    const w = planFinish({
      job: job(),
      attempt: attempt({ dispatchedAt: NOW - 5, ownerId: 'w0' }),
      finish: finish(),
      now: NOW,
    })!;
    expect(w.attemptEnd).toEqual({
      attemptNo: 1,
      leaseToken: 't1',
      state: 'SUCCEEDED',
      finishedAt: NOW,
      resultJson: '{"ok":true}',
      errorJson: null,
      reason: null,
      endedJob: null,
    });
    expect(w.job).toMatchObject({
      state: 'SUCCEEDED',
      resultJson: '{"ok":true}',
      finishedAt: NOW,
      nextCheckAt: null,
    });
    expect(w.events).toEqual([
      {
        attemptNo: 1,
        kind: 'attempt-succeeded',
        fromState: 'LEASED',
        toState: 'SUCCEEDED',
        actor: 'w1',
        detailJson: '{"attemptState":"SUCCEEDED"}',
      },
    ]);
    expect(w.requeue).toBe(false);
  });

  it("the owner's outcome that ends the job SUCCEEDED or FAILED is a routine step, not an event", () => {
    const ok = planFinish({
      job: job(),
      attempt: attempt({ dispatchedAt: NOW - 5, ownerId: 'w1' }),
      finish: finish(),
      now: NOW,
    })!;
    expect(ok.attemptEnd?.endedJob).toBe('SUCCEEDED');
    expect(ok.events).toEqual([]);
    const failed = planFinish({
      job: job(),
      attempt: attempt({ dispatchedAt: NOW - 5, ownerId: 'w1' }),
      finish: finish({ state: 'FAILED', resultJson: null, job: { to: 'FAILED' } }),
      history: [],
      now: NOW,
    })!;
    expect(failed.attemptEnd?.endedJob).toBe('FAILED');
    expect(failed.events).toEqual([]);
    // FAILED not proven by the history (an earlier attempt may have sent): review, an event.
    const unproven = planFinish({
      job: job({ attemptCount: 2 }),
      attempt: attempt({ attemptNo: 2, dispatchedAt: NOW - 5, ownerId: 'w1' }),
      finish: finish({
        lease: { ...lease, attemptNo: 2 },
        state: 'FAILED',
        resultJson: null,
        job: { to: 'FAILED' },
      }),
      history: [
        { attemptNo: 1, state: 'UNKNOWN', resolution: null, resolutionSource: null, error: null },
      ],
      now: NOW,
    })!;
    expect(unproven.job.state).toBe('NEEDS_REVIEW');
    expect(unproven.attemptEnd?.endedJob).toBeNull();
    expect(unproven.events.map((e) => e.kind)).toEqual(['attempt-failed']);
    // A retry (QUEUED) is exceptional: an event, and no ended_job.
    const retried = planFinish({
      job: job(),
      attempt: attempt({ ownerId: 'w1' }),
      finish: finish({
        state: 'FAILED_BEFORE_SEND',
        resultJson: null,
        job: { to: 'QUEUED', delayMs: 10 },
      }),
      now: NOW,
    })!;
    expect(retried.attemptEnd?.endedJob).toBeNull();
    expect(retried.events.map((e) => e.kind)).toEqual(['attempt-failed-before-send']);
  });

  it('a lease that no longer holds is fenced out: nothing to write', () => {
    const other = { ...lease, leaseToken: 'stale' };
    expect(
      planFinish({ job: job(), attempt: attempt(), finish: finish({ lease: other }), now: NOW }),
    ).toBeNull();
    expect(
      planFinish({ job: job({ attemptCount: 2 }), attempt: attempt(), finish: finish(), now: NOW }),
    ).toBeNull();
    expect(
      planFinish({ job: undefined, attempt: undefined, finish: finish(), now: NOW }),
    ).toBeNull();
  });

  it('a requeue runs after its delay and wakes the queue; UNKNOWN is checked from the marker', () => {
    const retry = planFinish({
      job: job(),
      attempt: attempt(),
      finish: finish({
        state: 'FAILED_BEFORE_SEND',
        reason: 'x',
        resultJson: null,
        job: { to: 'QUEUED', delayMs: 40 },
      }),
      now: NOW,
    })!;
    expect(retry.job).toMatchObject({ state: 'QUEUED', runAt: NOW + 40, finishedAt: null });
    expect(retry.requeue).toBe(true);
    expect(JSON.parse(retry.events[0]!.detailJson!)).toEqual({
      attemptState: 'FAILED_BEFORE_SEND',
      reason: 'x',
      retryInMs: 40,
    });
    const unknown = planFinish({
      job: job(),
      attempt: attempt({ dispatchedAt: NOW - 100 }),
      finish: finish({
        state: 'UNKNOWN',
        resultJson: null,
        job: { to: 'UNKNOWN', checkAfterDispatchMs: 6_000 },
      }),
      now: NOW,
    })!;
    expect(unknown.job).toMatchObject({
      state: 'UNKNOWN',
      nextCheckAt: NOW - 100 + 6_000,
      lookupFailures: 0,
    });
  });

  it('an outcome that would break an invariant throws (UNKNOWN without a marker)', () => {
    expect(() =>
      planFinish({
        job: job(),
        attempt: attempt(),
        finish: finish({ state: 'UNKNOWN', job: { to: 'UNKNOWN' } }),
        now: NOW,
      }),
    ).toThrow(InvariantViolation);
  });

  it('finishParams serializes the event detail exactly as JSON.stringify would', () => {
    const f = finish({
      state: 'FAILED',
      error: { name: 'E', message: 'm' },
      job: { to: 'FAILED' },
    });
    expect(finishParams(f).eventDetailJson).toBe(
      JSON.stringify({ attemptState: 'FAILED', error: { name: 'E', message: 'm' } }),
    );
    expect(finishParams(finish()).eventDetailJson).toBe(
      JSON.stringify({ attemptState: 'SUCCEEDED' }),
    );
  });
});

describe('planExpire', () => {
  const expire = {
    lease,
    state: 'FAILED_BEFORE_SEND' as const,
    reason: 'lease-expired-before-dispatch',
    job: { to: 'QUEUED' as const, delayMs: 0 },
    actor: 'reclaimer',
  };

  it('only once the lease expired by more than the skew', () => {
    const a = attempt({ leaseExpiresAt: NOW - 500 });
    expect(planExpire({ job: job(), attempt: a, expire, skewMs: 1_000, now: NOW })).toBeNull();
    expect(planExpire({ job: job(), attempt: a, expire, skewMs: 100, now: NOW })?.job.state).toBe(
      'QUEUED',
    );
  });

  it('a misread marker is a bug', () => {
    const a = attempt({ leaseExpiresAt: NOW - 500, dispatchedAt: NOW - 600 });
    expect(() => planExpire({ job: job(), attempt: a, expire, skewMs: 0, now: NOW })).toThrow(
      InvariantViolation,
    );
  });
});

describe('planTransition', () => {
  const unknownJob = job({ state: 'UNKNOWN', lookupFailures: 2, nextCheckAt: NOW - 1 });
  const unknownAttempt = attempt({ state: 'UNKNOWN', dispatchedAt: NOW - 10 });
  const base = {
    jobId: 'j1',
    from: 'UNKNOWN' as const,
    expectAttemptNo: 1,
    event: { kind: 'lookup-inconclusive', actor: 'reconciler' },
  };

  it('an inconclusive lookup counts one more failure on the locked row and defers the check', () => {
    const w = planTransition({
      job: unknownJob,
      attempt: unknownAttempt,
      t: { ...base, to: 'UNKNOWN', recheckDelayMs: 500, lookupFailed: true },
      now: NOW,
    })!;
    expect(w.job).toMatchObject({ state: 'UNKNOWN', lookupFailures: 3, nextCheckAt: NOW + 500 });
  });

  it('back in line resets the failures; a resolution is written once; a stale one does not apply', () => {
    const w = planTransition({
      job: unknownJob,
      attempt: unknownAttempt,
      t: {
        ...base,
        to: 'QUEUED',
        resolution: { kind: 'retry', source: 'same-key', evidence: null },
      },
      now: NOW,
    })!;
    expect(w.job).toMatchObject({ state: 'QUEUED', lookupFailures: 0, runAt: NOW });
    expect(w.resolution).toMatchObject({ attemptNo: 1, kind: 'retry', resolvedAt: NOW });
    expect(w.requeue).toBe(true);
    expect(
      planTransition({
        job: unknownJob,
        attempt: unknownAttempt,
        t: { ...base, to: 'QUEUED', expectAttemptNo: 2 },
        now: NOW,
      }),
    ).toBeNull();
  });
});

describe('planCancel', () => {
  const p = { actor: 'op', reason: 'no longer needed', now: NOW };

  it('a QUEUED job, and a LEASED one before dispatch (its attempt ended, fencing its worker)', () => {
    const queued = planCancel({
      ...p,
      job: job({ state: 'QUEUED', attemptCount: 0 }),
      attempt: undefined,
    });
    expect('write' in queued && queued.write.job).toMatchObject({
      state: 'CANCELLED',
      finishedAt: NOW,
    });
    const leased = planCancel({ ...p, job: job(), attempt: attempt() });
    expect('write' in leased && leased.write.attemptEnd).toMatchObject({
      state: 'FAILED_BEFORE_SEND',
      reason: 'cancelled',
    });
  });

  it('refused after dispatch, and for any other state', () => {
    expect(planCancel({ ...p, job: job(), attempt: attempt({ dispatchedAt: NOW - 1 }) })).toEqual({
      why: 'its current attempt has already dispatched the request',
    });
    expect(planCancel({ ...p, job: job({ state: 'SUCCEEDED' }), attempt: undefined })).toEqual({
      why: 'it is SUCCEEDED',
    });
  });

  it('a cancel is never an illegal transition', () => {
    expect(() =>
      planCancel({ ...p, job: job({ state: 'QUEUED' }), attempt: undefined }),
    ).not.toThrow(IllegalTransition);
  });
});

describe('planDedup (invariant 9)', () => {
  const existing = { id: 'j1', operation: 'payments.charge', fingerprint: 'fp' };

  it('same operation and fingerprint: the existing job answers', () => {
    expect(() =>
      planDedup(existing, { requestKey: 'k', operation: 'payments.charge', fingerprint: 'fp' }),
    ).not.toThrow();
  });

  it('another operation or fingerprint: a conflict naming both', () => {
    expect(() =>
      planDedup(existing, { requestKey: 'k', operation: 'payments.refund', fingerprint: 'fp' }),
    ).toThrow(RequestKeyConflict);
    expect(() =>
      planDedup(existing, { requestKey: 'k', operation: 'payments.charge', fingerprint: 'other' }),
    ).toThrow(/fingerprint/);
  });
});
