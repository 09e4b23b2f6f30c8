/**
 * Three families of errors (STYLE.md):
 *  - control: thrown by an operation to steer the outcome (`DefiniteFailure`);
 *  - typed infrastructure and input errors, all `ReckonError`, matched by class or `code`;
 *  - broken invariants (`InvariantViolation`, `IllegalTransition`): bugs, they crash.
 */

export class ReckonError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** Thrown inside `ctx.dispatch()` when the downstream gave a definitive answer: it failed. */
export class DefiniteFailure extends Error {
  readonly retryable: boolean;
  readonly details: unknown;
  constructor(
    message: string,
    options: { retryable?: boolean; details?: unknown; cause?: unknown } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = 'DefiniteFailure';
    this.retryable = options.retryable ?? false;
    this.details = options.details;
  }
}

/** What a request key names: one side effect, of one operation, on one input (invariant 9). */
export interface KeyedRequest {
  operation: string;
  fingerprint: string;
}

/**
 * Invariant 9: the request key exists for another operation or with another fingerprint.
 * Nothing was written.
 */
export class RequestKeyConflict extends ReckonError {
  readonly requestKey: string;
  readonly existingJobId: string;
  readonly existing: KeyedRequest;
  readonly given: KeyedRequest;
  constructor(p: {
    requestKey: string;
    existingJobId: string;
    existing: KeyedRequest;
    given: KeyedRequest;
  }) {
    const { existing, given } = p;
    const what =
      existing.operation !== given.operation
        ? `operation ${existing.operation} (fingerprint ${existing.fingerprint.slice(0, 12)}…); ` +
          `this request is operation ${given.operation} (fingerprint ${given.fingerprint.slice(0, 12)}…)`
        : `operation ${existing.operation} with fingerprint ${existing.fingerprint.slice(0, 12)}…; ` +
          `this request has fingerprint ${given.fingerprint.slice(0, 12)}…`;
    super(
      'REQUEST_KEY_CONFLICT',
      `request key ${JSON.stringify(p.requestKey)} already belongs to job ${p.existingJobId} of ${what}. ` +
        `A request key names one side effect: use a new key for a different request.`,
    );
    this.requestKey = p.requestKey;
    this.existingJobId = p.existingJobId;
    this.existing = existing;
    this.given = given;
  }
}

/** A payload, key or option that cannot be accepted. Nothing was written. */
export class InvalidInput extends ReckonError {
  readonly path: string;
  constructor(message: string, path = '$') {
    super('INVALID_INPUT', message);
    this.path = path;
  }
}

export class PayloadTooLarge extends ReckonError {
  readonly bytes: number;
  readonly limitBytes: number;
  constructor(what: string, bytes: number, limitBytes: number) {
    super(
      'PAYLOAD_TOO_LARGE',
      `${what} is ${bytes} bytes as JSON, over the limit of ${limitBytes} bytes (payloadBytesMax)`,
    );
    this.bytes = bytes;
    this.limitBytes = limitBytes;
  }
}

export class UnknownOperation extends ReckonError {
  readonly operation: string;
  constructor(operation: string, known: readonly string[]) {
    super(
      'UNKNOWN_OPERATION',
      `unknown operation ${JSON.stringify(operation)}` +
        (known.length ? `; known: ${known.join(', ')}` : '; no operations are registered'),
    );
    this.operation = operation;
  }
}

export class JobNotFound extends ReckonError {
  constructor(id: string) {
    super('JOB_NOT_FOUND', `no job with id ${JSON.stringify(id)}`);
  }
}

/** The caller is not allowed to do this (its role, or no authenticated person at all). */
export class NotAuthorized extends ReckonError {
  constructor(message: string) {
    super('NOT_AUTHORIZED', message);
  }
}

/**
 * A module of operations (the CLI's `--operations`, a chaos run's or a worker child's) that
 * cannot be used: not found, failed to load, exports none, or two different ones share a name.
 */
export class OperationsModuleError extends ReckonError {
  readonly path: string;
  constructor(
    code:
      | 'OPERATIONS_MODULE_NOT_FOUND'
      | 'OPERATIONS_MODULE_FAILED'
      | 'NO_OPERATIONS'
      | 'DUPLICATE_OPERATION',
    message: string,
    path: string,
  ) {
    super(code, message);
    this.path = path;
  }
}

/**
 * An approval sent with the hash of the input its approver was shown (`inputHash`), for a job
 * whose input does not hash to it: the person approved something else. Nothing is decided.
 */
export class ApprovalInputChanged extends ReckonError {
  readonly jobId: string;
  constructor(jobId: string) {
    super(
      'APPROVAL_INPUT_CHANGED',
      `job ${jobId}'s input is not the one this decision was made on: nothing was decided; look at the job again and decide on what it holds now`,
    );
    this.jobId = jobId;
  }
}

/** A state-dependent request that the job's current state does not allow (e.g. cancel after dispatch). */
export class JobStateConflict extends ReckonError {
  readonly state: string;
  constructor(message: string, state: string) {
    super('JOB_STATE_CONFLICT', message);
    this.state = state;
  }
}

/**
 * A decision on a job whose approval had already timed out (store clock): it was not applied,
 * and the job ended CANCELLED (expired), whether or not a worker had expired it yet.
 */
export class ApprovalExpired extends ReckonError {
  readonly jobId: string;
  constructor(jobId: string) {
    super(
      'APPROVAL_EXPIRED',
      `job ${jobId}: its approval had timed out before this decision, so it was not applied; ` +
        `the job is CANCELLED and nothing was sent. Enqueue it again with a new key if it is still wanted.`,
    );
    this.jobId = jobId;
  }
}

/** What a pending outcome's evidence holds: the latest attempt and the events that explain it. */
export interface OutcomeEvidence {
  /** The job's latest attempt, or null when it has none (never claimed, or awaiting approval). */
  attempt: {
    attemptNo: number;
    state: string;
    reason: string | null;
    /** When the request was marked as sent (ms since the epoch), or null: nothing left. */
    dispatchedAt: number | null;
    resolution: string | null;
  } | null;
  /** The job's last events, oldest first. */
  events: {
    kind: string;
    fromState: string | null;
    toState: string | null;
    actor: string;
    detail: unknown;
    at: number;
  }[];
}

/** What each pending state means for the caller (an agent, or the person behind it). */
const PENDING_MEANING: Record<string, string> = {
  QUEUED: 'It has not started: nothing was sent yet, and it runs when a worker takes it',
  LEASED: 'A worker is running it now: the request may be in flight. Do not retry with another key',
  UNKNOWN:
    'The request may have reached the downstream (the email may have been sent, the card ' +
    'charged) and reckon is reconciling it. Do not retry: that could do it twice',
  NEEDS_REVIEW:
    'The request may have reached the downstream and only a person can tell: a person is ' +
    'reviewing it. Do not retry: that could do it twice',
  AWAITING_APPROVAL:
    'It waits for a person to approve it: nothing was sent yet. Do not retry; it runs once approved',
};

export type PendingReason = 'timeout' | 'aborted' | 'needs-review';

/**
 * A wait (`q.call`, `q.waitFor`) ended before the job reached an outcome: never a guess. The
 * job keeps going; wait again with the same key or job id to learn how it ends.
 */
export class OutcomePending extends ReckonError {
  readonly jobId: string;
  readonly state: string;
  readonly evidence: OutcomeEvidence;
  /**
   * Why the wait ended: its time ran out, the caller's signal aborted it, or the job is in
   * NEEDS_REVIEW, which only a person moves on (waiting longer would block for nothing).
   */
  readonly reason: PendingReason;
  constructor(p: {
    jobId: string;
    state: string;
    evidence: OutcomeEvidence;
    reason: PendingReason;
    cause?: unknown;
  }) {
    const ended =
      p.reason === 'timeout'
        ? 'the wait timed out'
        : p.reason === 'aborted'
          ? 'the wait was aborted'
          : 'the wait ended at once, as only a person can decide it';
    const meaning = PENDING_MEANING[p.state] ?? 'Its outcome is not known yet';
    super(
      'OUTCOME_PENDING',
      `job ${p.jobId} is ${p.state}; ${ended} before its outcome. ${meaning}. ` +
        `Wait again with the same key or job id to learn how it ends.`,
      p.cause === undefined ? undefined : { cause: p.cause },
    );
    this.jobId = p.jobId;
    this.state = p.state;
    this.evidence = p.evidence;
    this.reason = p.reason;
  }
}

/** The queue was closed while a wait (`q.call`, `q.waitFor`) was outstanding. */
export class QueueClosed extends ReckonError {
  readonly jobId: string | undefined;
  constructor(jobId?: string) {
    super(
      'QUEUE_CLOSED',
      jobId === undefined
        ? 'this queue is closed'
        : `the queue was closed while waiting for job ${jobId}; the job itself goes on`,
    );
    this.jobId = jobId;
  }
}

export class StoreError extends ReckonError {}

export class StoreCorrupt extends StoreError {
  constructor(location: string, cause: unknown) {
    super(
      'STORE_CORRUPT',
      `the store at ${location} is not a readable reckon database (corrupt, or not a database): ${errorMessage(cause)}`,
      { cause },
    );
  }
}

/** The disk (or the database's quota) is full: nothing of the refused write was kept. */
export class StoreFull extends StoreError {
  constructor(location: string, cause: unknown) {
    super(
      'STORE_FULL',
      `the store at ${location} is out of disk space: this write was refused and nothing of it ` +
        `was kept (what was acknowledged before is safe). Free space on its disk, or move the ` +
        `store; writes succeed again as soon as there is room. (${errorMessage(cause)})`,
      { cause },
    );
  }
}

/** The store cannot promise durability as configured (e.g. SQLite refused WAL). Nothing was written. */
export class StoreNotDurable extends StoreError {
  constructor(message: string, cause?: unknown) {
    super('STORE_NOT_DURABLE', message, { cause });
  }
}

export class StoreReadOnly extends StoreError {
  constructor(location: string, cause: unknown) {
    super(
      'STORE_READ_ONLY',
      `the store at ${location} cannot be written (read-only file or directory): ${errorMessage(cause)}`,
      { cause },
    );
  }
}

export class SchemaTooNew extends StoreError {
  readonly found: number;
  readonly supported: number;
  constructor(location: string, found: number, supported: number) {
    super(
      'SCHEMA_TOO_NEW',
      `the store at ${location} has schema version ${found}, newer than this reckon supports (${supported}); upgrade reckon before using this store`,
    );
    this.found = found;
    this.supported = supported;
  }
}

export class StoreUnavailable extends StoreError {
  constructor(message: string, cause?: unknown) {
    super('STORE_UNAVAILABLE', message, { cause });
  }
}

export class InvalidStoreUrl extends ReckonError {
  constructor(url: string) {
    super(
      'INVALID_STORE_URL',
      `cannot open store ${JSON.stringify(url)}: use sqlite:<path>, sqlite::memory:, or postgres://…`,
    );
  }
}

/** The worker cannot prove it still holds the lease; the side effect must not start. */
export class LeaseLost extends ReckonError {
  constructor(jobId: string, attemptNo: number, why: string) {
    super('LEASE_LOST', `job ${jobId} attempt ${attemptNo}: lease lost (${why}); dispatch refused`);
  }
}

/** A backup or restore would write over a file that exists: refused, nothing written. */
export class TargetExists extends ReckonError {
  readonly path: string;
  constructor(path: string, what: string) {
    super(
      'TARGET_EXISTS',
      `${path} already exists; ${what} never writes over a file: pick a new path`,
    );
    this.path = path;
  }
}

/** A backup that failed its checks (integrity, schema version, readable jobs). */
export class BackupInvalid extends ReckonError {
  readonly path: string;
  constructor(path: string, why: string) {
    super('BACKUP_INVALID', `${path} is not a usable reckon backup: ${why}`);
    this.path = path;
  }
}

/** `reckon backup` on a store it does not copy itself (PostgreSQL: pg_dump does). */
export class BackupUnsupported extends ReckonError {
  readonly command: string;
  readonly restoreCommand: string;
  constructor(message: string, command: string, restoreCommand: string) {
    super('BACKUP_UNSUPPORTED', message);
    this.command = command;
    this.restoreCommand = restoreCommand;
  }
}

/**
 * Refusals at the HTTP edge (`reckon serve`, `createReckonApp`), each with the status it is
 * answered with. The message says what to do.
 */
export class HttpRefusal extends ReckonError {
  readonly status: number;
  constructor(status: number, code: string, message: string) {
    super(code, message);
    this.status = status;
  }
}

/**
 * The base of one kind of HTTP refusal: its status and code fixed, the message given. Each kind
 * below is a class of its own (its name, `instanceof`), all of them `HttpRefusal`s.
 */
function httpRefusal(status: number, code: string): new (message: string) => HttpRefusal {
  return class extends HttpRefusal {
    constructor(message: string) {
      super(status, code, message);
    }
  };
}

/** No credentials, or ones that are unknown, revoked or expired (401). */
export class AuthenticationRequired extends httpRefusal(401, 'UNAUTHORIZED') {}

/** The authenticated principal's role does not allow this (403). */
export class NotPermitted extends httpRefusal(403, 'FORBIDDEN') {}

/** A state-changing request from another site, or a cookie session without its form token (403). */
export class CrossSiteRequest extends httpRefusal(403, 'CROSS_SITE_REQUEST') {}

/** A request body over the server's `bodyBytesMax`, or JSON nested deeper than `jsonDepthMax` (413). */
export class RequestTooLarge extends httpRefusal(413, 'REQUEST_TOO_LARGE') {}

/** More requests than the server's `rateLimitMax` per `rateLimitWindowMs` for one token (429). */
export class TooManyRequests extends httpRefusal(429, 'TOO_MANY_REQUESTS') {
  readonly retryAfterMs: number;
  constructor(message: string, retryAfterMs: number) {
    super(message);
    this.retryAfterMs = retryAfterMs;
  }
}

/** A `Host` header that names another server: refused, against DNS rebinding (421). */
export class HostNotAllowed extends httpRefusal(421, 'HOST_NOT_ALLOWED') {}

/** `reckon tokens create` with a name already used by another token. */
export class TokenNameTaken extends ReckonError {
  constructor(name: string) {
    super(
      'TOKEN_NAME_TAKEN',
      `a token named ${JSON.stringify(name)} exists; revoke it first or choose another name`,
    );
  }
}

/** `reckon tokens revoke` of a name no live token has. */
export class TokenNotFound extends ReckonError {
  constructor(name: string) {
    super('TOKEN_NOT_FOUND', `no live token named ${JSON.stringify(name)} (reckon tokens list)`);
  }
}

/** A broken invariant: a bug. Recovery takes over after the crash. */
export class InvariantViolation extends Error {
  constructor(message: string) {
    super(`reckon invariant violated: ${message}`);
    this.name = 'InvariantViolation';
  }
}

export class IllegalTransition extends InvariantViolation {
  constructor(kind: 'job' | 'attempt', from: string, to: string) {
    super(`illegal ${kind} transition ${from} -> ${to}`);
    this.name = 'IllegalTransition';
  }
}

export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new InvariantViolation(message);
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The serializable form of an error kept in the journal. */
export interface ErrorInfo {
  name: string;
  message: string;
  code?: string;
  retryable?: boolean;
  details?: unknown;
}

export function toErrorInfo(err: unknown): ErrorInfo {
  if (err instanceof DefiniteFailure) {
    return {
      name: err.name,
      message: err.message,
      retryable: err.retryable,
      details: safeDetails(err.details),
    };
  }
  if (err instanceof Error) {
    const code = errorCode(err);
    return { name: err.name, message: err.message, ...(code ? { code } : {}) };
  }
  return { name: 'Error', message: String(err) };
}

/** The first string `code` along an error's cause chain (e.g. fetch's `cause.code = 'ECONNREFUSED'`). */
export function errorCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

function safeDetails(details: unknown): unknown {
  try {
    return details === undefined ? undefined : (JSON.parse(JSON.stringify(details)) as unknown);
  } catch {
    return String(details);
  }
}

/**
 * A callback of the user's (classify, fingerprint, a logger, an event listener) threw. Kept in
 * the journal as the error of the job it concerns; the worker goes on.
 */
export class CallbackFailed extends ReckonError {
  readonly operation: string;
  readonly callback: string;
  constructor(operation: string, callback: string, cause: unknown) {
    super('CALLBACK_FAILED', `${operation}: ${callback} threw: ${safeMessage(cause)}`, { cause });
    this.operation = operation;
    this.callback = callback;
  }
}

/** A thrown value's message, even when reading it throws (a hostile getter). */
export function safeMessage(err: unknown): string {
  try {
    return errorMessage(err);
  } catch {
    return 'an error whose message cannot be read';
  }
}

/** `toErrorInfo` that never throws, whatever was thrown. */
export function safeErrorInfo(err: unknown): ErrorInfo {
  try {
    return toErrorInfo(err);
  } catch {
    return { name: 'Error', message: safeMessage(err) };
  }
}

/**
 * Thrown by an operation (inside or outside `ctx.dispatch()`) when the downstream refused the
 * request for now, e.g. an HTTP 429 with Retry-After: it was not carried out. The attempt ends
 * FAILED with reason `rate-limited` (a definitive "not done"), the job waits `retryAfterMs` in
 * QUEUED without it counting against its retry policy, and an operation with a `rateLimit` has
 * its (key's) next start pushed out for every worker.
 */
export class RateLimited extends ReckonError {
  readonly retryAfterMs: number;
  constructor(retryAfterMs: number, message?: string) {
    super(
      'RATE_LIMITED',
      message ?? `the downstream refused the request for ${retryAfterMs} ms (rate limited)`,
    );
    this.retryAfterMs = retryAfterMs;
  }
}

/** A schedule definition or a schedule call that cannot be accepted. Nothing was written. */
export class InvalidSchedule extends ReckonError {
  readonly schedule: string;
  constructor(schedule: string, message: string) {
    super('INVALID_SCHEDULE', `schedule ${JSON.stringify(schedule)}: ${message}`);
    this.schedule = schedule;
  }
}
