/**
 * Every limit and interval of the runtime, named with its unit last, validated once.
 */
import { InvalidInput } from '../core/errors.js';
import { JSON_DEPTH_MAX } from '../core/json.js';

export const LIMITS = {
  /** Largest input accepted at enqueue, as JSON bytes. 1 MiB keeps rows small enough to claim fast. */
  payloadBytesMax: 1024 * 1024,
  /** Request keys identify one side effect; 512 chars fits `runId:stepId` of two UUIDs with room. */
  requestKeyLengthMax: 512,
  /** One enqueueMany call is one transaction; bigger batches hold the write lock too long. */
  enqueueBatchMax: 10_000,
  /** Objects and arrays nested in one another in a payload (core/json.ts). */
  jsonDepthMax: JSON_DEPTH_MAX,
} as const;

export interface WorkerSettings {
  concurrency: number;
  leaseMs: number;
  queues: string[];
  /** How often an idle worker looks for work when nothing woke it. */
  pollIntervalMs: number;
  /**
   * Attempts claimed ahead of a free execution slot, so that a slot that frees starts its next
   * job without waiting for a claim. Each holds a lease (heartbeated) while it waits, so other
   * workers cannot take it: keep it small when jobs are slow and workers many. 0 = claim only
   * for free slots.
   */
  prefetch: number;
  /** Most jobs one claim takes. */
  claimBatchMax: number;
  /** How often leases are extended; a third of the lease leaves two tries before expiry. */
  heartbeatIntervalMs: number;
  /** The worker stops dispatching this long before its local lease deadline. */
  safetyMarginMs: number;
  /** The reclaimer waits this long past lease expiry, for clocks that disagree. */
  clockSkewToleranceMs: number;
  reclaimIntervalMs: number;
  reconcileIntervalMs: number;
  /** After `stop()`, how long in-flight attempts may run before they are aborted. */
  shutdownTimeoutMs: number;
  /** Run the reclaimer and reconciler in this worker. */
  recover: boolean;
}

export function workerSettings(input: Partial<WorkerSettings>): WorkerSettings {
  const leaseMs = input.leaseMs ?? 30_000;
  const s: WorkerSettings = {
    concurrency: input.concurrency ?? 10,
    leaseMs,
    queues: input.queues ?? ['default'],
    pollIntervalMs: input.pollIntervalMs ?? 100,
    prefetch: input.prefetch ?? 0,
    claimBatchMax: input.claimBatchMax ?? 32,
    heartbeatIntervalMs: input.heartbeatIntervalMs ?? Math.max(50, Math.floor(leaseMs / 3)),
    safetyMarginMs: input.safetyMarginMs ?? Math.min(2_000, Math.floor(leaseMs / 5)),
    clockSkewToleranceMs: input.clockSkewToleranceMs ?? 1_000,
    reclaimIntervalMs: input.reclaimIntervalMs ?? 1_000,
    reconcileIntervalMs: input.reconcileIntervalMs ?? 1_000,
    shutdownTimeoutMs: input.shutdownTimeoutMs ?? 30_000,
    recover: input.recover ?? true,
  };
  const int = (name: keyof WorkerSettings, min: number, max: number) => {
    const v = s[name] as number;
    if (!Number.isInteger(v) || v < min || v > max)
      throw new InvalidInput(
        `worker option ${name} must be an integer from ${min} to ${max}, got ${String(v)}`,
      );
  };
  int('concurrency', 1, 10_000);
  int('leaseMs', 100, 24 * 3600_000);
  int('pollIntervalMs', 1, 60_000);
  int('prefetch', 0, 10_000);
  int('claimBatchMax', 1, 1_000);
  int('heartbeatIntervalMs', 10, s.leaseMs - 1);
  int('safetyMarginMs', 0, s.leaseMs - 1);
  int('clockSkewToleranceMs', 0, 3600_000);
  int('reclaimIntervalMs', 10, 3600_000);
  int('reconcileIntervalMs', 10, 3600_000);
  int('shutdownTimeoutMs', 0, 24 * 3600_000);
  if (!Array.isArray(s.queues) || s.queues.length === 0)
    throw new InvalidInput('worker option queues must name at least one queue');
  return s;
}
