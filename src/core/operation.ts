/**
 * Operations are the user's code: one side effect each (DESIGN §4).
 */
import type { ZodType } from 'zod';
import { InvalidInput } from './errors.js';
import { normalizeRetry, type RetryPolicy } from './retry.js';
import { flowLimitOf, type ConcurrencySpec, type FlowLimit, type RateLimitSpec } from './flow.js';

export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface OperationContext {
  readonly jobId: string;
  readonly attemptNo: number;
  /** Stable across attempts and recovery (invariant 6): send it as the idempotency key. */
  readonly requestKey: string;
  readonly fingerprint: string;
  readonly runId: string | null;
  readonly stepId: string | null;
  /** Aborts when the worker can no longer prove it holds the lease, or the timeout passed. */
  readonly signal: AbortSignal;
  readonly log: Logger;
  /**
   * The dispatch boundary (invariant 3): `fn` runs only after the attempt's dispatch marker is
   * durably committed by a write fenced on the lease. A throw before this call is
   * `FAILED_BEFORE_SEND`; after it, only `DefiniteFailure` (or `classify`) is definitive.
   */
  dispatch<T>(fn: () => Promise<T>): Promise<T>;
  /**
   * The downstream asked us to slow down (say a 429 with Retry-After): no job of this operation
   * (of this job's `rateLimit` key) starts for `ms`, on any worker. Only for an operation with a
   * `rateLimit`; to also end this attempt as refused, throw `RateLimited`.
   */
  backoff(ms: number): Promise<void>;
}

export interface LookupContext {
  readonly jobId: string;
  readonly attemptNo: number;
  readonly requestKey: string;
  readonly signal: AbortSignal;
  readonly log: Logger;
}

export type LookupResult =
  | { found: true; outcome: 'succeeded'; result?: unknown }
  | { found: true; outcome: 'failed'; error?: unknown; retryable?: boolean }
  | { found: false };

/** How a failure thrown after dispatch started is to be read. `undefined`: use the default. */
export type Classification = 'definite-failure' | 'retryable-failure' | 'not-sent' | 'unknown';

export interface ReconcilePolicy {
  /** Added to `dispatched_at + timeoutMs` before the first lookup, so a request still in flight is not taken for lost. */
  graceMs: number;
  /** Inconclusive lookups (a throw) before the job goes to NEEDS_REVIEW. */
  maxLookups: number;
  /** Delay between inconclusive lookups, doubled each time up to `lookupBackoffMaxMs`. */
  lookupBackoffMs: number;
  lookupBackoffMaxMs: number;
}

export const DEFAULT_RECONCILE: ReconcilePolicy = {
  graceMs: 5_000,
  maxLookups: 5,
  lookupBackoffMs: 1_000,
  lookupBackoffMaxMs: 60_000,
};

export interface OperationSpec<I, R> {
  /** Unique, e.g. `payments.charge`. Letters, digits, `.`, `_`, `-`, `:`, `/`. */
  name: string;
  /**
   * The input as a zod 4 schema: enqueue parses with it (a typed `InvalidInput` naming the field)
   * and agent tools get its JSON Schema. `validate`, if given too, runs after it.
   */
  input?: ZodType<I>;
  /** What the operation does, for people and models (agent tools use it as their description). */
  description?: string;
  /** Its side effect cannot be undone (an email, a charge). Default true; tools pass it on as a hint. */
  destructive?: boolean;
  /** Checks and narrows the input at enqueue (for example a zod schema's `parse`). A throw rejects the enqueue. */
  validate?: (input: unknown) => I;
  /** The parts of the input that identify the request; canonical JSON, SHA-256. Default: the whole input. */
  fingerprint?: (input: I) => unknown;
  /** Asks the downstream what happened to a request key. A throw is inconclusive. */
  lookup?: (requestKey: string, input: I, ctx: LookupContext) => Promise<LookupResult>;
  /** The downstream deduplicates by the key we send, so a retry with the same key is safe. */
  idempotentWithKey?: boolean;
  /** Reads a failure thrown inside dispatch; the default makes only `DefiniteFailure` definitive. */
  classify?: (error: unknown) => Classification | undefined;
  execute: (input: I, ctx: OperationContext) => Promise<R>;
  retry?: Partial<RetryPolicy>;
  /** Longest an attempt may run; after it the signal aborts and an attempt in flight is UNKNOWN. */
  timeoutMs?: number;
  reconcile?: Partial<ReconcilePolicy>;
  /**
   * A person must approve each job before any worker may claim it (it waits AWAITING_APPROVAL):
   * `true`, or a function of the validated input returning `false` (no approval needed), `true`,
   * or the reason shown to the approver. A throw rejects the enqueue.
   */
  approval?: boolean | ((input: I) => boolean | string);
  /**
   * How long a job waits for the decision before it is CANCELLED as expired. `null` or 0: it
   * waits until someone decides. Default `DEFAULT_APPROVAL_TIMEOUT_MS` (24 hours).
   */
  approvalTimeoutMs?: number | null;
  /** At most `max` starts in any `perMs` window, across every worker (per `key`, if given). */
  rateLimit?: RateLimitSpec<I>;
  /** At most `max` attempts leased at once, across every worker (per `key`, if given). */
  concurrency?: ConcurrencySpec<I>;
}

export interface Operation<I = unknown, R = unknown> {
  readonly name: string;
  readonly spec: OperationSpec<I, R>;
  readonly retry: RetryPolicy;
  readonly timeoutMs: number;
  readonly reconcile: ReconcilePolicy;
  readonly idempotentWithKey: boolean;
  /** Checks the input at enqueue: the `input` schema, then `validate`. */
  readonly parseInput: ((input: unknown) => I) | undefined;
  /** Which path reconciles an UNKNOWN attempt of this operation (DESIGN §4). */
  readonly recovery: 'lookup' | 'same-key' | 'review';
  /** Jobs that need approval time out after this long (null: never). */
  readonly approvalTimeoutMs: number | null;
  /** Its `rateLimit` and `concurrency`, validated (null: none): its jobs take the limited claim. */
  readonly flow: FlowLimit | null;
  /** Brand, so a module's exports can be scanned for operations. */
  readonly __reckonOperation: true;
}

export const DEFAULT_TIMEOUT_MS = 30_000;
/** A day: long enough for a person to see the request, short enough that a stale one ends. */
export const DEFAULT_APPROVAL_TIMEOUT_MS = 24 * 3600_000;
const APPROVAL_TIMEOUT_MAX_MS = 366 * 24 * 3600_000;
/** Longest reason an approval function may return (it is stored with the job). */
export const APPROVAL_REASON_LENGTH_MAX = 2_000;
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;

export function defineOperation<I, R>(spec: OperationSpec<I, R>): Operation<I, R> {
  if (typeof spec !== 'object' || spec === null)
    throw new InvalidInput('defineOperation needs a spec object');
  if (typeof spec.name !== 'string' || !NAME_RE.test(spec.name)) {
    throw new InvalidInput(
      `operation name ${JSON.stringify(spec.name)} is invalid: 1-128 characters of letters, digits, . _ : / -, starting with a letter or digit`,
    );
  }
  const where = `operation ${spec.name}`;
  if (typeof spec.execute !== 'function')
    throw new InvalidInput(`${where}: execute must be a function`);
  if (spec.lookup !== undefined && typeof spec.lookup !== 'function')
    throw new InvalidInput(`${where}: lookup must be a function`);
  const timeoutMs = spec.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 24 * 3600_000) {
    throw new InvalidInput(`${where}: timeoutMs must be an integer from 1 to 86400000`);
  }
  const reconcile = { ...DEFAULT_RECONCILE, ...(spec.reconcile ?? {}) };
  if (
    !(reconcile.graceMs >= 0) ||
    !(reconcile.maxLookups >= 1) ||
    !(reconcile.lookupBackoffMs >= 0)
  ) {
    throw new InvalidInput(
      `${where}: reconcile needs graceMs >= 0, maxLookups >= 1, lookupBackoffMs >= 0`,
    );
  }
  if (spec.input !== undefined && typeof spec.input?.safeParse !== 'function')
    throw new InvalidInput(`${where}: input must be a zod schema (z.object({ … }))`);
  const idempotentWithKey = spec.idempotentWithKey ?? false;
  const approvalTimeoutMs = approvalTimeoutOf(spec, where);
  const flow = flowLimitOf(spec.name, spec.rateLimit, spec.concurrency);
  return Object.freeze({
    name: spec.name,
    spec,
    retry: normalizeRetry(spec.retry, where),
    timeoutMs,
    reconcile,
    idempotentWithKey,
    parseInput: inputParser(spec),
    recovery: spec.lookup ? 'lookup' : idempotentWithKey ? 'same-key' : 'review',
    approvalTimeoutMs,
    flow,
    __reckonOperation: true,
  } as const);
}

function inputParser<I>(spec: OperationSpec<I, unknown>): ((input: unknown) => I) | undefined {
  const { input: schema, validate } = spec;
  if (!schema) return validate;
  return (input) => {
    const parsed = schema.safeParse(input);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const field = issue.path.map(String).join('.');
      throw new InvalidInput(
        field ? `${field}: ${issue.message}` : issue.message,
        ['$', ...issue.path.map(String)].join('.'),
      );
    }
    return validate ? validate(parsed.data) : parsed.data;
  };
}

function approvalTimeoutOf(
  spec: Pick<OperationSpec<unknown, unknown>, 'approvalTimeoutMs'> & { approval?: unknown },
  where: string,
): number | null {
  const a = spec.approval;
  if (a !== undefined && typeof a !== 'boolean' && typeof a !== 'function')
    throw new InvalidInput(`${where}: approval must be true, false or a function of the input`);
  const t = spec.approvalTimeoutMs;
  if (t === undefined) return DEFAULT_APPROVAL_TIMEOUT_MS;
  if (t !== null && (!Number.isInteger(t) || t < 0 || t > APPROVAL_TIMEOUT_MAX_MS))
    throw new InvalidInput(
      `${where}: approvalTimeoutMs must be null or an integer from 0 (never) to ${APPROVAL_TIMEOUT_MAX_MS}`,
    );
  if (a === undefined || a === false)
    throw new InvalidInput(`${where}: approvalTimeoutMs is set but approval is not`);
  return t === null || t === 0 ? null : t;
}

/**
 * Whether a job of `op` with this (validated) input needs approval: null when not, else the
 * reason shown to the approver (null: none given). A throw, or an answer that is not a boolean
 * or a string, is an InvalidInput naming the operation.
 */
export function approvalOf(op: Operation, input: unknown): { reason: string | null } | null {
  const a = op.spec.approval as boolean | ((input: unknown) => unknown) | undefined;
  if (a === undefined || a === false) return null;
  if (a === true) return { reason: null };
  let answer: unknown;
  try {
    answer = a(input);
  } catch (err) {
    throw new InvalidInput(
      `operation ${op.name}: approval threw: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (answer === false) return null;
  if (answer === true) return { reason: null };
  if (typeof answer !== 'string')
    throw new InvalidInput(
      `operation ${op.name}: approval must return a boolean or a reason (string), got ${typeof answer}`,
    );
  if (answer.length > APPROVAL_REASON_LENGTH_MAX)
    throw new InvalidInput(
      `operation ${op.name}: approval reason is ${answer.length} characters, over ${APPROVAL_REASON_LENGTH_MAX}`,
    );
  return { reason: answer };
}

export function isOperation(value: unknown): value is Operation {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { __reckonOperation?: unknown }).__reckonOperation === true
  );
}

/** Any operation, whatever its input and result types (inputs are contravariant, so not `unknown`). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyOperation = Operation<any, any>;
