/**
 * The worker: claims attempts with a lease, runs them through the dispatch boundary, keeps the
 * leases alive with fenced heartbeats, and (by default) runs the reclaimer and reconciler.
 *
 * Events, each emitted after the fact is durable: 'succeeded', 'failed', 'unknown',
 * 'reconciled', 'review'; also 'fenced' (outcome kept as late evidence), 'stopped', and
 * 'error' for infrastructure errors of the loops (only when someone listens).
 */
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import { CallbackFailed, toErrorInfo, type ErrorInfo } from '../core/errors.js';
import type { AttemptOutcome } from '../core/decide.js';
import type { Logger, AnyOperation } from '../core/operation.js';
import type { ClaimedAttempt, Store } from '../store/store.js';
import { AttemptRun, type AttemptHost } from './attempt.js';
import type { Faults } from './faults.js';
import type { RuntimeObserver } from './observer.js';
import { recordLateEvidence } from './evidence.js';
import type { JobEvent } from './events.js';
import { Reclaimer } from './reclaimer.js';
import { Reconciler } from './reconciler.js';
import { Retention, retentionSettings, type RetentionOptions } from './retention.js';
import { workerSettings, type WorkerSettings } from './settings.js';

export type { JobEvent } from './events.js';

export interface WorkerOptions extends Partial<WorkerSettings> {
  operations: AnyOperation[];
  /** Identifies this worker in the journal. Default host/pid/random. */
  ownerId?: string;
  /** Deleting old terminal histories (with `recover`): 'off', or ages per state (retention.ts). */
  retention?: RetentionOptions;
}

/**
 * What a worker needs of the queue that made it (`Queue` passes itself): the worker does not
 * import the queue, so imports in src/runtime point one way (queue -> worker -> the rest).
 */
export interface WorkerHost {
  readonly store: Store;
  readonly faults: Faults;
  readonly log: Logger;
  readonly observer: RuntimeObserver;
  /** Time and timers (see core/clock.ts). */
  readonly clock: Clock;
  /** Emits 'enqueued' (operation name) for enqueues of this process. */
  readonly notifier: EventEmitter;
  /** The queue's registered operation of this name (for the reclaimer). */
  operation(name: string): AnyOperation | undefined;
  /** Ends approvals past their deadline (the worker's recovery loops run it). */
  readonly approvals: { expireOnce(actor: string): Promise<unknown> };
}

export class Worker extends EventEmitter implements AttemptHost {
  readonly settings: WorkerSettings;
  readonly ownerId: string;
  readonly store: Store;
  readonly faults: Faults;
  readonly log: Logger;
  readonly observer: RuntimeObserver;
  readonly clock: Clock;
  readonly reclaimer: Reclaimer;
  readonly reconciler: Reconciler;
  /** The retention loop, or null when retention is off. */
  readonly retention: Retention | null;
  private readonly ops = new Map<string, AnyOperation>();
  /** Every attempt this worker holds a lease for: waiting to start, executing, or finishing. */
  private readonly inFlight = new Map<string, { run: AttemptRun; done: Promise<void> }>();
  /** Claimed ahead (prefetch), waiting for an execution slot. */
  private readonly waiting: (() => void)[] = [];
  /** Operations running now (at most `concurrency`); their outcome writes do not count. */
  private executing = 0;
  private running = false;
  private stopping: Promise<void> | undefined;
  private loops: Promise<void>[] = [];
  /** Aborted when stop() begins (claim, reclaim, reconcile end) ... */
  private stopSignal = new AbortController();
  /** ... and this one once the attempts in flight are drained (heartbeats end). */
  private drainedSignal = new AbortController();
  private wake: (() => void) | undefined;
  /**
   * Set when work or a free slot appeared while the claim loop was not napping (its claim was in
   * flight): the loop then claims again at once instead of sleeping a full poll interval.
   */
  private wakePending = false;
  /**
   * The last claim took fewer jobs than it asked for: nothing else was due. A freed slot then
   * does not claim (it would find nothing, and on PostgreSQL an empty claim is still a round trip
   * and a transaction); new work does: an enqueue, a notification, a requeued job, the poll.
   */
  private drained = false;
  /** Execution slots promised to hand-offs whose enqueue statement is still running. */
  private handOffsPending = 0;
  /** Settles when no hand-off is pending (stop() waits for it before it drains). */
  private handOffsIdle: { promise: Promise<void>; resolve: () => void } | undefined;
  private subscription: { close(): Promise<void> } | undefined;
  private readonly onEnqueued = (op: string) => {
    if (this.ops.has(op)) this.workArrived();
  };

  private workArrived(): void {
    this.drained = false;
    this.wakeClaim();
  }

  /** An execution slot or a hold freed: claim, unless the last claim found the queue drained. */
  private roomFreed(): void {
    if (!this.drained) this.wakeClaim();
  }

  private wakeClaim(): void {
    if (this.wake) this.wake();
    else this.wakePending = true;
  }

  constructor(
    private readonly queue: WorkerHost,
    options: WorkerOptions,
  ) {
    super();
    if (!Array.isArray(options.operations) || options.operations.length === 0) {
      throw new TypeError('a worker needs at least one operation: q.worker({ operations: [op] })');
    }
    this.settings = workerSettings(options);
    this.ownerId =
      options.ownerId ?? `${hostname()}/${process.pid}/${randomBytes(3).toString('hex')}`;
    this.store = queue.store;
    this.faults = queue.faults;
    this.log = queue.log;
    this.observer = queue.observer;
    this.clock = queue.clock;
    for (const op of options.operations) this.ops.set(op.name, op);
    this.reclaimer = new Reclaimer(
      queue,
      {
        clockSkewToleranceMs: this.settings.clockSkewToleranceMs,
        actor: `reclaimer:${this.ownerId}`,
      },
      this,
    );
    this.reconciler = new Reconciler(queue, [...this.ops.values()], this);
    const retention = retentionSettings(options.retention);
    this.retention = retention ? new Retention(queue, retention) : null;
  }

  get leaseMs(): number {
    return this.settings.leaseMs;
  }

  get safetyMarginMs(): number {
    return this.settings.safetyMarginMs;
  }

  /** Attempts this worker holds: claimed ahead, executing, or writing their outcome. */
  get activeCount(): number {
    return this.inFlight.size;
  }

  /** Operations executing now (never more than `concurrency`). */
  get executingCount(): number {
    return this.executing;
  }

  /**
   * Most attempts held at once. Outcome writes in flight do not hold an execution slot, so
   * claims, dispatch markers and outcomes of different jobs share commits; this bound keeps a
   * slow store from piling up attempts.
   */
  private get holdMax(): number {
    return 2 * (this.settings.concurrency + this.settings.prefetch);
  }

  get isRunning(): boolean {
    return this.running;
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    if (this.store.workSubscribe) {
      try {
        // The store wakes us for work committed by any process, this one included (once each).
        this.subscription = await this.store.workSubscribe({
          queues: this.settings.queues,
          onWork: () => this.workArrived(),
        });
      } catch (err) {
        // Polling still finds the work; notifications only cut latency.
        this.reportError('subscribe', err);
      }
    }
    // A store without wake-ups (or whose subscription failed): enqueues of this queue still wake.
    if (!this.subscription) this.queue.notifier.on('enqueued', this.onEnqueued);
    this.log.info(
      { ownerId: this.ownerId, operations: [...this.ops.keys()], ...this.settings },
      'worker started',
    );
    this.stopSignal = new AbortController();
    this.drainedSignal = new AbortController();
    this.stopping = undefined;
    this.loops = [
      this.loop('claim', () => this.claimOnce(), this.settings.pollIntervalMs),
      // Heartbeats go on while stop() drains the attempts in flight.
      this.loop(
        'heartbeat',
        () => this.heartbeatOnce(),
        this.settings.heartbeatIntervalMs,
        'drained',
      ),
    ];
    if (this.settings.recover) {
      this.loops.push(
        this.loop('reclaim', () => this.reclaimer.runOnce(), this.settings.reclaimIntervalMs),
      );
      this.loops.push(
        this.loop('reconcile', () => this.reconciler.runOnce(), this.settings.reconcileIntervalMs),
      );
      const r = this.retention;
      if (r)
        this.loops.push(
          this.loop('retention', () => r.runOnce(this.stopSignal.signal), r.settings.intervalMs),
        );
      const expire = () => this.queue.approvals.expireOnce(`approvals:${this.ownerId}`);
      this.loops.push(this.loop('approvals', expire, this.settings.reclaimIntervalMs));
    }
  }

  /** Graceful: stops claiming, lets in-flight attempts finish (aborting them after shutdownTimeoutMs). */
  stop(): Promise<void> {
    if (!this.running) return this.stopping ?? Promise.resolve();
    this.stopping ??= this.shutdown();
    return this.stopping;
  }

  private async shutdown(): Promise<void> {
    this.log.info({ ownerId: this.ownerId, inFlight: this.inFlight.size }, 'worker stopping');
    this.queue.notifier.off('enqueued', this.onEnqueued);
    this.stopSignal.abort();
    // A claim in flight when stop began may still hand us attempts: wait for it (and for the
    // enqueues handing us jobs), then drain them too.
    await this.loops[0];
    await this.handOffsIdle?.promise;
    const drained = Promise.all([...this.inFlight.values()].map((f) => f.done));
    const timer = this.clock.setTimeout(() => {
      for (const { run } of this.inFlight.values())
        run.abandon(new Error('worker stopping: shutdownTimeoutMs passed'));
    }, this.settings.shutdownTimeoutMs);
    await drained;
    this.clock.clearTimeout(timer);
    this.running = false;
    this.drainedSignal.abort();
    await Promise.all(this.loops);
    this.loops = [];
    await this.subscription?.close().catch((err: unknown) => this.reportError('subscribe', err));
    this.subscription = undefined;
    this.log.info({ ownerId: this.ownerId }, 'worker stopped');
    this.emit('stopped');
  }

  /**
   * Runs `once` until stop() begins (or, for 'drained' loops, until in-flight attempts are
   * drained); `once` returns true when it should run again at once.
   */
  private async loop(
    name: string,
    once: () => Promise<unknown>,
    intervalMs: number,
    until: 'stop' | 'drained' = 'stop',
  ): Promise<void> {
    const signal = until === 'stop' ? this.stopSignal.signal : this.drainedSignal.signal;
    while (!signal.aborted) {
      let again = false;
      try {
        again = (await once()) === true;
      } catch (err) {
        this.reportError(name, err);
      }
      if (again || signal.aborted) continue;
      if (name === 'claim' && this.wakePending) {
        this.wakePending = false;
        continue;
      }
      await this.nap(intervalMs, signal, name === 'claim');
    }
  }

  /**
   * Sleeps `ms`, or until `stop` aborts, or (when `wakeable`) until `wake` is called. A plain
   * timer and callback: waking by aborting a controller built an AbortError (a DOMException, with
   * its stack) on every freed slot, a cost a busy worker felt.
   */
  private nap(ms: number, stop: AbortSignal, wakeable: boolean): Promise<void> {
    if (stop.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        this.clock.clearTimeout(timer);
        stop.removeEventListener('abort', done);
        if (this.wake === done) this.wake = undefined;
        resolve();
      };
      const timer = this.clock.setTimeout(done, ms);
      stop.addEventListener('abort', done, { once: true });
      if (wakeable) this.wake = done;
    });
  }

  /**
   * Calls each listener on its own, so that one that throws (or rejects) neither crashes the
   * worker nor keeps the next listener from running; the error is logged, emitted as 'error'
   * (when someone listens) and journaled on the job the event was about (`callback-error`).
   */
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    const listeners = this.rawListeners(event) as ((...a: unknown[]) => unknown)[];
    if (listeners.length === 0) return super.emit(event, ...args);
    for (const listener of listeners) {
      try {
        const r = listener.apply(this, args);
        if (r instanceof Promise)
          r.catch((err: unknown) => this.listenerFailed(event, args[0], err));
      } catch (err) {
        this.listenerFailed(event, args[0], err);
      }
    }
    return true;
  }

  private listenerFailed(event: string | symbol, payload: unknown, err: unknown): void {
    const job = payload as Partial<JobEvent> | undefined;
    const callback = `listener:${String(event)}`;
    const failure = new CallbackFailed(job?.operation ?? 'worker', callback, err);
    this.log.error(
      { jobId: job?.jobId, attemptNo: job?.attemptNo, err: toErrorInfo(failure) },
      'an event listener threw',
    );
    if (event !== 'error' && this.listenerCount('error') > 0) this.emit('error', failure);
    if (typeof job?.jobId !== 'string') return;
    this.store
      .eventAppendMany({
        events: [
          {
            jobId: job.jobId,
            attemptNo: job.attemptNo ?? null,
            kind: 'callback-error',
            actor: this.ownerId,
            detail: { callback, error: toErrorInfo(failure) },
          },
        ],
      })
      .catch((e: unknown) =>
        this.log.error({ err: toErrorInfo(e) }, 'listener error not journaled'),
      );
  }

  private reportError(where: string, err: unknown): void {
    this.log.error(
      { ownerId: this.ownerId, loop: where, err: toErrorInfo(err) },
      `worker ${where} loop error`,
    );
    if (this.listenerCount('error') > 0) this.emit('error', err);
  }

  // ------------------------------------------------------------------ claim

  private async claimOnce(): Promise<boolean> {
    this.wakePending = false;
    const { concurrency, prefetch, claimBatchMax } = this.settings;
    const free = Math.min(
      concurrency + prefetch - this.executing - this.waiting.length - this.handOffsPending,
      this.holdMax - this.inFlight.size - this.handOffsPending,
    );
    if (free <= 0) return false;
    // Claimed ahead and still well stocked: refill in batches, once the buffer is down to half,
    // not a job at a time as slots free (a claim costs a commit whatever its size).
    if (prefetch > 0 && this.waiting.length > prefetch / 2) return false;
    const limit = Math.min(free, claimBatchMax);
    // Started before the claim is sent, so the local deadline is never later than the store's.
    const sentAt = this.clock.monotonic();
    this.faults.hit('before-attempt-commit');
    const claimed = await this.store.attemptClaimMany({
      ownerId: this.ownerId,
      queues: this.settings.queues,
      operations: [...this.ops.keys()],
      limit,
      leaseMs: this.settings.leaseMs,
    });
    for (const c of claimed) this.hold(c, sentAt);
    this.drained = claimed.length < limit;
    this.pump();
    return (
      claimed.length === limit &&
      this.executing + this.waiting.length < concurrency + prefetch &&
      this.inFlight.size < this.holdMax
    );
  }

  /** Takes a claimed attempt: its lease is heartbeated from now on; it runs when a slot frees. */
  private hold(claimed: ClaimedAttempt, sentAt: number): void {
    const op = this.ops.get(claimed.job.operation)!;
    const run = new AttemptRun(this, claimed, op, sentAt);
    const key = `${claimed.job.id}#${claimed.attempt.attemptNo}`;
    const started = new Promise<void>((resolve) => this.waiting.push(resolve));
    let slotHeld = true;
    const freeSlot = () => {
      if (!slotHeld) return;
      slotHeld = false;
      this.executing--;
      this.pump();
      this.roomFreed();
    };
    const done = started.then(() => run.run(freeSlot)).finally(freeSlot);
    this.inFlight.set(key, {
      run,
      done: done.then(
        (end) => {
          this.inFlight.delete(key);
          // Its own outcome may have made the job due again (a retry).
          if (end.kind === 'finished' && end.jobState === 'QUEUED') this.drained = false;
          // A full hold (slow outcome writes) may have kept the claim loop from claiming.
          this.roomFreed();
          this.announce(
            claimed,
            end.kind === 'finished' ? end.jobState : null,
            end.outcome,
            end.result,
            end.error,
          );
        },
        (err: unknown) => {
          this.inFlight.delete(key);
          this.reportError('attempt', err);
        },
      ),
    });
  }

  /**
   * A hand-off: an enqueue of this process offers its fresh job to this worker, to
   * be leased in the enqueue's own commit, which saves the claim's round trip before the job
   * starts. Taken only while the worker is idle enough: running, its last claim found the queue
   * drained (nothing due was left behind), and an execution slot free, which stays promised
   * until `handOffSettled`. The store still refuses the lease if a due job of the queue ranks
   * at least as high. Returns the lease to ask for, or undefined.
   */
  handOffOffer(queue: string, operation: string): { ownerId: string; leaseMs: number } | undefined {
    if (!this.running || this.stopSignal.signal.aborted || !this.drained) return undefined;
    if (!this.ops.has(operation) || !this.settings.queues.includes(queue)) return undefined;
    const promised = this.executing + this.waiting.length + this.handOffsPending;
    if (promised >= this.settings.concurrency) return undefined;
    if (this.inFlight.size + this.handOffsPending >= this.holdMax) return undefined;
    if (this.handOffsPending++ === 0) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.handOffsIdle = { promise, resolve };
    }
    return { ownerId: this.ownerId, leaseMs: this.settings.leaseMs };
  }

  /**
   * Ends an offer: with the attempt the store leased to this worker (held and started like a
   * claimed one; `sentAt` read before the enqueue was sent), or without (the slot is free again).
   */
  handOffSettled(claimed: ClaimedAttempt | undefined, sentAt: number): void {
    if (claimed) this.hold(claimed, sentAt);
    if (--this.handOffsPending === 0) {
      this.handOffsIdle?.resolve();
      this.handOffsIdle = undefined;
    }
    this.pump();
    // Declined: the slot promised to it is free again. The job's wake-up may have found the
    // worker full (that promise counted), so a claim now takes it, unless nothing is due.
    if (!claimed) this.roomFreed();
  }

  /** Starts waiting attempts, in claim order, while execution slots are free. */
  private pump(): void {
    while (this.executing < this.settings.concurrency && this.waiting.length > 0) {
      this.executing++;
      this.waiting.shift()!();
    }
  }

  private announce(
    claimed: ClaimedAttempt,
    jobState: string | null,
    outcome: AttemptOutcome,
    result: unknown,
    error: ErrorInfo | undefined,
  ): void {
    const base: JobEvent = {
      jobId: claimed.job.id,
      attemptNo: claimed.attempt.attemptNo,
      operation: claimed.job.operation,
      requestKey: claimed.job.requestKey,
      input: claimed.job.input,
      state: jobState ?? 'FENCED',
      ...(result !== undefined ? { result } : {}),
      ...(error ? { error } : {}),
    };
    if (jobState === null) return void this.emit('fenced', base);
    if (jobState === 'SUCCEEDED') this.emit('succeeded', base);
    else if (jobState === 'FAILED') this.emit('failed', base);
    else if (jobState === 'UNKNOWN') this.emit('unknown', base);
    else if (jobState === 'NEEDS_REVIEW') this.emit('review', base);
    else if (jobState === 'QUEUED') this.emit('retrying', { ...base, attemptState: outcome.state });
  }

  // ------------------------------------------------------------------ heartbeat

  private async heartbeatOnce(): Promise<void> {
    const runs = [...this.inFlight.values()].map((f) => f.run).filter((r) => !r.done);
    if (runs.length === 0) return;
    const sentAt = this.clock.monotonic();
    const results = await this.store.attemptHeartbeatMany({
      leases: runs.map((r) => r.lease),
      leaseMs: this.settings.leaseMs,
    });
    results.forEach((r, i) => {
      const run = runs[i]!;
      if (r.ok) run.renewed(sentAt);
      else if (!run.done) {
        run.lost('heartbeat refused: lease expired or taken over');
        run.log.warn({}, 'lease lost at heartbeat');
      }
    });
  }

  // ------------------------------------------------------------------ late evidence

  lateEvidence(
    claimed: ClaimedAttempt,
    outcome: AttemptOutcome,
    result: unknown,
    error: ErrorInfo | undefined,
  ): Promise<void> {
    return recordLateEvidence(this, claimed, outcome, result, error).then((resolved) => {
      if (resolved)
        this.emit('reconciled', {
          jobId: claimed.job.id,
          attemptNo: claimed.attempt.attemptNo,
          operation: claimed.job.operation,
          requestKey: claimed.job.requestKey,
          input: claimed.job.input,
          state: resolved,
          resolution: outcome.state.toLowerCase(),
          result,
          error,
        });
    });
  }

  /** For the reconciler and reclaimer: announce what they settled. */
  notify(
    event: 'reconciled' | 'review' | 'unknown' | 'failed' | 'retrying',
    payload: JobEvent,
  ): void {
    if (event === 'retrying') this.workArrived();
    this.emit(event, payload);
  }

  operation(name: string): AnyOperation | undefined {
    return this.ops.get(name);
  }
}
