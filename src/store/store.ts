/**
 * The Store interface: everything the runtime needs from a journal, and nothing more.
 *
 * Internal contract (it may change between minor versions; users call `openQueue`). Rules:
 *  - Methods are noun-first and take one params object; the write paths are batch-shaped
 *    (arrays in, one result per element out) so that a store can group-commit them.
 *  - A method that resolves has made its writes durable.
 *  - Every write by a lease holder is fenced on the attempt's state and lease token. A fenced
 *    write that does not apply reports `false` (or `ok: false`); it never throws for that.
 *  - Time is the store's clock, in milliseconds since the epoch. Callers pass durations
 *    (`leaseMs`, `delayMs`), never absolute times read from their own clock.
 *  - Nothing above the store sees a driver type.
 */
import type { ErrorInfo } from '../core/errors.js';
import type { Json } from '../core/json.js';
import type { BackoffPolicy } from '../core/retry.js';
import type { AttemptState, JobState, Resolution } from '../core/states.js';
import type { FlowLimit } from '../core/flow.js';

export interface JobRecord {
  id: string;
  queue: string;
  operation: string;
  input: Json;
  requestKey: string;
  fingerprint: string;
  runId: string | null;
  stepId: string | null;
  state: JobState;
  priority: number;
  runAt: number;
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
  /** The number of the latest attempt (0 before the first claim). */
  attemptCount: number;
  maxAttempts: number;
  backoff: BackoffPolicy;
  timeoutMs: number;
  /**
   * The operation's `reconcile.graceMs` at enqueue: no lookup runs before
   * `dispatchedAt + timeoutMs + reconcileGraceMs` (DESIGN §3), whoever runs it.
   */
  reconcileGraceMs: number;
  /** UNKNOWN jobs: when reconciliation may next look. */
  nextCheckAt: number | null;
  lookupFailures: number;
  result: Json | null;
  error: ErrorInfo | null;
  /** AWAITING_APPROVAL jobs: what the approver is shown (kept after the decision). */
  approvalReason: string | null;
  /** AWAITING_APPROVAL jobs: when the approval times out (null: never, or decided). */
  approvalExpiresAt: number | null;
  /** The enqueuing code's W3C trace context (`traceparent`), when a tracer was active. */
  traceParent?: string | null;
}

export interface AttemptRecord {
  jobId: string;
  attemptNo: number;
  requestKey: string;
  fingerprint: string;
  state: AttemptState;
  ownerId: string;
  leaseToken: string;
  leasedAt: number;
  leaseExpiresAt: number;
  dispatchedAt: number | null;
  finishedAt: number | null;
  result: Json | null;
  error: ErrorInfo | null;
  /** Why the attempt ended as it did, e.g. `lease-expired-before-dispatch`. */
  reason: string | null;
  resolution: Resolution | null;
  resolutionSource: string | null;
  resolutionEvidence: Json | null;
  resolvedAt: number | null;
}

export interface EventRecord {
  /** Its row's id, in append order; 0 for a routine step read from its row's columns (trail.ts). */
  id: number;
  jobId: string;
  attemptNo: number | null;
  fingerprint: string;
  kind: string;
  fromState: string | null;
  toState: string | null;
  actor: string;
  detail: Json | null;
  at: number;
}

export interface JobDetail {
  job: JobRecord;
  attempts: AttemptRecord[];
  events: EventRecord[];
  /**
   * Who asked for the job (the enqueue's actor, e.g. `http:<token>`): its `enqueue_actor`, or for a
   * job enqueued before that column, its `enqueued` event's actor. Read by ownership checks.
   */
  enqueuedBy?: string | null;
}

export interface JobInsert {
  id: string;
  queue: string;
  operation: string;
  /** Validated JSON text of the input. */
  inputJson: string;
  requestKey: string;
  fingerprint: string;
  runId: string | null;
  stepId: string | null;
  priority: number;
  /** Run no earlier than this many ms from now (store clock); 0 = now. */
  delayMs: number;
  /** Absolute run time, when the caller gave one; wins over delayMs. */
  runAt: number | null;
  maxAttempts: number;
  backoff: BackoffPolicy;
  timeoutMs: number;
  /** The operation's `reconcile.graceMs`: recorded with the job (see JobRecord). */
  reconcileGraceMs: number;
  /**
   * A hand-off: lease the new job to this idle worker of the caller's process in the same
   * commit, if it is due now and no due QUEUED job of its queue ranks at least as high. Stores
   * may ignore it; the result's `claimed` says whether it was taken.
   */
  leaseTo?: { ownerId: string; leaseMs: number };
  /** Present: the job is written AWAITING_APPROVAL, and expires `expiresInMs` from now (null: never). */
  approval?: { reason: string | null; expiresInMs: number | null };
  /** The keys of its operation's limits (core/flow.ts `flowKeysOf`); absent: none. */
  rateKey?: string | null;
  concurrencyKey?: string | null;
  /** The enqueuing code's W3C `traceparent` (absent: no tracer was active). */
  traceParent?: string | null;
}

export type JobInsertResult =
  { job: JobRecord; created: true; claimed?: ClaimedAttempt } | { job: JobRecord; created: false };

export interface LeaseRef {
  jobId: string;
  attemptNo: number;
  leaseToken: string;
}

export interface ClaimedAttempt {
  job: JobRecord;
  attempt: AttemptRecord;
}

export type DispatchMarkResult =
  | { ok: true; dispatchedAt: number; leaseExpiresAt: number }
  | { ok: false; reason: 'lease-expired' | 'lease-lost' };

export interface HeartbeatResult {
  lease: LeaseRef;
  ok: boolean;
  leaseExpiresAt: number | null;
}

/** The job side of a write: which state it moves to, and when it runs or is checked next. */
export interface JobNext {
  to: JobState;
  /** QUEUED: run_at = now + delayMs. */
  delayMs?: number;
  /** UNKNOWN: next_check_at = dispatched_at + this (the lookup waits for timeout + grace). */
  checkAfterDispatchMs?: number;
}

export interface AttemptFinish {
  lease: LeaseRef;
  state: Exclude<AttemptState, 'LEASED'>;
  reason: string | null;
  resultJson: string | null;
  error: ErrorInfo | null;
  job: JobNext;
  actor: string;
}

export interface ExpiredAttempt {
  job: JobRecord;
  attempt: AttemptRecord;
}

export interface AttemptExpire {
  lease: LeaseRef;
  /** FAILED_BEFORE_SEND without a marker (invariant 4), UNKNOWN with one (invariant 5). */
  state: 'FAILED_BEFORE_SEND' | 'UNKNOWN';
  reason: string;
  job: JobNext;
  actor: string;
}

export interface JobTransition {
  jobId: string;
  from: JobState;
  to: JobState;
  /** Fence against ABA: the job's latest attempt must still be this one. */
  expectAttemptNo: number;
  delayMs?: number;
  /** UNKNOWN: next_check_at = now + this. */
  recheckDelayMs?: number;
  /** An inconclusive lookup: lookup_failures + 1, counted by the store on the locked row. */
  lookupFailed?: boolean;
  /** Adds a resolution to the job's UNKNOWN attempt `expectAttemptNo` (must have none yet). */
  resolution?: { kind: Resolution; source: string; evidence: unknown };
  resultJson?: string | null;
  error?: ErrorInfo | null;
  event: { kind: string; actor: string; detail?: Record<string, unknown> };
  /**
   * A person's decision (review): it may end the job FAILED whatever its history. Any other
   * move to FAILED needs every attempt proven without effect (plan/proof.ts).
   */
  byPerson?: boolean;
}

export interface EventInsert {
  jobId: string;
  attemptNo: number | null;
  kind: string;
  actor: string;
  fromState?: string | null;
  toState?: string | null;
  detail?: Record<string, unknown>;
}

export interface JobListParams {
  states?: JobState[];
  queue?: string;
  operation?: string;
  /** Only the steps of this agent run (the `runId` given at enqueue). */
  runId?: string;
  limit: number;
  /** Keyset pagination: jobs created before this id (ids sort by creation). */
  beforeId?: string;
}

/**
 * A bounded search of the jobs, newest first (`jobSearch`). Keyset pagination on the id (uuid
 * v7: ids sort by creation), never OFFSET. Every row the search reads lies in a window of at
 * most `scanRowsMax` ids below the cursor, so a filter that matches few jobs costs that window,
 * never the whole table; the page then says where the next window starts.
 */
export interface JobSearchParams {
  states?: JobState[];
  queue?: string;
  operation?: string;
  /** Only the steps of this agent run (exact). */
  runId?: string;
  /** created_at >= this (epoch ms, store clock). */
  createdFrom?: number;
  /** created_at < this (epoch ms, store clock). */
  createdTo?: number;
  /**
   * A job id or request key (exact, through their indexes), or a run id, a request fingerprint,
   * or text in the input or the request key (within the window; case-insensitive for ASCII
   * letters only, on every store).
   */
  text?: string;
  limit: number;
  /** Jobs with an id below this one (the page's `nextBeforeId`). */
  beforeId?: string;
  /** The most ids one call reads past (the window). */
  scanRowsMax: number;
}

export interface JobSearchPage {
  jobs: JobRecord[];
  /** Where the next page starts (pass as `beforeId`); null: there is nothing older. */
  nextBeforeId: string | null;
  /** The window ended before the page was full: older jobs were not searched yet. */
  scanStopped: boolean;
}

export interface ActivityParams {
  windowMs: number;
  bucketMs: number;
  /** The most ended jobs one bucket reads (its latest); a busier bucket is estimated from them. */
  bucketRowsMax: number;
}

/** Recent activity for the console's overview (`statsActivityGet`). */
export interface ActivityStats {
  now: number;
  /**
   * Jobs that ended (finished_at) in each bucket of the window, oldest bucket first. A bucket
   * with more than `bucketRowsMax` is counted from its latest ones and scaled (`estimated`).
   */
  finished: {
    at: number;
    succeeded: number;
    failed: number;
    cancelled: number;
    estimated: boolean;
  }[];
  /** Jobs now UNKNOWN / NEEDS_REVIEW, and how many of them got there within the window. */
  unknown: { now: number; entered: number };
  needsReview: { now: number; entered: number };
}

export type JobCancelResult =
  { cancelled: true; job: JobRecord } | { cancelled: false; job: JobRecord; why: string };

export interface QueueStats {
  queue: string;
  counts: Record<JobState, number>;
  /** The run_at of the oldest due QUEUED job, or null. */
  oldestDueAt: number | null;
}

export interface StoreStats {
  now: number;
  queues: QueueStats[];
  /** UNKNOWN and NEEDS_REVIEW by operation. */
  byOperation: { operation: string; unknown: number; needsReview: number }[];
  /** Attempts still LEASED whose lease has expired (not yet reclaimed). */
  expiredLeases: number;
}

/** A job's state as an outcome waiter reads it (`jobStateMany`): the result and error only when terminal. */
export interface JobStateRow {
  id: string;
  state: JobState;
  result: Json | null;
  error: ErrorInfo | null;
}

/** What `jobChangeSubscribe` returns. */
export interface JobChangeSubscription {
  close(): Promise<void>;
  /**
   * Optional: `jobStateMany` on the subscription's own connection, which the hot path does not
   * compete for (PostgreSQL: the LISTEN connection). Rejects when that connection is down.
   */
  jobStateMany?(p: { ids: string[] }): Promise<JobStateRow[]>;
  /**
   * Optional: says which jobs are waited for. A store that has it may notify only those (on
   * PostgreSQL a NOTIFY costs every committing transaction a database-wide lock); call it before
   * reading their states, so that no change falls in between. Best effort, like notifications.
   */
  watch?(p: { ids: string[] }): Promise<void>;
}

/** A decision on an AWAITING_APPROVAL job (the runtime checks the transition first). */
export interface ApprovalDecide {
  jobId: string;
  to: 'QUEUED' | 'CANCELLED';
  /** Event kind: `approved` or `denied`. */
  kind: string;
  actor: string;
  detail: Record<string, unknown>;
  /** CANCELLED: the decision, kept as the job's error. */
  error: ErrorInfo | null;
}

/**
 * The decision applied; or not: the job as it is when it was not AWAITING_APPROVAL (null: no
 * such job), or (`expired`) as the expiry the decision came too late for left it, CANCELLED.
 */
export type ApprovalDecideResult =
  | { ok: true; job: JobRecord }
  | { ok: false; job: JobRecord | null; expired?: false }
  | { ok: false; job: JobRecord; expired: true };

export interface ApprovalStats {
  now: number;
  /** AWAITING_APPROVAL jobs by operation, with the created_at of the oldest. */
  byOperation: { operation: string; awaiting: number; oldestAt: number }[];
}

/** `attemptClaimLimited`: claims of operations with a `rateLimit` or `concurrency`. */
export interface FlowClaimParams {
  ownerId: string;
  queues: string[];
  /** One entry per limited operation to claim. */
  limits: FlowLimit[];
  limit: number;
  leaseMs: number;
}

export interface FlowClaimResult {
  claimed: ClaimedAttempt[];
  /** How soon a rate slot frees for a due job left behind (ms from now), or null. */
  retryInMs: number | null;
  /** Due jobs the claim saw and left behind, by operation and by the limit that held them. */
  held: { operation: string; rate: number; concurrency: number }[];
}

/** A paused queue or operation: no claim takes its jobs until it is resumed. */
export interface PauseRecord {
  kind: 'queue' | 'operation';
  name: string;
  actor: string;
  reason: string | null;
  pausedAt: number;
}

/** A schedule as the store knows it: the last slot judged, whoever ticked. */
export interface ScheduleRecord {
  name: string;
  cron: string;
  timezone: string | null;
  operation: string;
  lastSlotAt: number;
  updatedAt: number;
}

export interface StoreCapabilities {
  /** Whose clock judges leases. */
  readonly clock: 'host' | 'database';
  /** Several processes on several hosts may share the store. */
  readonly multiHost: boolean;
  /** The store can wake workers in other processes when work arrives. */
  readonly crossProcessNotify: boolean;
  /** The store honours `JobInsert.leaseTo` (a hand-off to an idle local worker). */
  readonly handOff: boolean;
}

/**
 * One durable commit of writes that callers shared (group commit), as `onCommit` reports it. On
 * PostgreSQL each kind of write commits on its own (`enqueue`, `claim`, `dispatch`, `finish`,
 * `heartbeat`); on SQLite every write of one event-loop turn shares one transaction (`shared`),
 * except a turn of claims only, which commits without an fsync (`claim`).
 */
export interface StoreCommit {
  write: string;
  /** Calls answered by this commit. */
  callers: number;
  /** From the start of the write (BEGIN, or the statement sent) until it was durable. */
  ms: number;
}

/** The terminal states retention may delete (invariant 8): never a waiting or live job. */
export type PrunableState = 'SUCCEEDED' | 'FAILED' | 'CANCELLED';

export interface JobPruneParams {
  /** Which terminal states; each job must also have finished at least `olderThanMs` ago. */
  states: PrunableState[];
  /** Age on the store's clock: finished_at <= now - olderThanMs. */
  olderThanMs: number;
  /** Most jobs this call deletes (one transaction). */
  limit: number;
  /** Count what would go (every matching job, not only `limit`), delete nothing. */
  dryRun?: boolean;
  /**
   * Called with the batch's whole histories before they are deleted; the rows go only after it
   * resolves (an archive written and synced), and nothing goes if it throws.
   */
  archive?: (histories: JobDetail[]) => Promise<void>;
}

export interface JobPruneResult {
  /** Jobs deleted (dry run: that would be), by state. */
  jobs: Record<PrunableState, number>;
  attempts: number;
  events: number;
  /** Dry run: false. Otherwise: the batch was full, more may match. */
  more: boolean;
}

/** A named API token (`reckon tokens`): only its SHA-256 hash is stored. */
export interface TokenRecord {
  id: string;
  name: string;
  /** viewer, producer, approver, reviewer or admin (the server judges what each may do). */
  role: string;
  /** Operations this token may decide on (approver, reviewer); null: every operation. */
  operations: string[] | null;
  /** Extra rights, e.g. `inputs` (a viewer sees inputs and results unredacted). */
  grants: string[];
  createdAt: number;
  createdBy: string;
  /** Store clock; null: never. */
  expiresAt: number | null;
  revokedAt: number | null;
}

export interface TokenInsert {
  id: string;
  name: string;
  role: string;
  operations: string[] | null;
  grants: string[];
  /** SHA-256 of the token, hex. */
  hash: string;
  createdBy: string;
  /** Expires this long after now (store clock); null: never. */
  expiresInMs: number | null;
}

export interface Store {
  readonly kind: 'sqlite' | 'postgres';
  /** Where the store is, for messages (never with a password). */
  readonly location: string;
  readonly capabilities: StoreCapabilities;

  /** Opens, checks and migrates. Typed errors: StoreCorrupt, StoreReadOnly, SchemaTooNew, StoreUnavailable. */
  init(): Promise<void>;
  close(): Promise<void>;
  clockNow(): Promise<number>;
  schemaVersion(): Promise<number>;

  /**
   * Atomic batch: every job is inserted or deduplicated, or (RequestKeyConflict) none is.
   * `transaction`: a driver connection with an open transaction of the caller's; the jobs are
   * written in it and exist iff it commits (stores that cannot do this throw InvalidInput).
   */
  jobInsertMany(p: {
    jobs: JobInsert[];
    actor: string;
    transaction?: unknown;
  }): Promise<JobInsertResult[]>;
  jobGet(p: { id: string }): Promise<JobDetail | null>;
  jobList(p: JobListParams): Promise<JobRecord[]>;
  /** A conditional transition (job state and latest attempt both as expected); false if it did not apply. */
  jobTransition(p: JobTransition): Promise<boolean>;
  /** Cancels a QUEUED job, or a LEASED one whose attempt has no dispatch marker (fencing its worker). */
  jobCancel(p: {
    id: string;
    actor: string;
    reason: string;
    /** Who decided (a person), kept in the event's detail. */
    by?: Record<string, unknown>;
  }): Promise<JobCancelResult | null>;
  /** Takes UNKNOWN jobs due for reconciliation, holding them `holdMs` so that others skip them. */
  jobReconcileClaimMany(p: {
    operations: string[];
    limit: number;
    holdMs: number;
  }): Promise<ClaimedAttempt[]>;

  /**
   * Claims due QUEUED jobs: a new LEASED attempt each, with a fresh token and expiry on the store's
   * clock. Order: priority (highest first), then run_at, then first come, first served (the
   * uuid v7 id on PostgreSQL, insertion on SQLite: the same order for jobs of one process).
   */
  attemptClaimMany(p: {
    ownerId: string;
    queues: string[];
    operations: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedAttempt[]>;
  /** Invariant 3: sets dispatched_at, fenced on token, state LEASED and the lease being unexpired. */
  attemptDispatchMany(p: { leases: LeaseRef[] }): Promise<DispatchMarkResult[]>;
  /** Extends unexpired leases to now + leaseMs; reports each one that could not be extended. */
  attemptHeartbeatMany(p: { leases: LeaseRef[]; leaseMs: number }): Promise<HeartbeatResult[]>;
  /** Records outcomes, fenced on token and state LEASED; false for a worker that was fenced out. */
  attemptFinishMany(p: { finishes: AttemptFinish[] }): Promise<boolean[]>;
  /** LEASED attempts whose lease_expires_at + skewMs has passed. */
  attemptExpiredList(p: { skewMs: number; limit: number }): Promise<ExpiredAttempt[]>;
  /** Ends expired attempts, each only if still LEASED with that token and still expired by skewMs. */
  attemptExpireMany(p: { expiries: AttemptExpire[]; skewMs: number }): Promise<boolean[]>;

  eventAppendMany(p: { events: EventInsert[] }): Promise<void>;

  /** AWAITING_APPROVAL jobs, oldest first. */
  jobApprovalList(p: { operation?: string; limit: number }): Promise<JobRecord[]>;
  /**
   * Applies a decision only if the job is still AWAITING_APPROVAL (two deciders: one wins) and
   * its approval has not expired (store clock); an expired one is cancelled instead (plan/approval.ts).
   */
  jobApprovalDecide(p: ApprovalDecide): Promise<ApprovalDecideResult>;
  /** Cancels up to `limit` AWAITING_APPROVAL jobs whose approval expired (store clock); returns them. */
  jobApprovalExpireMany(p: { limit: number; actor: string }): Promise<JobRecord[]>;
  jobApprovalStats(): Promise<ApprovalStats>;

  /**
   * Retention (invariant 8): deletes the whole histories (job, attempts, events, in one
   * transaction) of up to `limit` terminal jobs that finished long enough ago, oldest first.
   */
  jobPruneMany(p: JobPruneParams): Promise<JobPruneResult>;

  /**
   * Optional (capabilities.crossProcessNotify): calls `onWork` soon after jobs become available
   * in one of `queues`, committed by any process, this one included (once: work this store
   * committed wakes its subscribers directly, not again through its own notification). Best
   * effort: workers still poll, so a lost notification only costs latency.
   */
  workSubscribe?(p: { queues: string[]; onWork: () => void }): Promise<{ close(): Promise<void> }>;
  /**
   * Optional: the states of these jobs in one read (ids that do not exist are left out), for
   * outcome waiters (`q.call`, `q.waitFor`); without it the queue reads each job.
   */
  jobStateMany?(p: { ids: string[] }): Promise<JobStateRow[]>;
  /**
   * Optional: calls `onChange` soon after jobs reach a terminal or waiting state (SUCCEEDED,
   * FAILED, CANCELLED, UNKNOWN, NEEDS_REVIEW, AWAITING_APPROVAL), committed by any process (where
   * the subscription has `watch`: the watched jobs, at least). An
   * empty list means "jobs may have changed, which ones is not known" (e.g. after a reconnect):
   * check every job you wait for. `states`: the committed states of some of those jobs, where
   * the notification carried them (PostgreSQL, when they fit), so that no read is needed. Best
   * effort: waiters still poll, so a lost notification only costs latency.
   */
  jobChangeSubscribe?(p: {
    onChange: (jobIds: string[], states?: JobStateRow[]) => void;
  }): Promise<JobChangeSubscription>;
  /**
   * Optional: `fn` hears of every successful commit of shared writes from now on (for metrics;
   * it must be quick and must not throw). Returns the function that stops it.
   */
  onCommit?(fn: (c: StoreCommit) => void): () => void;
  /** Stores a new token; `TokenNameTaken` when a live (unrevoked) token has its name. */
  tokenInsert(p: TokenInsert): Promise<TokenRecord>;
  /** Tokens, newest first; revoked ones only when asked. */
  tokenList(p: { includeRevoked?: boolean }): Promise<TokenRecord[]>;
  /** The token with this hash (or id), revoked and expired ones included: the caller judges. */
  tokenFind(p: { hash: string } | { id: string }): Promise<TokenRecord | null>;
  /** Revokes the live token of this name (store clock); null when there is none. */
  tokenRevoke(p: { name: string }): Promise<TokenRecord | null>;

  statsGet(): Promise<StoreStats>;

  // ---------------------------------------------------------------- flow control (issue #30)

  /**
   * Claims due QUEUED jobs of limited operations, in claim order, leasing only what their limits
   * allow: per key, at most `concurrency.max` LEASED at once and `rate.max` starts in any
   * `rate.perMs` window, none while a hold (`flowBackoff`) lasts. Keys at a limit are skipped,
   * never waited for. Paused queues and operations are skipped as in `attemptClaimMany`.
   */
  attemptClaimLimited(p: FlowClaimParams): Promise<FlowClaimResult>;
  /** No start of this operation's rate key before now + delayMs (a later hold is kept). */
  flowBackoff(p: { operation: string; rateKey: string; delayMs: number }): Promise<void>;
  /** Pauses (or resumes) a queue or an operation; returns whether that changed anything. */
  pauseSet(p: {
    kind: 'queue' | 'operation';
    name: string;
    paused: boolean;
    actor: string;
    reason: string | null;
  }): Promise<boolean>;
  pauseList(): Promise<PauseRecord[]>;
  /**
   * Records a schedule's definition; a new one starts with its last slot at now (store clock), so
   * that only slots from now on are enqueued. Returns the record as stored.
   */
  scheduleRegister(p: {
    name: string;
    cron: string;
    timezone: string | null;
    operation: string;
  }): Promise<ScheduleRecord>;
  /** Moves the schedule's last slot forward to `lastSlotAt` (never back). */
  scheduleAdvance(p: { name: string; lastSlotAt: number }): Promise<void>;
  scheduleList(): Promise<ScheduleRecord[]>;

  /** A bounded, keyset-paginated search (see `JobSearchParams`). */
  jobSearch(p: JobSearchParams): Promise<JobSearchPage>;
  /** Jobs ended per bucket over the last `windowMs`, and UNKNOWN / NEEDS_REVIEW growth in it. */
  statsActivityGet(p: ActivityParams): Promise<ActivityStats>;
}
