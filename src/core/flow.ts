/**
 * Flow control of an operation (DESIGN §5): at most `max` starts per `perMs` (`rateLimit`), at
 * most `max` attempts leased at once (`concurrency`), each optionally per key of the input. The
 * keys are computed once, at enqueue, and stored with the job, so that every process's claims
 * judge the same keys in the store.
 */
import { InvalidInput } from './errors.js';

export interface RateLimitSpec<I = unknown> {
  /** Starts (claims) allowed in any window of `perMs`. */
  max: number;
  /** The window, in ms. */
  perMs: number;
  /** A limit per key of the input (say the customer): each key has its own `max` per `perMs`. */
  key?: (input: I) => string;
}

export interface ConcurrencySpec<I = unknown> {
  /** Attempts leased at once, across every worker and process on the store. */
  max: number;
  /** A limit per key of the input (say the account): each key has its own `max`. */
  key?: (input: I) => string;
}

/** What a claim needs of an operation's limits (the key functions stay with the operation). */
export interface FlowLimit {
  operation: string;
  rate: { max: number; perMs: number } | null;
  concurrency: { max: number } | null;
}

/** The keys a job is limited under: null when its operation has no limit of that kind. */
export interface FlowKeys {
  rateKey: string | null;
  concurrencyKey: string | null;
}

/** Longest limit key: it is stored with every job of the operation. */
export const FLOW_KEY_LENGTH_MAX = 256;
/** Longest rate window: a day. Starts are kept this long to be counted. */
export const RATE_PER_MS_MAX = 24 * 3600_000;
/** Most starts per window: the store keeps one row per start within the window. */
export const RATE_MAX_MAX = 100_000;
export const CONCURRENCY_MAX_MAX = 100_000;

function intIn(v: unknown, min: number, max: number): boolean {
  return Number.isInteger(v) && (v as number) >= min && (v as number) <= max;
}

/** Validates `rateLimit` and `concurrency` of an operation spec; returns its limits. */
export function flowLimitOf(
  name: string,
  rate: RateLimitSpec<never> | undefined,
  concurrency: ConcurrencySpec<never> | undefined,
): FlowLimit | null {
  const where = `operation ${name}`;
  if (rate !== undefined) {
    if (typeof rate !== 'object' || rate === null)
      throw new InvalidInput(`${where}: rateLimit must be { max, perMs, key? }`);
    if (!intIn(rate.max, 1, RATE_MAX_MAX))
      throw new InvalidInput(
        `${where}: rateLimit.max must be an integer from 1 to ${RATE_MAX_MAX}`,
      );
    if (!intIn(rate.perMs, 1, RATE_PER_MS_MAX))
      throw new InvalidInput(
        `${where}: rateLimit.perMs must be an integer from 1 to ${RATE_PER_MS_MAX} (ms)`,
      );
    if (rate.key !== undefined && typeof rate.key !== 'function')
      throw new InvalidInput(`${where}: rateLimit.key must be a function of the input`);
  }
  if (concurrency !== undefined) {
    if (typeof concurrency !== 'object' || concurrency === null)
      throw new InvalidInput(`${where}: concurrency must be { max, key? }`);
    if (!intIn(concurrency.max, 1, CONCURRENCY_MAX_MAX))
      throw new InvalidInput(
        `${where}: concurrency.max must be an integer from 1 to ${CONCURRENCY_MAX_MAX}`,
      );
    if (concurrency.key !== undefined && typeof concurrency.key !== 'function')
      throw new InvalidInput(`${where}: concurrency.key must be a function of the input`);
  }
  if (!rate && !concurrency) return null;
  return {
    operation: name,
    rate: rate ? { max: rate.max, perMs: rate.perMs } : null,
    concurrency: concurrency ? { max: concurrency.max } : null,
  };
}

/**
 * The keys of one job, from its validated input ('' is the operation-wide key). A key function
 * that throws or returns anything but a string of 1 to FLOW_KEY_LENGTH_MAX characters rejects
 * the enqueue: a job must never slip past its limit under a key nobody else shares.
 */
export function flowKeysOf(
  name: string,
  rate: RateLimitSpec<never> | undefined,
  concurrency: ConcurrencySpec<never> | undefined,
  input: unknown,
): FlowKeys {
  return {
    rateKey: rate ? keyOf(name, 'rateLimit.key', rate.key, input) : null,
    concurrencyKey: concurrency ? keyOf(name, 'concurrency.key', concurrency.key, input) : null,
  };
}

function keyOf(
  name: string,
  what: string,
  fn: ((input: never) => string) | undefined,
  input: unknown,
): string {
  if (!fn) return '';
  let key: unknown;
  try {
    key = (fn as (input: unknown) => unknown)(input);
  } catch (err) {
    throw new InvalidInput(
      `operation ${name}: ${what} threw: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (typeof key !== 'string' || key.length === 0 || key.length > FLOW_KEY_LENGTH_MAX)
    throw new InvalidInput(
      `operation ${name}: ${what} must return a string of 1 to ${FLOW_KEY_LENGTH_MAX} characters, got ${typeof key === 'string' ? `${key.length} characters` : typeof key}`,
    );
  return key;
}
