/**
 * What the job needs next after each kind of fact. Pure functions: the runtime calls them and
 * hands the result to the store, which only executes fenced, conditional writes.
 */
import type { AttemptState, JobState, Resolution } from './states.js';
import { backoffDelayMs, type BackoffPolicy } from './retry.js';

export interface JobPolicy {
  maxAttempts: number;
  backoff: BackoffPolicy;
  /** Seed for the deterministic jitter (the job id's hash). */
  jitterSeed: number;
}

export interface NextJob {
  to: JobState;
  /** For QUEUED: run no earlier than this many ms from now (store clock). */
  delayMs?: number;
}

export type AttemptOutcome =
  | { state: 'SUCCEEDED' }
  | { state: 'FAILED'; retryable: boolean }
  | { state: 'FAILED_BEFORE_SEND' }
  | { state: 'UNKNOWN' };

/** After an attempt ended (or its lease expired), what the job needs next. */
export function decideAfterAttempt(
  outcome: AttemptOutcome,
  attemptNo: number,
  policy: JobPolicy,
): NextJob {
  switch (outcome.state) {
    case 'SUCCEEDED':
      return { to: 'SUCCEEDED' };
    case 'UNKNOWN':
      return { to: 'UNKNOWN' };
    case 'FAILED':
      return outcome.retryable ? retryOr('FAILED', attemptNo, policy) : { to: 'FAILED' };
    case 'FAILED_BEFORE_SEND':
      return retryOr('FAILED', attemptNo, policy);
  }
}

function retryOr(exhausted: JobState, attemptNo: number, policy: JobPolicy): NextJob {
  if (attemptNo >= policy.maxAttempts) return { to: exhausted };
  return {
    to: 'QUEUED',
    delayMs: backoffDelayMs(policy.backoff, attemptNo + 1, policy.jitterSeed),
  };
}

export type LookupVerdict =
  | { kind: 'succeeded'; result?: unknown }
  | { kind: 'failed'; error?: unknown; retryable?: boolean }
  | { kind: 'not_found' }
  | { kind: 'inconclusive'; error: unknown };

export interface ReconcileDecision {
  /** Resolution recorded on the UNKNOWN attempt; absent when nothing is proven yet. */
  resolution?: Resolution;
  next: NextJob;
  /** For an inconclusive lookup that will be tried again: delay until the next one. */
  recheckDelayMs?: number;
}

/** After a lookup, what is proven and what the job needs next (DESIGN §4, invariant 5). */
export function decideAfterLookup(
  verdict: LookupVerdict,
  attemptNo: number,
  policy: JobPolicy,
  lookups: { failuresSoFar: number; max: number; backoffMs: number; backoffMaxMs: number },
): ReconcileDecision {
  switch (verdict.kind) {
    case 'succeeded':
      return { resolution: 'succeeded', next: { to: 'SUCCEEDED' } };
    case 'failed':
      return {
        resolution: 'failed',
        next: verdict.retryable ? retryOr('FAILED', attemptNo, policy) : { to: 'FAILED' },
      };
    case 'not_found':
      // The lookup ran after dispatched_at + timeout + grace: the request never arrived, so a
      // retry causes the effect at most once. Out of attempts, the job failed without effect.
      return { resolution: 'not_found', next: retryOr('FAILED', attemptNo, policy) };
    case 'inconclusive': {
      const failures = lookups.failuresSoFar + 1;
      if (failures >= lookups.max) return { next: { to: 'NEEDS_REVIEW' } };
      const delay = Math.min(lookups.backoffMaxMs, lookups.backoffMs * 2 ** (failures - 1));
      return { next: { to: 'UNKNOWN' }, recheckDelayMs: delay };
    }
  }
}

/** Same-key retry for an operation whose downstream deduplicates by request key. */
export function decideSameKeyRetry(attemptNo: number, policy: JobPolicy): ReconcileDecision {
  if (attemptNo >= policy.maxAttempts) return { next: { to: 'NEEDS_REVIEW' } };
  return {
    resolution: 'retry',
    next: {
      to: 'QUEUED',
      delayMs: backoffDelayMs(policy.backoff, attemptNo + 1, policy.jitterSeed),
    },
  };
}

/** Classification of a throw from inside `ctx.dispatch()`. */
export type DispatchFailure = 'definite' | 'definite-retryable' | 'not-sent' | 'unknown';

export function attemptStateFor(outcome: AttemptOutcome): AttemptState {
  return outcome.state;
}

/**
 * A refusal (`RateLimited`: the downstream said "not now", so nothing was carried out) is not a
 * failure of the job: it waits `retryAfterMs` in QUEUED whatever its retry policy, up to
 * REFUSED_ATTEMPTS_MAX attempts in all, past which a downstream that never accepts fails it.
 */
export const REFUSED_ATTEMPTS_MAX = 1_000;

export function decideAfterRefusal(retryAfterMs: number, attemptNo: number): NextJob {
  if (attemptNo >= REFUSED_ATTEMPTS_MAX) return { to: 'FAILED' };
  return { to: 'QUEUED', delayMs: Math.max(0, Math.ceil(retryAfterMs)) };
}
