/**
 * When a job may end FAILED (issue #33 item 1), written once for every move that would end it
 * so: a worker's outcome, the reclaimer's expiry, a conditional transition. FAILED tells a
 * caller the effect did not happen, so it needs proof of that for EVERY attempt in the job's
 * history, or a definitive refusal that speaks for the request key. Otherwise the job goes to
 * NEEDS_REVIEW, where a person decides, with the unproven attempts as its evidence.
 */
import { assert, type ErrorInfo } from '../../core/errors.js';
import type { AttemptState, JobState, Resolution } from '../../core/states.js';

/** What the rule reads of one attempt of a job's history. */
export interface AttemptFact {
  attemptNo: number;
  state: AttemptState;
  resolution: Resolution | null;
  /** `lookup`, `late-worker`, `operator:<name>`. */
  resolutionSource: string | null;
  error: ErrorInfo | null;
}

/** Does a move planned to end the job in `to` need the job's attempt history to be judged? */
export function needsHistory(to: JobState): boolean {
  return to === 'FAILED';
}

/**
 * Is this attempt proven to have had no effect? Nothing left (FAILED_BEFORE_SEND), the
 * downstream answered with a definitive failure (FAILED), or an UNKNOWN attempt was later
 * resolved `failed` or `not_found`. A same-key `retry` resolution proves nothing: the request
 * may have arrived.
 */
export function provenWithoutEffect(a: AttemptFact): boolean {
  if (a.state === 'FAILED_BEFORE_SEND' || a.state === 'FAILED') return true;
  if (a.state !== 'UNKNOWN') return false;
  return a.resolution === 'failed' || a.resolution === 'not_found';
}

/**
 * Does this attempt's failure speak for the request key, and so for every attempt sent with
 * it? A refusal the downstream gave as final (a DefiniteFailure with retryable: false: a
 * downstream that deduplicates by key answers a repeat of a done request with its result, not
 * a refusal), a lookup by the key that found it failed or absent, or a person's decision.
 */
export function refusesForKey(a: AttemptFact): boolean {
  // Only a refusal recorded as final (DefiniteFailure with retryable: false) speaks for the
  // key. A retryable one, a classifier's, or a rate limit's (429: "not now") says nothing of an
  // earlier request sent with the same key.
  if (a.state === 'FAILED') return a.error?.retryable === false && a.error.code !== 'RATE_LIMITED';
  if (a.state !== 'UNKNOWN' || (a.resolution !== 'failed' && a.resolution !== 'not_found'))
    return false;
  const source = a.resolutionSource ?? '';
  return source === 'lookup' || source.startsWith('operator:');
}

/**
 * The attempts of `history` (the job's whole history, its latest attempt last, as it will be
 * after the move) that keep the job from ending FAILED: empty when FAILED is proven.
 */
export function unprovenAttempts(history: readonly AttemptFact[]): number[] {
  const latest = history.at(-1);
  if (latest && refusesForKey(latest)) return [];
  return history.filter((a) => !provenWithoutEffect(a)).map((a) => a.attemptNo);
}

/** The job's state after a move planned to end it `to`, given its history after the move. */
export function failedOrReview(
  to: JobState,
  history: readonly AttemptFact[] | undefined,
): { to: JobState; unproven: number[] } {
  if (!needsHistory(to)) return { to, unproven: [] };
  assert(history !== undefined, 'a move that ends a job FAILED was planned without its history');
  const unproven = unprovenAttempts(history);
  return unproven.length === 0 ? { to, unproven } : { to: 'NEEDS_REVIEW', unproven };
}
