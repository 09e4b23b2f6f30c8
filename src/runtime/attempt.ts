/**
 * One attempt of one job in a worker: the dispatch boundary (invariant 3), the lease as the
 * worker sees it (monotonic clock, DESIGN §3), the outcome classification (DESIGN §4), and the
 * fenced write of the outcome, or late evidence when the worker was fenced out (invariant 7).
 */
import type { Clock, ClockTimer } from '../core/clock.js';
import { decideAfterAttempt, type AttemptOutcome } from '../core/decide.js';
import {
  CallbackFailed,
  DefiniteFailure,
  InvariantViolation,
  LeaseLost,
  ReckonError,
  errorCode,
  safeErrorInfo,
  toErrorInfo,
  type ErrorInfo,
} from '../core/errors.js';
import { encodeResult } from '../core/json.js';
import type { Logger, OperationContext, AnyOperation } from '../core/operation.js';
import { seedOf } from '../core/retry.js';
import type { JobState } from '../core/states.js';
import type { AttemptFinish, ClaimedAttempt, LeaseRef, Store } from '../store/store.js';
import type { Faults } from './faults.js';
import type { RuntimeObserver } from './observer.js';
import { silentLogger } from './observer.js';
import { DISABLED_SAFEGUARD } from '../core/unsafe.js';

export type AttemptEnd =
  | {
      kind: 'finished';
      outcome: AttemptOutcome;
      jobState: string;
      result?: unknown;
      error?: ErrorInfo;
    }
  | { kind: 'fenced'; outcome: AttemptOutcome; result?: unknown; error?: ErrorInfo };

export interface AttemptHost {
  readonly store: Store;
  readonly faults: Faults;
  readonly log: Logger;
  readonly ownerId: string;
  readonly leaseMs: number;
  readonly safetyMarginMs: number;
  readonly observer: RuntimeObserver;
  /** Time and timers (see core/clock.ts). */
  readonly clock: Clock;
  /** Called with the fenced-out outcome, to keep it as evidence (and maybe resolve UNKNOWN). */
  lateEvidence(
    claimed: ClaimedAttempt,
    outcome: AttemptOutcome,
    result: unknown,
    error: ErrorInfo | undefined,
  ): Promise<void>;
}

/** Thrown inside dispatch when the marker could not be committed: nothing was sent. */
class NotDispatched extends ReckonError {
  constructor(reason: string, cause?: unknown) {
    super('NOT_DISPATCHED', reason, { cause });
  }
}

class AttemptTimeout extends ReckonError {
  constructor(ms: number) {
    super('ATTEMPT_TIMEOUT', `attempt timed out after ${ms} ms`);
  }
}

const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

export class AttemptRun {
  readonly lease: LeaseRef;
  /** Monotonic ms; the worker's own lease deadline, never later than the store's. */
  private localDeadline: number;
  /**
   * Why this attempt must stop (lease lost, timeout, shutdown), once it must. `ctx.signal`'s
   * controller is made only when the operation reads `ctx.signal`: an AbortController and its
   * signal per attempt cost a busy worker time for operations that never look at it.
   */
  private abortReason: Error | undefined;
  private controller: AbortController | undefined;
  private watchdog: ClockTimer | undefined;
  /** Rejects the attempt's wait for execute (armed two seconds after the timeout's abort). */
  private stopWaiting: ((err: Error) => void) | undefined;
  private hardTimer: ClockTimer | undefined;
  private dispatchState: 'none' | 'marking' | 'marked' | 'refused' = 'none';
  private markerWrite: Promise<unknown> | undefined;
  private markerWriteFailed = false;
  /** Set by `abandon`; its controller, made only if an outcome write has to wait to retry. */
  private abandonedBy: Error | undefined;
  private abandonWake: AbortController | undefined;
  private finished = false;
  readonly log: Logger;

  constructor(
    private readonly host: AttemptHost,
    readonly claimed: ClaimedAttempt,
    private readonly op: AnyOperation,
    claimSentAt: number,
  ) {
    const { job, attempt } = claimed;
    this.lease = { jobId: job.id, attemptNo: attempt.attemptNo, leaseToken: attempt.leaseToken };
    // The store set expiry = its now + leaseMs, where its now >= the moment the claim was sent.
    this.localDeadline = claimSentAt + host.leaseMs;
    // The silent default builds no record: nothing to add the attempt's fields to.
    this.log =
      host.log === silentLogger
        ? silentLogger
        : {
            debug: (o, m) => host.log.debug(this.fields(o), m),
            info: (o, m) => host.log.info(this.fields(o), m),
            warn: (o, m) => host.log.warn(this.fields(o), m),
            error: (o, m) => host.log.error(this.fields(o), m),
          };
    this.armWatchdog();
  }

  private fields(o: object): object {
    const { job, attempt } = this.claimed;
    return {
      jobId: job.id,
      attemptNo: attempt.attemptNo,
      fingerprint: job.fingerprint,
      operation: job.operation,
      state: this.dispatchState === 'marked' ? 'DISPATCHED' : 'LEASED',
      ...o,
    };
  }

  get dispatched(): boolean {
    return this.dispatchState === 'marked';
  }

  get done(): boolean {
    return this.finished;
  }

  /** A heartbeat sent at `sentAt` (monotonic) extended the lease. */
  renewed(sentAt: number): void {
    this.localDeadline = Math.max(this.localDeadline, sentAt + this.host.leaseMs);
    this.armWatchdog();
  }

  /** The store says this lease is gone: stop everything that has not left yet. */
  lost(why: string): void {
    // Test-only sabotage (./unsafe.ts, NODE_ENV=test): the lease loss no longer stops the send.
    if (DISABLED_SAFEGUARD === 'dispatch-fence') return;
    this.abort(new LeaseLost(this.lease.jobId, this.lease.attemptNo, why));
  }

  abort(reason: Error): void {
    if (this.abortReason) return;
    this.abortReason = reason;
    this.controller?.abort(reason);
  }

  /** `ctx.signal`: aborted with the reason of `abort`, whether it came before or after. */
  private get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortReason) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  private leaseUsable(): boolean {
    return (
      this.abortReason === undefined &&
      this.host.clock.monotonic() < this.localDeadline - this.host.safetyMarginMs
    );
  }

  private armWatchdog(): void {
    const { clock } = this.host;
    clock.clearTimeout(this.watchdog);
    const ms = this.localDeadline - this.host.safetyMarginMs - clock.monotonic();
    this.watchdog = clock.setTimeout(
      () => {
        if (!this.leaseUsable() && !this.finished)
          this.lost('not renewed before the safety margin');
      },
      Math.max(0, ms),
      { unref: true },
    );
  }

  /**
   * Runs the operation and records the outcome. Never rejects. `onSettled` is called once the
   * operation has settled (and any marker write has answered), before the outcome is written:
   * the worker's execution slot is free from then on, while the write is still awaited here.
   */
  async run(onSettled?: () => void): Promise<AttemptEnd> {
    const { job, attempt } = this.claimed;
    const { clock } = this.host;
    const timeout = clock.setTimeout(
      () => {
        this.abort(new AttemptTimeout(this.op.timeoutMs));
        // Two seconds past the signal give well-behaved code time to settle with a real answer;
        // then the attempt stops waiting for execute (see raceTimeout).
        this.hardTimer = clock.setTimeout(
          () => {
            if (!this.stopWaiting) return;
            this.stoppedWaiting = true;
            this.stopWaiting(new AttemptTimeout(this.op.timeoutMs));
          },
          HARD_TIMEOUT_AFTER_ABORT_MS,
          { unref: true },
        );
      },
      this.op.timeoutMs,
      { unref: true },
    );
    let result: unknown;
    let failure: unknown;
    let ok = false;
    try {
      this.host.faults.hit('after-attempt-commit', this.lease);
      result = await this.raceTimeout(this.op.spec.execute(job.input, this.context()));
      ok = true;
    } catch (err) {
      failure = err;
    } finally {
      clock.clearTimeout(timeout);
      clock.clearTimeout(this.hardTimer);
      this.stopWaiting = undefined;
    }
    // A marker write still in flight decides which side of the boundary we are on.
    if (this.markerWrite) await this.markerWrite.catch(() => undefined);
    onSettled?.();
    const { outcome, error } = ok
      ? { outcome: { state: 'SUCCEEDED' } as const, error: undefined }
      : this.judge(failure);
    const end = await this.record(outcome, ok ? result : undefined, error, attempt.attemptNo);
    this.finished = true;
    clock.clearTimeout(this.watchdog);
    // An answer that came while the outcome was being written is evidence too.
    const late = this.lateAnswer;
    if (late) this.afterAbandoned(late.outcome, late.result, late.error);
    return end;
  }

  /**
   * Resolves with execute, or rejects a little after the timeout if execute ignores the signal
   * (`stopWaiting`, called by the timer that `run` arms when the timeout aborts).
   */
  private raceTimeout<T>(p: Promise<T>): Promise<T> {
    // The abandoned execute may still settle; that is late evidence, handled by the host.
    p.then(
      (r) => this.afterAbandoned({ state: 'SUCCEEDED' }, r, undefined),
      (e) => {
        const { outcome, error } = this.judge(e);
        this.afterAbandoned(outcome, undefined, error);
      },
    );
    return new Promise<T>((resolve, reject) => {
      this.stopWaiting = reject;
      p.then(resolve, reject);
    });
  }

  /** The attempt stopped waiting for execute at the hard timeout (its outcome is UNKNOWN). */
  private stoppedWaiting = false;
  /** Execute settled after the attempt stopped waiting, before its outcome was written. */
  private lateAnswer:
    { outcome: AttemptOutcome; result: unknown; error: ErrorInfo | undefined } | undefined;
  private abandonedEnd: AttemptEnd | undefined;
  /**
   * Execute settled. In time, `run` records it; after the attempt stopped waiting (hard timeout)
   * or gave up (shutdown), it is late evidence (invariant 7), handed over once the attempt's own
   * outcome is written: it may then resolve that UNKNOWN outcome.
   */
  private afterAbandoned(
    outcome: AttemptOutcome,
    result: unknown,
    error: ErrorInfo | undefined,
  ): void {
    if (!this.finished) {
      if (this.stoppedWaiting) this.lateAnswer ??= { outcome, result, error };
      return;
    }
    if (this.abandonedEnd) return;
    this.abandonedEnd = { kind: 'fenced', outcome, result, error };
    this.host
      .lateEvidence(this.claimed, outcome, result, error)
      .catch((err: unknown) =>
        this.log.error({ err: toErrorInfo(err) }, 'late evidence not recorded'),
      );
  }

  private context(): OperationContext {
    const { job, attempt } = this.claimed;
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- read by the getter below
    const run = this;
    return {
      jobId: job.id,
      attemptNo: attempt.attemptNo,
      requestKey:
        // Test-only sabotage (core/unsafe.ts, NODE_ENV=test): a retry sends a fresh key.
        DISABLED_SAFEGUARD === 'new-key-on-retry' && attempt.attemptNo > 1
          ? `${job.requestKey}~${attempt.attemptNo}`
          : job.requestKey,
      fingerprint: job.fingerprint,
      runId: job.runId,
      stepId: job.stepId,
      // A getter: the controller is made when the operation first reads it.
      get signal() {
        return run.signal;
      },
      log: this.log,
      dispatch: <T>(fn: () => Promise<T>) => this.dispatch(fn),
    };
  }

  private async dispatch<T>(fn: () => Promise<T>): Promise<T> {
    if (this.dispatchState !== 'none')
      throw new NotDispatched(
        'ctx.dispatch() may be called once per attempt: one side effect per operation',
      );
    if (typeof fn !== 'function')
      throw new NotDispatched('ctx.dispatch() takes a function that performs the side effect');
    if (!this.leaseUsable()) {
      this.dispatchState = 'refused';
      throw new NotDispatched(
        'the lease cannot be proven (expired locally, lost, or timed out); dispatch refused',
        this.abortReason,
      );
    }
    // Test-only sabotage (core/unsafe.ts, NODE_ENV=test): the side effect happens before its marker.
    const early = DISABLED_SAFEGUARD === 'marker-after-dispatch' ? await settled(fn) : undefined;
    this.host.faults.hit('lease-expired-while-alive', this.lease);
    this.dispatchState = 'marking';
    const write = this.host.store.attemptDispatchMany({ leases: [this.lease] });
    this.markerWrite = write;
    let mark;
    try {
      [mark] = await write;
    } catch (err) {
      this.dispatchState = 'refused';
      // The write may have committed without its answer reaching us: record the outcome as
      // provably not sent, which stays legal if the marker did land.
      this.markerWriteFailed = true;
      throw new NotDispatched('the dispatch marker could not be written; nothing was sent', err);
    }
    if (!mark?.ok && DISABLED_SAFEGUARD === 'dispatch-fence') {
      // Test-only sabotage (./unsafe.ts, NODE_ENV=test): send although the fence refused the marker.
      this.dispatchState = 'marked';
      return fn();
    }
    if (!mark?.ok) {
      this.dispatchState = 'refused';
      // A worker that lost its lease was stopped before it could send a second request.
      this.host.observer.duplicatePrevented({
        operation: this.op.name,
        kind: 'stale_worker_fenced',
      });
      this.lost(`store refused the dispatch marker: ${mark?.reason ?? 'no answer'}`);
      throw new NotDispatched(
        `the store refused the dispatch marker (${mark?.reason ?? 'no answer'}); nothing was sent`,
      );
    }
    this.dispatchState = 'marked';
    this.log.debug({}, 'dispatch marker committed');
    const { job } = this.claimed;
    this.host.observer.dispatched({
      operation: job.operation,
      queue: job.queue,
      queueAgeMs: mark.dispatchedAt - job.createdAt,
    });
    const pending = early ? early() : fn();
    // A `throw` fault below abandons the request; its own rejection must not crash the process.
    Promise.resolve(pending).catch(() => undefined);
    this.host.faults.hit('after-send-before-response', this.lease);
    const value = await pending;
    this.host.faults.hit('after-response-before-commit', this.lease);
    return value;
  }

  /**
   * The outcome of a failure and the error to journal. The operation's classifier is user code:
   * if it throws, nothing proves the request did not leave, so the attempt is UNKNOWN and the
   * journal keeps a `CallbackFailed` with the failure it was reading.
   */
  private judge(err: unknown): { outcome: AttemptOutcome; error: ErrorInfo } {
    try {
      return { outcome: this.classify(err), error: safeErrorInfo(err) };
    } catch (classifierError) {
      const failed = new CallbackFailed(this.op.name, 'classify', classifierError);
      this.log.error({ err: toErrorInfo(failed) }, 'the classifier threw; the attempt is UNKNOWN');
      return {
        outcome: { state: 'UNKNOWN' },
        error: { ...toErrorInfo(failed), details: { failure: safeErrorInfo(err) } },
      };
    }
  }

  /** DESIGN §4: after dispatch started, only DefiniteFailure (or the classifier) is definitive. */
  private classify(err: unknown): AttemptOutcome {
    if (!this.dispatched) {
      if (err instanceof DefiniteFailure)
        return err.retryable
          ? { state: 'FAILED_BEFORE_SEND' }
          : { state: 'FAILED', retryable: false };
      return { state: 'FAILED_BEFORE_SEND' };
    }
    if (err instanceof DefiniteFailure) return { state: 'FAILED', retryable: err.retryable };
    const custom = this.op.spec.classify?.(err);
    if (custom === 'definite-failure') return { state: 'FAILED', retryable: false };
    if (custom === 'retryable-failure') return { state: 'FAILED', retryable: true };
    if (custom === 'not-sent' || (custom === undefined && provablyNotSent(err)))
      return { state: 'FAILED_BEFORE_SEND' };
    // Test-only sabotage (./unsafe.ts, NODE_ENV=test): a blind retry of a request that may have left.
    if (DISABLED_SAFEGUARD === 'unknown-retry') return { state: 'FAILED', retryable: true };
    return { state: 'UNKNOWN' };
  }

  private reasonFor(outcome: AttemptOutcome, error: ErrorInfo | undefined): string | null {
    if (outcome.state === 'FAILED_BEFORE_SEND') {
      if (this.dispatched) return `not-sent: ${error?.code ?? error?.message ?? 'classifier'}`;
      if (this.markerWriteFailed) return 'not-sent: dispatch marker write failed';
      return this.dispatchState === 'refused'
        ? 'dispatch-refused'
        : `threw-before-dispatch${error ? `: ${error.message}` : ''}`;
    }
    if (outcome.state === 'UNKNOWN')
      return error?.code === 'ATTEMPT_TIMEOUT' ? 'timeout-after-dispatch' : 'no-definitive-answer';
    return null;
  }

  /**
   * Writes the outcome, retrying with backoff while the store fails: the write is fenced, so it
   * lands while the lease holds, or answers false once the attempt was taken over (then the
   * outcome becomes late evidence). Gives up only when the worker abandons the attempt.
   */
  private async writeOutcome(finish: AttemptFinish): Promise<boolean | 'not-recorded'> {
    let delayMs = OUTCOME_RETRY_INITIAL_MS;
    for (let tryNo = 1; ; tryNo++) {
      try {
        const [applied = false] = await this.host.store.attemptFinishMany({ finishes: [finish] });
        // After a failed try, "false" may mean that try committed but its answer was lost.
        return applied || (tryNo > 1 && (await this.outcomeLanded(finish)));
      } catch (err) {
        if (err instanceof InvariantViolation) {
          this.log.error(
            { err: toErrorInfo(err), outcome: finish.state },
            'outcome refused: broken invariant',
          );
          return 'not-recorded';
        }
        const giveUp = this.abandonedBy !== undefined;
        this.log.error(
          {
            err: toErrorInfo(err),
            outcome: finish.state,
            tryNo,
            ...(giveUp ? {} : { retryInMs: delayMs }),
          },
          giveUp
            ? 'outcome not recorded; recovery will reclaim this attempt'
            : 'outcome not recorded yet; retrying',
        );
        if (giveUp) return 'not-recorded';
        this.abandonWake ??= new AbortController();
        await this.host.clock.sleep(delayMs, this.abandonWake.signal).catch(() => undefined);
        delayMs = Math.min(delayMs * 2, OUTCOME_RETRY_MAX_MS);
      }
    }
  }

  /** Did an earlier try of this finish commit? Its event carries this worker as the actor. */
  private async outcomeLanded(finish: AttemptFinish): Promise<boolean> {
    const detail = await this.host.store.jobGet({ id: finish.lease.jobId });
    const kind = `attempt-${finish.state.toLowerCase().replaceAll('_', '-')}`;
    return (
      detail?.events.some(
        (e) =>
          e.attemptNo === finish.lease.attemptNo && e.kind === kind && e.actor === finish.actor,
      ) === true
    );
  }

  /** Worker shutdown past its timeout: abort the operation and stop retrying its outcome write. */
  abandon(reason: Error): void {
    this.abort(reason);
    this.abandonedBy = reason;
    this.abandonWake?.abort(reason);
  }

  private async record(
    outcome: AttemptOutcome,
    result: unknown,
    error: ErrorInfo | undefined,
    attemptNo: number,
  ): Promise<AttemptEnd> {
    const { job } = this.claimed;
    // A DefiniteFailure thrown before dispatch is the operation's own verdict: FAILED_BEFORE_SEND, no retry.
    const attemptState =
      outcome.state === 'FAILED' && !this.dispatched ? 'FAILED_BEFORE_SEND' : outcome.state;
    const next = decideAfterAttempt(outcome, attemptNo, {
      maxAttempts: job.maxAttempts,
      backoff: job.backoff,
      jitterSeed: seedOf(job.id),
    });
    const finish: AttemptFinish = {
      lease: this.lease,
      state: attemptState,
      reason: this.reasonFor(outcome, error),
      resultJson: outcome.state === 'SUCCEEDED' ? encodeResult(result) : null,
      error: error ?? null,
      job: {
        to: next.to,
        ...(next.delayMs !== undefined ? { delayMs: next.delayMs } : {}),
        // Same-key and review paths need no wait; a lookup waits for timeout + grace (DESIGN §3).
        ...(next.to === 'UNKNOWN'
          ? {
              checkAfterDispatchMs:
                this.op.recovery === 'lookup' ? this.op.timeoutMs + this.op.reconcile.graceMs : 0,
            }
          : {}),
      },
      actor: this.host.ownerId,
    };
    const written = await this.writeOutcome(finish);
    if (written === 'not-recorded') {
      // Given up (worker shutdown timeout, or a broken invariant): the lease will expire and the
      // reclaimer decides from the marker. What we knew is in the log.
      return { kind: 'fenced', outcome, result, error };
    }
    const applied = written;
    if (!applied && DISABLED_SAFEGUARD === 'unfenced-outcome')
      await writeUnfenced(this.host, this.claimed, next, finish).catch(() => undefined);
    if (!applied) {
      this.log.warn(
        { outcome: attemptState },
        'fenced out: the lease was taken over; keeping the outcome as late evidence',
      );
      await this.host
        .lateEvidence(this.claimed, outcome, result, error)
        .catch((err: unknown) =>
          this.log.error({ err: toErrorInfo(err) }, 'late evidence not recorded'),
        );
      return { kind: 'fenced', outcome, result, error };
    }
    this.log.info({ outcome: attemptState, jobState: next.to }, 'attempt finished');
    const { observer } = this.host;
    observer.attemptFinished({ operation: job.operation, state: attemptState });
    if (attemptState === 'UNKNOWN')
      observer.unknown({ operation: job.operation, source: 'worker' });
    if (next.to === 'SUCCEEDED' || next.to === 'FAILED') {
      observer.completed({
        operation: job.operation,
        queue: job.queue,
        state: next.to,
        ageMs: this.host.clock.now() - job.createdAt,
      });
    }
    return { kind: 'finished', outcome, jobState: next.to, result, error };
  }
}

/**
 * Outcome writes that fail (store unreachable) are retried, 100 ms doubling to 5 s: soon enough
 * that an outcome lands within a lease after a short outage, rare enough not to hammer a store
 * that is down.
 */
export const OUTCOME_RETRY_INITIAL_MS = 100;
/** After the timeout aborts `ctx.signal`, how long the attempt still waits for a real answer. */
export const HARD_TIMEOUT_AFTER_ABORT_MS = 2_000;
export const OUTCOME_RETRY_MAX_MS = 5_000;

/** For the `marker-after-dispatch` sabotage: runs `fn` to its end; replays how it ended. */
async function settled<T>(fn: () => Promise<T>): Promise<() => Promise<T>> {
  try {
    const value = await fn();
    return () => Promise.resolve(value);
  } catch (err) {
    return () => {
      throw err;
    };
  }
}

/**
 * For the `unfenced-outcome` sabotage: what a store without the lease fence on outcomes would
 * do, written through a path that has no lease to check: the fenced-out worker's outcome moves
 * the job, whoever holds it now.
 */
async function writeUnfenced(
  host: AttemptHost,
  claimed: ClaimedAttempt,
  next: { to: JobState; delayMs?: number },
  finish: AttemptFinish,
): Promise<void> {
  const now = await host.store.jobGet({ id: claimed.job.id });
  if (!now || now.job.state === next.to) return;
  await host.store.jobTransition({
    jobId: now.job.id,
    from: now.job.state,
    to: next.to,
    expectAttemptNo: now.job.attemptCount,
    ...(next.delayMs !== undefined ? { delayMs: next.delayMs } : {}),
    ...(next.to === 'SUCCEEDED' ? { resultJson: finish.resultJson } : {}),
    ...(next.to === 'FAILED' && finish.error ? { error: finish.error } : {}),
    event: {
      kind: 'unfenced-outcome',
      actor: host.ownerId,
      detail: { attemptNo: claimed.attempt.attemptNo, state: finish.state },
    },
  });
}

function provablyNotSent(err: unknown): boolean {
  const code = errorCode(err);
  return code !== undefined && NOT_SENT_CODES.has(code);
}
