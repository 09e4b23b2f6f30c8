/**
 * Retry policy and backoff. Pure: the runtime decides, the store executes.
 */
import { InvalidInput } from './errors.js';

export interface BackoffPolicy {
  /** Delay before the second attempt. */
  initialMs: number;
  /** Each later delay is the previous one times this factor. */
  factor: number;
  /** No delay grows beyond this. */
  maxMs: number;
}

export interface RetryPolicy {
  /** Attempts in all, the first included. 1 = never retry. */
  maxAttempts: number;
  backoff: BackoffPolicy;
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxAttempts: 5,
  backoff: { initialMs: 1_000, factor: 2, maxMs: 60_000 },
};

export function normalizeRetry(
  input: Partial<RetryPolicy> | undefined,
  where: string,
): RetryPolicy {
  const backoff = { ...DEFAULT_RETRY.backoff, ...(input?.backoff ?? {}) };
  const policy = { maxAttempts: input?.maxAttempts ?? DEFAULT_RETRY.maxAttempts, backoff };
  if (
    !Number.isInteger(policy.maxAttempts) ||
    policy.maxAttempts < 1 ||
    policy.maxAttempts > 1000
  ) {
    throw new InvalidInput(`${where}: retry.maxAttempts must be an integer from 1 to 1000`);
  }
  if (
    !(backoff.initialMs >= 0) ||
    !(backoff.factor >= 1) ||
    !(backoff.maxMs >= backoff.initialMs)
  ) {
    throw new InvalidInput(
      `${where}: retry.backoff needs initialMs >= 0, factor >= 1 and maxMs >= initialMs`,
    );
  }
  return policy;
}

/**
 * Delay before attempt `nextAttemptNo` (2 for the first retry). Full jitter would make tests
 * replay differently, so the jitter is derived from a seed (job id) the caller passes.
 */
export function backoffDelayMs(
  policy: BackoffPolicy,
  nextAttemptNo: number,
  jitterSeed = 0,
): number {
  const exponent = Math.max(0, nextAttemptNo - 2);
  const base = Math.min(policy.maxMs, policy.initialMs * policy.factor ** exponent);
  // ±10% deterministic jitter so that a burst of failures does not retry in lockstep.
  const jitter = ((hash32(jitterSeed + nextAttemptNo) % 2001) - 1000) / 10_000;
  return Math.max(0, Math.round(Math.min(policy.maxMs, base * (1 + jitter))));
}

function hash32(n: number): number {
  let x = (n | 0) ^ 0x9e3779b9;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

export function seedOf(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}
