/**
 * Issue #33 item 1, as a property over generated attempt histories: whatever ends a job that
 * was planned FAILED (a worker's outcome, the reclaimer's expiry, late evidence), it ends
 * FAILED only if no attempt of its history may have had an effect, or its last answer is a
 * refusal that speaks for the request key; otherwise NEEDS_REVIEW, naming the unproven
 * attempts. A small seeded generator (replay a failure from its seed).
 */
import { describe, expect, it } from 'vitest';
import type { ErrorInfo } from '../src/core/errors.js';
import type { Resolution } from '../src/core/states.js';
import {
  planExpire,
  planFinish,
  planTransition,
  type AttemptFact,
} from '../src/store/plan/index.js';
import type { AttemptRecord, JobRecord } from '../src/store/store.js';

const NOW = 1_000_000;
const RUNS = 3_000;

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

const RETRYABLE: ErrorInfo = { name: 'DefiniteFailure', message: '503', retryable: true };
const FINAL: ErrorInfo = { name: 'DefiniteFailure', message: 'declined', retryable: false };
const NOT_SENT: ErrorInfo = {
  name: 'Error',
  message: 'connect ECONNREFUSED',
  code: 'ECONNREFUSED',
};

/** An attempt that was followed by another: every way a job goes back in line. */
function earlierAttempt(r: () => number, attemptNo: number): AttemptFact {
  const kind = pick(r, ['fbs', 'failed', 'unknown'] as const);
  if (kind === 'fbs')
    return {
      attemptNo,
      state: 'FAILED_BEFORE_SEND',
      resolution: null,
      resolutionSource: null,
      error: NOT_SENT,
    };
  if (kind === 'failed')
    return {
      attemptNo,
      state: 'FAILED',
      resolution: null,
      resolutionSource: null,
      error: RETRYABLE,
    };
  const [resolution, resolutionSource] = pick(r, [
    ['retry', 'same-key'],
    ['retry', 'operator:ann'],
    ['not_found', 'lookup'],
    ['failed', 'lookup'],
    ['failed', 'late-worker'],
  ] as const);
  return { attemptNo, state: 'UNKNOWN', resolution, resolutionSource, error: null };
}

/** The oracle, said in terms of effects rather than the plan's code. */
function mayHaveHadEffect(a: AttemptFact): boolean {
  return a.state === 'UNKNOWN' && a.resolution !== 'failed' && a.resolution !== 'not_found';
}

function history(r: () => number, n: number): AttemptFact[] {
  return Array.from({ length: n - 1 }, (_, i) => earlierAttempt(r, i + 1));
}

function job(n: number, o: Partial<JobRecord> = {}): JobRecord {
  return {
    id: 'j1',
    state: 'LEASED',
    attemptCount: n,
    nextCheckAt: null,
    fingerprint: 'fp',
    ...o,
  } as JobRecord;
}

function leased(n: number, o: Partial<AttemptRecord> = {}): AttemptRecord {
  return {
    jobId: 'j1',
    attemptNo: n,
    state: 'LEASED',
    leaseToken: 't',
    leaseExpiresAt: NOW - 5_000,
    dispatchedAt: null,
    ...o,
  } as AttemptRecord;
}

describe('FAILED only when proven (property over attempt histories)', () => {
  it('a worker outcome planned FAILED', () => {
    for (let seed = 1; seed <= RUNS; seed++) {
      const r = rng(seed);
      const n = 1 + Math.floor(r() * 6);
      const earlier = history(r, n);
      const end = pick(r, ['not-sent', 'retryable-refusal', 'final-refusal'] as const);
      const state = end === 'not-sent' ? 'FAILED_BEFORE_SEND' : 'FAILED';
      const error = end === 'not-sent' ? NOT_SENT : end === 'final-refusal' ? FINAL : RETRYABLE;
      const w = planFinish({
        job: job(n),
        attempt: leased(n, { dispatchedAt: NOW - 100 }),
        finish: {
          lease: { jobId: 'j1', attemptNo: n, leaseToken: 't' },
          state,
          reason: end === 'not-sent' ? 'not-sent: ECONNREFUSED' : null,
          resultJson: null,
          error,
          job: { to: 'FAILED' },
          actor: 'w',
        },
        history: earlier,
        now: NOW,
      })!;
      const unproven = earlier.filter(mayHaveHadEffect).map((a) => a.attemptNo);
      const expected = end === 'final-refusal' || unproven.length === 0 ? 'FAILED' : 'NEEDS_REVIEW';
      expect({ seed, state: w.job.state }).toEqual({ seed, state: expected });
      expect(w.events[0]!.toState).toBe(expected);
      const detail = JSON.parse(w.events[0]!.detailJson!) as { unprovenAttempts?: number[] };
      expect(detail.unprovenAttempts ?? []).toEqual(expected === 'FAILED' ? [] : unproven);
      if (expected === 'NEEDS_REVIEW') expect(w.job.finishedAt).toBeNull();
    }
  });

  it('the reclaimer ending an attempt that never dispatched, attempts run out', () => {
    for (let seed = 1; seed <= RUNS; seed++) {
      const r = rng(seed);
      const n = 1 + Math.floor(r() * 6);
      const earlier = history(r, n);
      const w = planExpire({
        job: job(n),
        attempt: leased(n),
        expire: {
          lease: { jobId: 'j1', attemptNo: n, leaseToken: 't' },
          state: 'FAILED_BEFORE_SEND',
          reason: 'lease-expired-before-dispatch',
          job: { to: 'FAILED' },
          actor: 'reclaimer',
        },
        skewMs: 1_000,
        history: earlier,
        now: NOW,
      })!;
      const expected = earlier.some(mayHaveHadEffect) ? 'NEEDS_REVIEW' : 'FAILED';
      expect({ seed, state: w.job.state }).toEqual({ seed, state: expected });
    }
  });

  it('late evidence of a failure resolving the last UNKNOWN attempt', () => {
    for (let seed = 1; seed <= RUNS; seed++) {
      const r = rng(seed);
      const n = 1 + Math.floor(r() * 6);
      const earlier = history(r, n);
      const retryable = r() < 0.5;
      const last: AttemptFact = {
        attemptNo: n,
        state: 'UNKNOWN',
        resolution: null,
        resolutionSource: null,
        error: null,
      };
      const from = pick(r, ['UNKNOWN', 'NEEDS_REVIEW'] as const);
      const w = planTransition({
        job: job(n, { state: from }),
        attempt: { ...leased(n), state: 'UNKNOWN', resolution: null },
        t: {
          jobId: 'j1',
          from,
          to: 'FAILED',
          expectAttemptNo: n,
          resolution: {
            kind: 'failed' satisfies Resolution,
            source: 'late-worker',
            evidence: { error: retryable ? RETRYABLE : FINAL },
          },
          event: { kind: 'reconciled', actor: 'w' },
        },
        history: [...earlier, last],
        now: NOW,
      })!;
      // The late worker's FAILED proves its own attempt; the earlier ones still need proof.
      const expected = earlier.some(mayHaveHadEffect) ? 'NEEDS_REVIEW' : 'FAILED';
      expect({ seed, state: w.job.state }).toEqual({ seed, state: expected });
      expect(w.resolution?.kind).toBe('failed');
    }
  });

  it('a person may end it FAILED whatever the history; a move planned FAILED needs the history', () => {
    const unproven: AttemptFact = {
      attemptNo: 1,
      state: 'UNKNOWN',
      resolution: 'retry',
      resolutionSource: 'same-key',
      error: null,
    };
    const w = planTransition({
      job: job(2, { state: 'NEEDS_REVIEW' }),
      attempt: leased(2, { state: 'FAILED_BEFORE_SEND' }),
      t: {
        jobId: 'j1',
        from: 'NEEDS_REVIEW',
        to: 'FAILED',
        expectAttemptNo: 2,
        event: { kind: 'resolved', actor: 'operator:ann' },
        byPerson: true,
      },
      history: [unproven],
      now: NOW,
    })!;
    expect(w.job.state).toBe('FAILED');
    expect(() =>
      planExpire({
        job: job(1),
        attempt: leased(1),
        expire: {
          lease: { jobId: 'j1', attemptNo: 1, leaseToken: 't' },
          state: 'FAILED_BEFORE_SEND',
          reason: 'lease-expired-before-dispatch',
          job: { to: 'FAILED' },
          actor: 'reclaimer',
        },
        skewMs: 0,
        now: NOW,
      }),
    ).toThrow(/without its history/);
  });
});
