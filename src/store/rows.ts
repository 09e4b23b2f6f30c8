/**
 * Row shapes shared by the SQL stores (snake_case columns) and their mapping to records.
 * Times arrive as numbers (SQLite) or Date/strings (PostgreSQL) and leave as epoch ms.
 */
import type { ErrorInfo } from '../core/errors.js';
import type { Json } from '../core/json.js';
import type { BackoffPolicy } from '../core/retry.js';
import { JOB_STATES, type AttemptState, type JobState, type Resolution } from '../core/states.js';
import type {
  AttemptRecord,
  EventRecord,
  JobInsert,
  JobRecord,
  PauseRecord,
  ScheduleRecord,
  StoreStats,
  TokenRecord,
} from './store.js';

type Time = number | string | Date | bigint;
type MaybeTime = Time | null;

export interface JobRow {
  id: string;
  queue: string;
  operation: string;
  input_json: string;
  request_key: string;
  request_fingerprint: string;
  run_id: string | null;
  step_id: string | null;
  state: string;
  priority: number;
  run_at: Time;
  created_at: Time;
  updated_at: Time;
  finished_at: MaybeTime;
  attempt_count: number;
  max_attempts: number;
  backoff_json: string;
  timeout_ms: number;
  reconcile_grace_ms: number;
  next_check_at: MaybeTime;
  lookup_failures: number;
  result_json: string | null;
  error_json: string | null;
  /** Absent from the rows of statements that do not select them (read as null). */
  approval_reason?: string | null;
  approval_expires_at?: MaybeTime;
  trace_parent?: string | null;
}

export interface AttemptRow {
  job_id: string;
  attempt_no: number;
  /** The job's, copied by rows written before migration 13; NULL since (read through the job). */
  request_key: string | null;
  request_fingerprint: string | null;
  state: string;
  owner_id: string;
  lease_token: string;
  leased_at: Time;
  lease_expires_at: Time;
  dispatched_at: MaybeTime;
  finished_at: MaybeTime;
  result_json: string | null;
  error_json: string | null;
  reason: string | null;
  resolution: string | null;
  resolution_source: string | null;
  resolution_evidence_json: string | null;
  resolved_at: MaybeTime;
}

export interface EventRow {
  id: number | string;
  job_id: string;
  attempt_no: number | null;
  request_fingerprint: string;
  kind: string;
  from_state: string | null;
  to_state: string | null;
  actor: string;
  detail_json: string | null;
  at: Time;
}

export function toMs(t: Time): number {
  if (typeof t === 'number') return t;
  if (typeof t === 'bigint') return Number(t);
  if (t instanceof Date) return t.getTime();
  return new Date(t).getTime();
}

function toMsOrNull(t: MaybeTime): number | null {
  return t === null ? null : toMs(t);
}

function parseJson<T>(text: string | null): T | null {
  return text === null ? null : (JSON.parse(text) as T);
}

export function jobFromRow(r: JobRow): JobRecord {
  return {
    id: r.id,
    queue: r.queue,
    operation: r.operation,
    input: JSON.parse(r.input_json) as Json,
    requestKey: r.request_key,
    fingerprint: r.request_fingerprint,
    runId: r.run_id,
    stepId: r.step_id,
    state: r.state as JobState,
    priority: Number(r.priority),
    runAt: toMs(r.run_at),
    createdAt: toMs(r.created_at),
    updatedAt: toMs(r.updated_at),
    finishedAt: toMsOrNull(r.finished_at),
    attemptCount: Number(r.attempt_count),
    maxAttempts: Number(r.max_attempts),
    backoff: backoffOf(r.backoff_json),
    timeoutMs: Number(r.timeout_ms),
    reconcileGraceMs: Number(r.reconcile_grace_ms),
    // An UNKNOWN job's lookup time. A LEASED job's column is the store's own (PostgreSQL
    // migration 15: its lease's first expiry, for the expired-lease scan).
    nextCheckAt: r.state === 'UNKNOWN' ? toMsOrNull(r.next_check_at) : null,
    lookupFailures: Number(r.lookup_failures),
    result: parseJson<Json>(r.result_json),
    error: parseJson<ErrorInfo>(r.error_json),
    approvalReason: r.approval_reason ?? null,
    approvalExpiresAt: toMsOrNull(r.approval_expires_at ?? null),
    traceParent: r.trace_parent ?? null,
  };
}

/**
 * An attempt's record from its row and its job's: the request key and fingerprint are the job's
 * (invariant 6: they never change), which rows written before migration 13 also copied.
 */
export function attemptFromRow(
  r: AttemptRow,
  job: Pick<JobRecord, 'requestKey' | 'fingerprint'>,
): AttemptRecord {
  return {
    jobId: r.job_id,
    attemptNo: Number(r.attempt_no),
    requestKey: r.request_key ?? job.requestKey,
    fingerprint: r.request_fingerprint ?? job.fingerprint,
    state: r.state as AttemptState,
    ownerId: r.owner_id,
    leaseToken: r.lease_token,
    leasedAt: toMs(r.leased_at),
    leaseExpiresAt: toMs(r.lease_expires_at),
    dispatchedAt: toMsOrNull(r.dispatched_at),
    finishedAt: toMsOrNull(r.finished_at),
    result: parseJson<Json>(r.result_json),
    error: parseJson<ErrorInfo>(r.error_json),
    reason: r.reason,
    resolution: r.resolution as Resolution | null,
    resolutionSource: r.resolution_source,
    resolutionEvidence: parseJson<Json>(r.resolution_evidence_json),
    resolvedAt: toMsOrNull(r.resolved_at),
  };
}

export function eventFromRow(r: EventRow): EventRecord {
  return {
    id: Number(r.id),
    jobId: r.job_id,
    attemptNo: r.attempt_no === null ? null : Number(r.attempt_no),
    fingerprint: r.request_fingerprint,
    kind: r.kind,
    fromState: r.from_state,
    toState: r.to_state,
    actor: r.actor,
    detail: parseJson<Json>(r.detail_json),
    at: toMs(r.at),
  };
}

export function jsonOrNull(value: unknown): string | null {
  return value === undefined || value === null ? null : JSON.stringify(value);
}

/**
 * The attempt a claim has just created for `job` (whose attempt count the claim already raised):
 * LEASED, with no marker, outcome or resolution yet. Both stores answer claims with it, so
 * neither has to read the new row back.
 */
export function newLeasedAttempt(
  job: JobRecord,
  lease: { ownerId: string; leaseToken: string; leasedAt: number; leaseExpiresAt: number },
): AttemptRecord {
  return {
    jobId: job.id,
    attemptNo: job.attemptCount,
    requestKey: job.requestKey,
    fingerprint: job.fingerprint,
    state: 'LEASED',
    ...lease,
    dispatchedAt: null,
    finishedAt: null,
    result: null,
    error: null,
    reason: null,
    resolution: null,
    resolutionSource: null,
    resolutionEvidence: null,
    resolvedAt: null,
  };
}

/**
 * The job an enqueue has just inserted for `j` at `now` (the store's clock, epoch ms): QUEUED
 * (AWAITING_APPROVAL with `j.approval`, expiring `expiresInMs` after now), due at `j.runAt`, or `j.delayMs` after now, exactly as both stores' insert computes `run_at`.
 * Equal to what reading the new row back gives (`jobFromRow`), so neither store has to.
 * `backoffJson` is `j.backoff` as written, when the caller has already serialized it.
 */
export function newQueuedJob(j: JobInsert, now: number, backoffJson?: string): JobRecord {
  return {
    id: j.id,
    queue: j.queue,
    operation: j.operation,
    input: JSON.parse(j.inputJson) as Json,
    requestKey: j.requestKey,
    fingerprint: j.fingerprint,
    runId: j.runId,
    stepId: j.stepId,
    state: j.approval ? 'AWAITING_APPROVAL' : 'QUEUED',
    priority: j.priority,
    runAt: j.runAt ?? now + j.delayMs,
    createdAt: now,
    updatedAt: now,
    finishedAt: null,
    attemptCount: 0,
    maxAttempts: j.maxAttempts,
    backoff: backoffOf(backoffJson ?? JSON.stringify(j.backoff)),
    timeoutMs: j.timeoutMs,
    reconcileGraceMs: j.reconcileGraceMs,
    nextCheckAt: null,
    lookupFailures: 0,
    result: null,
    error: null,
    approvalReason: j.approval?.reason ?? null,
    approvalExpiresAt: approvalExpiresAt(j, now),
    traceParent: j.traceParent ?? null,
  };
}

/** When a new job's approval expires (store clock, epoch ms), as both stores' insert computes it. */
export function approvalExpiresAt(j: JobInsert, now: number): number | null {
  const ms = j.approval?.expiresInMs;
  return ms === undefined || ms === null ? null : now + ms;
}

/** The `enqueued` event's detail of a job written AWAITING_APPROVAL (JSON text). */
export function approvalEventDetail(j: JobInsert, now: number): string {
  return JSON.stringify({
    approval: { reason: j.approval?.reason ?? null, expiresAt: approvalExpiresAt(j, now) },
  });
}

/**
 * A retry policy as stored, parsed once per distinct text: the jobs of one operation share one
 * policy, and each record read or written would otherwise parse its own copy. Frozen, since
 * records share it.
 */
const backoffs = new Map<string, BackoffPolicy>();
const BACKOFFS_CACHED_MAX = 256;

export function backoffOf(json: string): BackoffPolicy {
  let b = backoffs.get(json);
  if (b === undefined) {
    b = Object.freeze(JSON.parse(json) as BackoffPolicy);
    if (backoffs.size >= BACKOFFS_CACHED_MAX) backoffs.clear();
    backoffs.set(json, b);
  }
  return b;
}

/** The rows of a stats read, as both stores' queries return them (times as the driver gives them). */
export interface StatsRows {
  now: Time;
  counts: { queue: string; state: JobState; n: number | string }[];
  oldest: { queue: string; t: Time }[];
  byOperation: { operation: string; unknown: number | string; needs_review: number | string }[];
  expired: number | string;
}

/** `StoreStats` from its rows: every state counted (0 when absent), queues in name order. */
export function statsFromRows(r: StatsRows): StoreStats {
  const byQueue = new Map<string, StoreStats['queues'][number]>();
  const entry = (queue: string) => {
    let q = byQueue.get(queue);
    if (!q) {
      q = {
        queue,
        counts: Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>,
        oldestDueAt: null,
      };
      byQueue.set(queue, q);
    }
    return q;
  };
  for (const c of r.counts) entry(c.queue).counts[c.state] = Number(c.n);
  for (const o of r.oldest) entry(o.queue).oldestDueAt = toMs(o.t);
  return {
    now: toMs(r.now),
    queues: [...byQueue.values()].sort((a, b) => a.queue.localeCompare(b.queue)),
    byOperation: r.byOperation.map((b) => ({
      operation: b.operation,
      unknown: Number(b.unknown),
      needsReview: Number(b.needs_review),
    })),
    expiredLeases: Number(r.expired),
  };
}

/** The columns of an attempt that plan/proof.ts reads (both stores' `attemptFacts`). */
export interface AttemptFactRow {
  attempt_no: number;
  state: string;
  resolution: string | null;
  resolution_source: string | null;
  error_json: string | null;
}

export function attemptFactFromRow(r: AttemptFactRow): {
  attemptNo: number;
  state: AttemptState;
  resolution: Resolution | null;
  resolutionSource: string | null;
  error: ErrorInfo | null;
} {
  return {
    attemptNo: r.attempt_no,
    state: r.state as AttemptState,
    resolution: r.resolution as Resolution | null,
    resolutionSource: r.resolution_source,
    error: parseJson<ErrorInfo>(r.error_json),
  };
}

export interface TokenRow {
  id: string;
  name: string;
  role: string;
  operations_json: string | null;
  grants_json: string;
  created_at: Time;
  created_by: string;
  expires_at: MaybeTime;
  revoked_at: MaybeTime;
}

export function tokenFromRow(r: TokenRow): TokenRecord {
  return {
    id: r.id,
    name: r.name,
    role: r.role,
    operations: r.operations_json === null ? null : (JSON.parse(r.operations_json) as string[]),
    grants: JSON.parse(r.grants_json) as string[],
    createdAt: toMs(r.created_at),
    createdBy: r.created_by,
    expiresAt: toMsOrNull(r.expires_at),
    revokedAt: toMsOrNull(r.revoked_at),
  };
}

/** A row of flow_schedules (times as epoch ms: SQLite stores them so, PostgreSQL selects them so). */
export interface ScheduleRow {
  name: string;
  cron: string;
  timezone: string | null;
  operation: string;
  last_slot_at: number;
  updated_at: number;
}

export function scheduleFromRow(r: ScheduleRow): ScheduleRecord {
  return {
    name: r.name,
    cron: r.cron,
    timezone: r.timezone,
    operation: r.operation,
    lastSlotAt: r.last_slot_at,
    updatedAt: r.updated_at,
  };
}

/** A row of flow_pauses (paused_at as epoch ms). */
export interface PauseRow {
  kind: 'queue' | 'operation';
  name: string;
  actor: string;
  reason: string | null;
  paused_at: number;
}

export function pauseFromRow(r: PauseRow): PauseRecord {
  return { kind: r.kind, name: r.name, actor: r.actor, reason: r.reason, pausedAt: r.paused_at };
}
