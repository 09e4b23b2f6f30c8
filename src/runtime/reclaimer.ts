/**
 * The reclaimer ends attempts whose lease expired (judged on the store's clock, plus the skew
 * tolerance). Without a dispatch marker the attempt provably sent nothing (invariant 4) and the
 * job may run again; with one, the attempt is UNKNOWN and goes to reconciliation (invariant 5).
 * Every write is conditional, so two reclaimers, or one that died half-way, are safe.
 */
import { decideAfterAttempt } from '../core/decide.js';
import type { AnyOperation, Logger } from '../core/operation.js';
import { seedOf } from '../core/retry.js';
import type { AttemptExpire, JobRecord, Store } from '../store/store.js';
import type { Faults } from './faults.js';
import type { RuntimeObserver } from './observer.js';
import type { JobEvent } from './events.js';

interface ReclaimerHost {
  readonly store: Store;
  readonly faults: Faults;
  readonly log: Logger;
  readonly observer: RuntimeObserver;
  operation(name: string): AnyOperation | undefined;
}

interface Notifier {
  notify(event: 'unknown' | 'failed' | 'retrying', payload: JobEvent): void;
}

/** How many expired attempts one pass takes; bounded so a pass is a short transaction. */
export const RECLAIM_BATCH_MAX = 100;

export class Reclaimer {
  private started = false;
  /** Attempts this reclaimer ended, by kind, since it was made (for tests and metrics). */
  readonly counts = { failedBeforeSend: 0, unknown: 0 };

  constructor(
    private readonly host: ReclaimerHost,
    private readonly options: { clockSkewToleranceMs: number; actor: string },
    private readonly notifier?: Notifier,
  ) {}

  /** One pass. Returns true when there may be more to do at once. */
  async runOnce(): Promise<boolean> {
    if (!this.started) {
      this.started = true;
      this.host.faults.hit('reclaimer-startup');
    }
    const { store } = this.host;
    const skewMs = this.options.clockSkewToleranceMs;
    const expired = await store.attemptExpiredList({ skewMs, limit: RECLAIM_BATCH_MAX });
    if (expired.length === 0) return false;
    const expiries = expired.map(({ job, attempt }): AttemptExpire => {
      const lease = { jobId: job.id, attemptNo: attempt.attemptNo, leaseToken: attempt.leaseToken };
      if (attempt.dispatchedAt === null) {
        const next = decideAfterAttempt(
          { state: 'FAILED_BEFORE_SEND' },
          attempt.attemptNo,
          policyOf(job),
        );
        return {
          lease,
          state: 'FAILED_BEFORE_SEND',
          reason: 'lease-expired-before-dispatch',
          job: next,
          actor: this.options.actor,
        };
      }
      return {
        lease,
        state: 'UNKNOWN',
        reason: 'lease-expired-after-dispatch',
        job: { to: 'UNKNOWN', checkAfterDispatchMs: this.checkDelay(job) },
        actor: this.options.actor,
      };
    });
    const applied = await store.attemptExpireMany({ expiries, skewMs });
    applied.forEach((ok, i) => {
      if (!ok) return;
      const e = expiries[i]!;
      const { job } = expired[i]!;
      const operation = job.operation;
      this.host.observer.leaseExpired({ operation, dispatched: e.state === 'UNKNOWN' });
      if (e.state === 'UNKNOWN') this.host.observer.unknown({ operation, source: 'reclaimer' });
      if (e.state === 'UNKNOWN') this.counts.unknown++;
      else this.counts.failedBeforeSend++;
      this.host.log.warn(
        {
          jobId: job.id,
          attemptNo: e.lease.attemptNo,
          fingerprint: job.fingerprint,
          operation: job.operation,
          state: e.job.to,
          reason: e.reason,
        },
        e.state === 'UNKNOWN'
          ? 'lease expired after dispatch: attempt UNKNOWN'
          : 'lease expired before dispatch: attempt provably not sent',
      );
      const payload: JobEvent = {
        jobId: job.id,
        attemptNo: e.lease.attemptNo,
        operation: job.operation,
        requestKey: job.requestKey,
        input: job.input,
        state: e.job.to,
      };
      if (e.job.to === 'UNKNOWN') this.notifier?.notify('unknown', payload);
      else if (e.job.to === 'FAILED') this.notifier?.notify('failed', payload);
      else this.notifier?.notify('retrying', payload);
    });
    return expired.length === RECLAIM_BATCH_MAX;
  }

  /**
   * A lookup waits for dispatched_at + timeout + grace, both as recorded with the job (DESIGN
   * §3): an operation this process does not know may have a lookup. Same-key and review need no wait.
   */
  private checkDelay(job: JobRecord): number {
    const op = this.host.operation(job.operation);
    if (op && op.recovery !== 'lookup') return 0;
    return job.timeoutMs + job.reconcileGraceMs;
  }
}

export function policyOf(job: JobRecord) {
  return { maxAttempts: job.maxAttempts, backoff: job.backoff, jitterSeed: seedOf(job.id) };
}
