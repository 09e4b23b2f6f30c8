/**
 * reckon: a durable job queue and execution journal for side effects.
 */
import { loadTracing } from './runtime/tracing.js';
import type { Store } from './store/store.js';
import { createStore, DEFAULT_STORE_URL, type StoreOpenOptions } from './store/open.js';
import { Queue, type QueueOptions } from './runtime/queue.js';

export interface OpenQueueOptions extends QueueOptions, Omit<StoreOpenOptions, 'clock'> {
  /** `sqlite:./reckon.db` (default, or RECKON_STORE), `sqlite::memory:`, `postgres://…`, or a Store. */
  store?: string | Store;
}

/** Opens (and migrates) a store and returns the queue API on it. */
export async function openQueue(options: OpenQueueOptions = {}): Promise<Queue> {
  const store =
    typeof options.store === 'object' && options.store !== null
      ? options.store
      : await createStore(options.store ?? process.env.RECKON_STORE ?? DEFAULT_STORE_URL, {
          ...options,
          clock: options.clock ? () => options.clock!.now() : undefined,
        });
  await store.init();
  await loadTracing();
  return new Queue(store, options);
}

export {
  defineOperation,
  isOperation,
  DEFAULT_RECONCILE,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_APPROVAL_TIMEOUT_MS,
} from './core/operation.js';
export type {
  Operation,
  OperationSpec,
  OperationContext,
  LookupContext,
  LookupResult,
  Classification,
  ReconcilePolicy,
  Logger,
} from './core/operation.js';
export {
  ReckonError,
  DefiniteFailure,
  RequestKeyConflict,
  InvalidInput,
  PayloadTooLarge,
  UnknownOperation,
  JobNotFound,
  JobStateConflict,
  ApprovalExpired,
  StoreError,
  StoreCorrupt,
  StoreReadOnly,
  StoreFull,
  StoreNotDurable,
  SchemaTooNew,
  StoreUnavailable,
  InvalidStoreUrl,
  LeaseLost,
  InvariantViolation,
  IllegalTransition,
  CallbackFailed,
  TargetExists,
  BackupInvalid,
  BackupUnsupported,
  OutcomePending,
  QueueClosed,
  RateLimited,
  InvalidSchedule,
  ApprovalInputChanged,
} from './core/errors.js';
export { defineSchedule, isSchedule, SCHEDULE_LATE_MAX_MS } from './core/schedule.js';
export type { Schedule, ScheduleSpec, MissedPolicy } from './core/schedule.js';
export type { RateLimitSpec, ConcurrencySpec } from './core/flow.js';
export type { QueueInfo, PauseOptions, ScheduleInfo } from './runtime/flow.js';
export type { ErrorInfo, OutcomeEvidence } from './core/errors.js';
export { JOB_STATES, ATTEMPT_STATES, describeJobTransitions } from './core/states.js';
export type { JobState, AttemptState, Resolution } from './core/states.js';
export { fingerprintOf, canonicalJson } from './core/json.js';
export type { RetryPolicy, BackoffPolicy } from './core/retry.js';
export { Queue } from './runtime/queue.js';
export type { QueueOptions, EnqueueOptions, EnqueuedJob, JobsQuery } from './runtime/queue.js';
export type { CallOptions } from './runtime/queue.js';
export { DEFAULT_WAIT_MS } from './runtime/outcomes.js';
export type { CallOutcome, WaitOptions } from './runtime/outcomes.js';
export { Worker } from './runtime/worker.js';
export type { WorkerOptions } from './runtime/worker.js';
export type { JobEvent } from './runtime/events.js';
export type { ResolveOptions, ReviewDecision } from './runtime/review.js';
export { DEFAULT_RETENTION, parseAge } from './runtime/retention.js';
export type { RetentionOptions, RetentionSettings } from './runtime/retention.js';
export type { ApprovalRequest, DecideOptions } from './runtime/approvals.js';
export { inputHashOf } from './runtime/approvals.js';
export type { JobSearchQuery, Overview } from './runtime/search.js';
export { Faults, FAULT_POINTS, InjectedFault, parseFaults } from './runtime/faults.js';
export type { FaultPoint, FaultAction, FaultSpec } from './runtime/faults.js';
export { createStore, DEFAULT_STORE_URL } from './store/open.js';
export type {
  Store,
  JobRecord,
  AttemptRecord,
  EventRecord,
  JobDetail,
  StoreStats,
  JobPruneParams,
  JobPruneResult,
  PrunableState,
  JobSearchPage,
  ActivityStats,
} from './store/store.js';
export { createLogger } from './observe/logger.js';
export { Metrics } from './observe/metrics.js';
export type { MetricsOptions } from './observe/metrics.js';
export type { RuntimeObserver, DuplicatePreventionKind } from './runtime/observer.js';
export { startMetricsServer } from './server/metrics-server.js';
export { systemClock } from './core/clock.js';
export type { Clock, ClockTimer, TimerOptions } from './core/clock.js';
