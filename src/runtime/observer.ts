/**
 * What the runtime reports as it works, for metrics. The runtime calls these after each fact
 * is durable; `src/observe/metrics.ts` turns them into Prometheus series. Gauges that describe
 * the store (queue depth, UNKNOWN counts) are not here: they are read from the store, so they
 * are right across many worker processes.
 */
import { safeMessage } from '../core/errors.js';
import type { Logger } from '../core/operation.js';

export type DuplicatePreventionKind =
  'enqueue_dedup' | 'lookup_found' | 'stale_worker_fenced' | 'same_key_retry';
export type ReconcilePath = 'lookup' | 'same-key' | 'late-worker' | 'operator' | 'review';

export interface RuntimeObserver {
  enqueued(e: { operation: string; queue: string; created: boolean }): void;
  /** The dispatch marker committed; `queueAgeMs` since the job was enqueued. */
  dispatched(e: { operation: string; queue: string; queueAgeMs: number }): void;
  /** An attempt's outcome was recorded by its worker. */
  attemptFinished(e: { operation: string; state: string }): void;
  /** The job reached SUCCEEDED or FAILED with a confirmed outcome; `ageMs` since enqueue. */
  completed(e: {
    operation: string;
    queue: string;
    state: 'SUCCEEDED' | 'FAILED';
    ageMs: number;
  }): void;
  /** An attempt became UNKNOWN. */
  unknown(e: { operation: string; source: 'worker' | 'reclaimer' }): void;
  leaseExpired(e: { operation: string; dispatched: boolean }): void;
  /** An UNKNOWN attempt was resolved (or sent to review); `latencyMs` since it became UNKNOWN. */
  reconciled(e: {
    operation: string;
    path: ReconcilePath;
    resolution: string;
    latencyMs: number;
  }): void;
  duplicatePrevented(e: { operation: string; kind: DuplicatePreventionKind }): void;
  /**
   * Optional: a commit of writes that callers of this process shared (group commit), from the
   * store (`Store.onCommit`): which kind of write, how many calls it answered, how long it took.
   */
  storeCommit?(e: { store: string; write: string; callers: number; ms: number }): void;
  /** Optional: outstanding `call`/`waitFor` waits of this queue went up (+1) or down (-1). */
  callWaiters?(delta: 1 | -1): void;
  /** Optional: a limited claim left due jobs of an operation behind, held by a limit (issue #30). */
  flowHeld?(e: { operation: string; limit: 'rate' | 'concurrency'; jobs: number }): void;
  /** Optional: a job of a limited operation was claimed `waitMs` after it was due. */
  flowClaimed?(e: { operation: string; waitMs: number }): void;
  /**
   * Optional: a schedule's slot was enqueued (`lagMs` after its time), or `slots` slots were
   * skipped as missed (`lagMs` 0).
   */
  scheduleSlot?(e: {
    schedule: string;
    outcome: 'enqueued' | 'skipped';
    lagMs: number;
    slots?: number;
  }): void;
}

export const noopObserver: RuntimeObserver = {
  enqueued: () => undefined,
  dispatched: () => undefined,
  attemptFinished: () => undefined,
  completed: () => undefined,
  unknown: () => undefined,
  leaseExpired: () => undefined,
  reconciled: () => undefined,
  duplicatePrevented: () => undefined,
};

export const silentLogger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/**
 * The user's logger, made unable to break what it reports on: a logger that throws (a full
 * disk, a bug) loses that line, written once to stderr instead; the worker goes on.
 */
export function safeLogger(logger: Logger | undefined): Logger {
  if (!logger || logger === silentLogger) return silentLogger;
  let warned = false;
  const guard =
    (level: keyof Logger) =>
    (obj: object, msg?: string): void => {
      try {
        logger[level](obj, msg);
      } catch (err) {
        if (warned) return;
        warned = true;
        process.stderr.write(
          `reckon: the logger threw (${safeMessage(err)}); its lines are dropped while it does\n`,
        );
      }
    };
  return { debug: guard('debug'), info: guard('info'), warn: guard('warn'), error: guard('error') };
}
