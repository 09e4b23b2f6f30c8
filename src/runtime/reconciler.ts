/**
 * Reconciliation of UNKNOWN jobs (DESIGN §4): `lookup` if the operation has one; else a retry
 * with the same request key if the downstream deduplicates by it; else NEEDS_REVIEW. An
 * inconclusive lookup is retried with backoff, then escalates to NEEDS_REVIEW.
 */
import {
  decideAfterLookup,
  decideSameKeyRetry,
  type LookupVerdict,
  type ReconcileDecision,
} from '../core/decide.js';
import type { Clock } from '../core/clock.js';
import { toErrorInfo } from '../core/errors.js';
import { encodeResult, type Json } from '../core/json.js';
import type { Logger, LookupResult, AnyOperation } from '../core/operation.js';
import { DISABLED_SAFEGUARD } from '../core/unsafe.js';
import type {
  AttemptRecord,
  ClaimedAttempt,
  JobRecord,
  JobTransition,
  Store,
} from '../store/store.js';
import { policyOf } from './reclaimer.js';
import type { RuntimeObserver } from './observer.js';
import type { JobEvent } from './events.js';

interface ReconcilerHost {
  readonly store: Store;
  readonly log: Logger;
  readonly observer: RuntimeObserver;
  readonly clock: Clock;
}

interface Notifier {
  notify(event: 'reconciled' | 'review', payload: JobEvent): void;
}

/** How many UNKNOWN jobs one pass takes. */
export const RECONCILE_BATCH_MAX = 16;

export class Reconciler {
  private readonly ops: Map<string, AnyOperation>;

  constructor(
    private readonly host: ReconcilerHost,
    operations: AnyOperation[],
    private readonly notifier?: Notifier,
  ) {
    this.ops = new Map(operations.map((o) => [o.name, o]));
  }

  /** One pass. Returns true when there may be more to do at once. */
  async runOnce(): Promise<boolean> {
    if (this.ops.size === 0) return false;
    // Hold each job long enough for its lookup to finish before another reconciler may look.
    const holdMs = Math.max(...[...this.ops.values()].map((o) => o.timeoutMs)) + 5_000;
    const due = await this.host.store.jobReconcileClaimMany({
      operations: [...this.ops.keys()],
      limit: RECONCILE_BATCH_MAX,
      holdMs,
    });
    await Promise.all(due.map((c) => this.reconcileOne(c)));
    return due.length === RECONCILE_BATCH_MAX;
  }

  private async reconcileOne({ job, attempt }: ClaimedAttempt): Promise<void> {
    const op = this.ops.get(job.operation)!;
    const policy = policyOf(job);
    let decision: ReconcileDecision;
    let verdict: LookupVerdict | undefined;
    // Test-only sabotage (core/unsafe.ts, NODE_ENV=test): every UNKNOWN resent with its key.
    const recovery = DISABLED_SAFEGUARD === 'same-key-resend' ? 'same-key' : op.recovery;
    let path: string = recovery;
    if (recovery === 'lookup') {
      if (await this.deferredToHorizon(job, attempt)) return;
      verdict = await this.lookup(op, job.requestKey, job.input, {
        jobId: job.id,
        attemptNo: attempt.attemptNo,
      });
      decision = decideAfterLookup(verdict, attempt.attemptNo, policy, {
        failuresSoFar: job.lookupFailures,
        max: op.reconcile.maxLookups,
        backoffMs: op.reconcile.lookupBackoffMs,
        backoffMaxMs: op.reconcile.lookupBackoffMaxMs,
      });
    } else if (recovery === 'same-key') {
      decision = decideSameKeyRetry(attempt.attemptNo, policy);
    } else {
      decision = { next: { to: 'NEEDS_REVIEW' } };
      path = 'review';
    }
    const t = transitionFor({ job, attempt, op, decision, verdict, path });
    const applied = await this.host.store.jobTransition(t);
    const fields = {
      jobId: job.id,
      attemptNo: attempt.attemptNo,
      fingerprint: job.fingerprint,
      operation: job.operation,
      state: t.to,
    };
    if (!applied) {
      this.host.log.debug(fields, 'reconciliation skipped: the job changed meanwhile');
      return;
    }
    if (t.to === 'UNKNOWN') {
      this.host.log.warn(
        { ...fields, lookupFailuresBefore: job.lookupFailures },
        'lookup inconclusive; will look again',
      );
      return;
    }
    this.announce({ job, attempt, t, decision, verdict, path, fields });
  }

  /** A settled reconciliation: its log line, metrics and notification. */
  private announce(p: {
    job: JobRecord;
    attempt: AttemptRecord;
    t: JobTransition;
    decision: ReconcileDecision;
    verdict: LookupVerdict | undefined;
    path: string;
    fields: Record<string, unknown>;
  }): void {
    const { job, attempt, t, decision, verdict, path, fields } = p;
    this.host.log.info(
      { ...fields, path, resolution: decision.resolution },
      t.to === 'NEEDS_REVIEW' ? 'UNKNOWN job needs review' : 'UNKNOWN job reconciled',
    );
    const operation = job.operation;
    const now = this.host.clock.now();
    const latencyMs = now - (attempt.finishedAt ?? attempt.dispatchedAt ?? now);
    this.host.observer.reconciled({
      operation,
      path: path === 'same-key' ? 'same-key' : path === 'lookup' ? 'lookup' : 'review',
      resolution: decision.resolution ?? 'needs_review',
      latencyMs,
    });
    if (verdict?.kind === 'succeeded')
      this.host.observer.duplicatePrevented({ operation, kind: 'lookup_found' });
    if (decision.resolution === 'retry')
      this.host.observer.duplicatePrevented({ operation, kind: 'same_key_retry' });
    const payload: JobEvent = {
      jobId: job.id,
      attemptNo: attempt.attemptNo,
      operation: job.operation,
      requestKey: job.requestKey,
      input: job.input,
      state: t.to,
      ...(decision.resolution ? { resolution: decision.resolution } : {}),
      ...(verdict?.kind === 'succeeded' ? { result: verdict.result } : {}),
    };
    this.notifier?.notify(t.to === 'NEEDS_REVIEW' ? 'review' : 'reconciled', payload);
  }

  /**
   * DESIGN §3: no lookup before dispatched_at + timeout + grace, as recorded with the job,
   * whatever schedule whoever marked it UNKNOWN set. An early job is deferred to its horizon
   * (no lookup failure counted). True when it was.
   */
  private async deferredToHorizon(job: JobRecord, attempt: AttemptRecord): Promise<boolean> {
    if (DISABLED_SAFEGUARD === 'lookup-before-horizon') return false;
    const horizon = lookupHorizon(job, attempt);
    const now = await this.host.store.clockNow();
    if (now >= horizon) return false;
    const applied = await this.host.store.jobTransition({
      jobId: job.id,
      from: 'UNKNOWN',
      to: 'UNKNOWN',
      expectAttemptNo: attempt.attemptNo,
      recheckDelayMs: horizon - now,
      event: {
        kind: 'lookup-deferred',
        actor: 'reconciler',
        detail: { why: 'lookup horizon (dispatchedAt + timeoutMs + reconcileGraceMs)', horizon },
      },
    });
    this.host.log.debug(
      { jobId: job.id, attemptNo: attempt.attemptNo, operation: job.operation, horizon, applied },
      'lookup deferred to its horizon',
    );
    return true;
  }

  private async lookup(
    op: AnyOperation,
    requestKey: string,
    input: unknown,
    ids: { jobId: string; attemptNo: number },
  ): Promise<LookupVerdict> {
    const ac = new AbortController();
    const { clock } = this.host;
    const timer = clock.setTimeout(
      () => ac.abort(new Error(`lookup timed out after ${op.timeoutMs} ms`)),
      op.timeoutMs,
    );
    try {
      const raw: unknown = await Promise.race([
        op.spec.lookup!(requestKey, input, {
          ...ids,
          requestKey,
          signal: ac.signal,
          log: this.host.log,
        }),
        new Promise((_, reject) =>
          ac.signal.addEventListener('abort', () => reject(ac.signal.reason as Error), {
            once: true,
          }),
        ),
      ]);
      return readLookup(raw);
    } catch (error) {
      return { kind: 'inconclusive', error };
    } finally {
      clock.clearTimeout(timer);
    }
  }
}

/** The store transition a reconciliation decision makes (a fenced UNKNOWN -> next move). */
function transitionFor(p: {
  job: JobRecord;
  attempt: AttemptRecord;
  op: AnyOperation;
  decision: ReconcileDecision;
  verdict: LookupVerdict | undefined;
  path: string;
}): JobTransition {
  const { job, attempt, op, decision, verdict, path } = p;
  const evidence = verdictEvidence(verdict);
  const why = reviewWhy(op, verdict, decision);
  return {
    jobId: job.id,
    from: 'UNKNOWN',
    to: decision.next.to,
    expectAttemptNo: attempt.attemptNo,
    ...(decision.next.delayMs !== undefined ? { delayMs: decision.next.delayMs } : {}),
    ...(decision.recheckDelayMs !== undefined ? { recheckDelayMs: decision.recheckDelayMs } : {}),
    ...(verdict?.kind === 'inconclusive' ? { lookupFailed: true } : {}),
    ...(decision.resolution
      ? {
          resolution: {
            kind: decision.resolution,
            source: path === 'lookup' ? 'lookup' : 'same-key-retry',
            evidence,
          },
        }
      : {}),
    ...(verdict?.kind === 'succeeded' ? { resultJson: encodeResult(verdict.result) } : {}),
    ...(verdict?.kind === 'failed' && decision.next.to === 'FAILED'
      ? {
          error: toErrorInfo(
            verdict.error ?? new Error('the downstream reports the request failed'),
          ),
        }
      : {}),
    event: {
      kind:
        decision.next.to === 'NEEDS_REVIEW'
          ? 'review'
          : verdict?.kind === 'inconclusive'
            ? 'lookup-inconclusive'
            : 'reconciled',
      actor: 'reconciler',
      detail: { path, ...(why ? { why } : {}), ...(verdict ? { lookup: evidence } : {}) },
    },
  };
}

/** The earliest time a lookup may run for this UNKNOWN attempt (DESIGN §3), on the store's clock. */
export function lookupHorizon(job: JobRecord, attempt: AttemptRecord): number {
  return (attempt.dispatchedAt ?? 0) + job.timeoutMs + job.reconcileGraceMs;
}

function readLookup(raw: unknown): LookupVerdict {
  const r = raw as LookupResult | null | undefined;
  if (r && r.found === false) return { kind: 'not_found' };
  if (r && r.found === true && r.outcome === 'succeeded')
    return { kind: 'succeeded', result: r.result };
  if (r && r.found === true && r.outcome === 'failed')
    return { kind: 'failed', error: r.error, retryable: r.retryable ?? false };
  return {
    kind: 'inconclusive',
    error: new Error(`lookup returned an unreadable answer: ${JSON.stringify(raw) ?? String(raw)}`),
  };
}

function verdictEvidence(v: LookupVerdict | undefined): Json {
  if (!v) return null;
  switch (v.kind) {
    case 'succeeded':
      return {
        found: true,
        outcome: 'succeeded',
        result: JSON.parse(encodeResult(v.result) ?? 'null') as Json,
      };
    case 'failed':
      return {
        found: true,
        outcome: 'failed',
        error: toErrorInfo(v.error ?? 'failed') as unknown as Json,
      };
    case 'not_found':
      return { found: false };
    case 'inconclusive':
      return { inconclusive: true, error: toErrorInfo(v.error) as unknown as Json };
  }
}

function reviewWhy(
  op: AnyOperation,
  verdict: LookupVerdict | undefined,
  d: ReconcileDecision,
): string | undefined {
  if (d.next.to !== 'NEEDS_REVIEW') return undefined;
  if (op.recovery === 'review')
    return 'the request may have left and the operation has neither a lookup nor a deduplicating downstream: a person must decide';
  if (op.recovery === 'same-key') return 'out of attempts for a same-key retry';
  if (verdict?.kind === 'inconclusive')
    return `lookup inconclusive ${op.reconcile.maxLookups} times`;
  return 'no automatic path';
}
