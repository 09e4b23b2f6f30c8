/**
 * The queue API (DESIGN §5): enqueue, inspect, cancel, review, and make workers.
 */
import { EventEmitter } from 'node:events';
import { v7 as uuidv7 } from 'uuid';
import {
  InvalidInput,
  JobNotFound,
  JobStateConflict,
  UnknownOperation,
  safeMessage,
} from '../core/errors.js';
import { randomOf, systemClock, type Clock } from '../core/clock.js';
import { encodePayload, fingerprintOf, sha256Hex, type Json } from '../core/json.js';
import {
  approvalOf,
  isOperation,
  type Logger,
  type Operation,
  type AnyOperation,
} from '../core/operation.js';
import type { JobState } from '../core/states.js';
import { isJobState } from '../core/states.js';
import type { JobDetail, JobInsert, JobInsertResult, JobRecord, Store } from '../store/store.js';
import { Approvals } from './approvals.js';
import { noopObserver, safeLogger, silentLogger, type RuntimeObserver } from './observer.js';
import { Faults } from './faults.js';
import { Reclaimer } from './reclaimer.js';
import { Review } from './review.js';
import { LIMITS } from './settings.js';
import { Worker, type WorkerOptions } from './worker.js';
import {
  OutcomeWaiters,
  outcomeOf,
  waitOptions,
  type CallOutcome,
  type WaitOptions,
} from './outcomes.js';

export interface QueueOptions {
  /** Operations known by name, for `enqueue('name', …)` and the CLI. */
  operations?: AnyOperation[];
  payloadBytesMax?: number;
  requestKeyLengthMax?: number;
  logger?: Logger;
  /** Recorded as the actor of enqueue events. */
  actor?: string;
  faults?: Faults;
  /** Receives what the runtime does, for metrics (see `Metrics` in reckon's observe module). */
  observer?: RuntimeObserver;
  /** How often `call`/`waitFor` waiters poll the store besides its notifications (ms). Default 1000. */
  outcomePollMs?: number;
  /**
   * Where the runtime takes time and timers from. Default the real clock; the simulator passes a
   * virtual one (and `openQueue` gives the same clock to a SQLite store it opens).
   */
  clock?: Clock;
}

export interface EnqueueOptions {
  /** The request key: one side effect. Default: derived from the job id. */
  key?: string;
  /** A step of an agent run: the key is `${runId}:${stepId}`. */
  runId?: string;
  stepId?: string;
  /** Run no earlier than this (a Date or ms since the epoch). */
  runAt?: Date | number;
  /** Run no earlier than this many ms from now (store clock). */
  delayMs?: number;
  /** Higher runs first; -1000 to 1000. Default 0. */
  priority?: number;
  queue?: string;
  /**
   * PostgreSQL only (the outbox pattern): your `pg` Client or PoolClient, with a transaction open
   * on it. The job is written in that transaction and exists iff it commits. For `enqueueMany`,
   * pass it once for the batch: `enqueueMany(op, items, { transaction })`.
   */
  transaction?: unknown;
}

/** `q.call`'s options: where the job goes (as for enqueue) and how long to wait for its outcome. */
export type CallOptions = Omit<EnqueueOptions, 'transaction'> & WaitOptions;

/** What enqueue returns: the job as stored, and whether this call created it. */
export type EnqueuedJob = JobRecord & { deduplicated: boolean };

export interface JobsQuery {
  state?: JobState | JobState[];
  queue?: string;
  operation?: string;
  limit?: number;
  beforeId?: string;
}

/** A job id from the clock's time and randomness (a seeded clock: the same ids every run). */
function clockUuid(clock: Clock): string {
  const random = new Uint8Array(16);
  for (let i = 0; i < 16; i++) random[i] = Math.floor(randomOf(clock) * 256);
  return uuidv7({ msecs: clock.now(), random });
}

const QUEUE_RE = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$/;

export class Queue {
  readonly store: Store;
  readonly review: Review;
  /** Jobs of operations defined with `approval`: list them, approve or deny. */
  readonly approvals: Approvals;
  readonly log: Logger;
  readonly faults: Faults;
  readonly observer: RuntimeObserver;
  /** Time and timers of this queue, its workers and its loops (see `Clock`). */
  readonly clock: Clock;
  /** Local wake-ups: workers of this queue pick up new work without waiting for a poll. */
  readonly notifier = new EventEmitter();
  private readonly operations = new Map<string, AnyOperation>();
  private readonly payloadBytesMax: number;
  private readonly keyLengthMax: number;
  private readonly actor: string;
  private readonly workers = new Set<Worker>();
  private closed = false;
  private stopObservingCommits: (() => void) | undefined;
  private readonly outcomes: OutcomeWaiters;

  constructor(store: Store, options: QueueOptions = {}) {
    this.store = store;
    this.log = safeLogger(options.logger);
    this.faults = options.faults ?? Faults.fromEnv();
    this.observer = options.observer ?? noopObserver;
    this.clock = options.clock ?? systemClock;
    this.payloadBytesMax = options.payloadBytesMax ?? LIMITS.payloadBytesMax;
    this.keyLengthMax = options.requestKeyLengthMax ?? LIMITS.requestKeyLengthMax;
    this.actor = options.actor ?? 'api';
    if (!Number.isInteger(this.payloadBytesMax) || this.payloadBytesMax < 1)
      throw new InvalidInput('payloadBytesMax must be a positive integer (bytes)');
    for (const op of options.operations ?? []) this.register(op);
    this.review = new Review(this);
    const pollMs = options.outcomePollMs;
    if (pollMs !== undefined && (!Number.isInteger(pollMs) || pollMs < 1 || pollMs > 3_600_000))
      throw new InvalidInput('outcomePollMs must be an integer from 1 to 3600000 (ms)');
    this.outcomes = new OutcomeWaiters(store, {
      log: this.log,
      clock: this.clock,
      ...(pollMs !== undefined ? { pollMs } : {}),
      ...(this.observer.callWaiters
        ? { onCount: this.observer.callWaiters.bind(this.observer) }
        : {}),
    });
    this.approvals = new Approvals(this);
    this.notifier.setMaxListeners(0);
    const storeCommit = this.observer.storeCommit?.bind(this.observer);
    if (storeCommit && store.onCommit)
      this.stopObservingCommits = store.onCommit((c) =>
        storeCommit({ store: store.kind, write: c.write, callers: c.callers, ms: c.ms }),
      );
  }

  register(op: AnyOperation): void {
    if (!isOperation(op))
      throw new InvalidInput('register() takes an operation made by defineOperation()');
    const existing = this.operations.get(op.name);
    if (existing && existing !== op)
      throw new InvalidInput(`two different operations are named ${op.name}`);
    this.operations.set(op.name, op);
  }

  operation(name: string): AnyOperation | undefined {
    return this.operations.get(name);
  }

  /** Durably enqueues one job; resolves once it survives a crash of every process (invariant 1). */
  async enqueue<I>(
    op: Operation<I, unknown> | string,
    input: I,
    options: EnqueueOptions = {},
  ): Promise<EnqueuedJob> {
    const { transaction, ...item } = options ?? {};
    const [job] = await this.enqueueMany(op, [{ input, ...item }], { transaction });
    return job!;
  }

  /** One durable batch: all jobs are accepted, or (on a conflict or bad input) none is. */
  async enqueueMany<I>(
    op: Operation<I, unknown> | string,
    items: (Omit<EnqueueOptions, 'transaction'> & { input: I })[],
    batch: { transaction?: unknown } = {},
  ): Promise<EnqueuedJob[]> {
    this.assertOpen();
    const operation = this.resolve(op);
    if (!Array.isArray(items))
      throw new InvalidInput('enqueueMany takes an array of { input, key?, … }');
    if (items.length > LIMITS.enqueueBatchMax)
      throw new InvalidInput(
        `enqueueMany takes at most ${LIMITS.enqueueBatchMax} jobs per call, got ${items.length}`,
      );
    if (items.length === 0) return [];
    const inserts = items.map((item, i) =>
      this.prepare(operation, item, items.length > 1 ? `jobs[${i}]` : 'input'),
    );
    const keys = new Set<string>();
    for (const j of inserts) {
      if (keys.has(j.requestKey))
        throw new InvalidInput(`the batch names request key ${JSON.stringify(j.requestKey)} twice`);
      keys.add(j.requestKey);
    }
    if (items.some((item) => (item as EnqueueOptions)?.transaction !== undefined))
      throw new InvalidInput(
        'pass the transaction once for the batch: enqueueMany(op, items, { transaction })',
      );
    // Idle workers of this process may take the fresh jobs in the enqueue's own commit (not in a
    // transaction of the caller's: its jobs exist only if the caller commits).
    const offers = batch.transaction === undefined ? this.handOffOffers(inserts) : undefined;
    let results: JobInsertResult[];
    try {
      results = await this.store.jobInsertMany({
        jobs: inserts,
        actor: this.actor,
        ...(batch.transaction !== undefined ? { transaction: batch.transaction } : {}),
      });
    } catch (err) {
      if (offers) for (const o of offers) o.worker.handOffSettled(undefined, o.sentAt);
      throw err;
    }
    let handed = 0;
    if (offers)
      for (const o of offers) {
        const r = results[o.index]!;
        const claimed = r.created ? r.claimed : undefined;
        if (claimed) handed++;
        o.worker.handOffSettled(claimed, o.sentAt);
      }
    // A silent logger is the default: no record is built for it (one per job of a batch).
    const logging = this.log !== silentLogger;
    for (const r of results) {
      this.observer.enqueued({
        operation: r.job.operation,
        queue: r.job.queue,
        created: r.created,
      });
      if (logging)
        this.log.info(
          {
            jobId: r.job.id,
            attemptNo: r.job.attemptCount,
            fingerprint: r.job.fingerprint,
            operation: r.job.operation,
            state: r.job.state,
            deduplicated: !r.created,
          },
          r.created ? 'job enqueued' : 'enqueue deduplicated by request key',
        );
    }
    if (handed < results.length) this.notifier.emit('enqueued', operation.name);
    // The store's records are this call's own: marked in place, not copied.
    return results.map((r) => {
      const job = r.job as EnqueuedJob;
      job.deduplicated = !r.created;
      return job;
    });
  }

  /** Offers each new job, in order, to the first running worker of this queue object that takes it. */
  private handOffOffers(
    inserts: JobInsert[],
  ): { worker: Worker; index: number; sentAt: number }[] | undefined {
    if (this.workers.size === 0 || !this.store.capabilities.handOff) return undefined;
    let offers: { worker: Worker; index: number; sentAt: number }[] | undefined;
    inserts.forEach((j, index) => {
      if (j.approval) return;
      for (const worker of this.workers) {
        const lease = worker.handOffOffer(j.queue, j.operation);
        if (!lease) continue;
        j.leaseTo = lease;
        // Read before the statement is sent: the local deadline is never later than the store's.
        (offers ??= []).push({ worker, index, sentAt: this.clock.monotonic() });
        return;
      }
    });
    return offers;
  }

  private resolve(op: AnyOperation | string): AnyOperation {
    if (typeof op === 'string') {
      const found = this.operations.get(op);
      if (!found) throw new UnknownOperation(op, [...this.operations.keys()]);
      return found;
    }
    if (!isOperation(op))
      throw new InvalidInput(
        'enqueue takes an operation made by defineOperation(), or a registered operation name',
      );
    const known = this.operations.get(op.name);
    if (known && known !== op)
      throw new InvalidInput(`another operation named ${op.name} is registered with this queue`);
    return op;
  }

  private prepare(
    op: AnyOperation,
    item: EnqueueOptions & { input: unknown },
    what: string,
  ): JobInsert {
    if (typeof item !== 'object' || item === null)
      throw new InvalidInput(`${what}: each item is { input, key?, … }`);
    let input: unknown = item.input;
    if (op.parseInput) {
      try {
        input = op.parseInput(input);
      } catch (err) {
        // The input schema's error names the field: kept, with where it was.
        if (err instanceof InvalidInput && op.spec.input)
          throw new InvalidInput(`${what} rejected by ${op.name}: ${err.message}`, err.path);
        throw new InvalidInput(
          `${what} rejected by ${op.name}.validate: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
    }
    // Stored as canonical JSON: without a fingerprint function, the fingerprint is the hash of
    // the stored text; with one, it sees the input as the operation will (parsed from the text).
    const inputJson = encodePayload(input, what, this.payloadBytesMax);
    const fingerprint = op.spec.fingerprint
      ? this.userFingerprint(op, inputJson, what)
      : sha256Hex(inputJson);
    const approval = approvalOf(op, input);
    const id = this.clock.random ? clockUuid(this.clock) : uuidv7();
    const requestKey = this.requestKeyOf(item, id, what);
    const queue = item.queue ?? 'default';
    if (typeof queue !== 'string' || !QUEUE_RE.test(queue))
      throw new InvalidInput(
        `${what}: queue ${JSON.stringify(queue)} is invalid: 1-64 letters, digits, . _ : / -`,
      );
    const priority = item.priority ?? 0;
    if (!Number.isInteger(priority) || priority < -1000 || priority > 1000)
      throw new InvalidInput(`${what}: priority must be an integer from -1000 to 1000`);
    const delayMs = item.delayMs ?? 0;
    if (!Number.isFinite(delayMs) || delayMs < 0)
      throw new InvalidInput(`${what}: delayMs must be a number >= 0`);
    let runAt: number | null = null;
    if (item.runAt !== undefined) {
      runAt = item.runAt instanceof Date ? item.runAt.getTime() : item.runAt;
      if (typeof runAt !== 'number' || !Number.isFinite(runAt))
        throw new InvalidInput(`${what}: runAt must be a Date or ms since the epoch`);
      // The journal keeps whole milliseconds (PostgreSQL refused a fraction with a raw error).
      runAt = Math.round(runAt);
    }
    return {
      id,
      queue,
      operation: op.name,
      inputJson,
      requestKey,
      fingerprint,
      runId: item.runId ?? null,
      stepId: item.stepId ?? null,
      priority,
      delayMs: Math.round(delayMs),
      runAt,
      maxAttempts: op.retry.maxAttempts,
      backoff: op.retry.backoff,
      timeoutMs: op.timeoutMs,
      reconcileGraceMs: Math.round(op.reconcile.graceMs),
      ...(approval ? { approval: { ...approval, expiresInMs: op.approvalTimeoutMs } } : {}),
    };
  }

  /** The operation's own fingerprint function is user code: a throw is the caller's bad input. */
  private userFingerprint(op: AnyOperation, inputJson: string, what: string): string {
    let identity: unknown;
    try {
      identity = op.spec.fingerprint!(JSON.parse(inputJson) as Json);
    } catch (err) {
      throw new InvalidInput(`${what}: ${op.name}.fingerprint threw: ${safeMessage(err)}`);
    }
    return fingerprintOf(identity, `${what}: what ${op.name}.fingerprint returned`);
  }

  private requestKeyOf(item: EnqueueOptions, id: string, what: string): string {
    const hasRun = item.runId !== undefined || item.stepId !== undefined;
    if (hasRun && item.key !== undefined)
      throw new InvalidInput(`${what}: give either key or runId+stepId, not both`);
    let key: string;
    if (hasRun) {
      this.checkKeyPart(item.runId, 'runId', what);
      this.checkKeyPart(item.stepId, 'stepId', what);
      key = `${item.runId}:${item.stepId}`;
    } else if (item.key !== undefined) {
      this.checkKeyPart(item.key, 'key', what);
      key = item.key;
    } else {
      key = `job:${id}`;
    }
    if (key.length > this.keyLengthMax)
      throw new InvalidInput(
        `${what}: request key is ${key.length} characters, over the limit of ${this.keyLengthMax}`,
      );
    return key;
  }

  private checkKeyPart(value: unknown, name: string, what: string): void {
    if (typeof value !== 'string') throw new InvalidInput(`${what}: ${name} must be a string`);
    if (value.length === 0)
      throw new InvalidInput(`${what}: ${name} is empty; a request key names one side effect`);
    if (value.length > this.keyLengthMax)
      throw new InvalidInput(
        `${what}: ${name} is ${value.length} characters, over the limit of ${this.keyLengthMax}`,
      );
    // eslint-disable-next-line no-control-regex
    if (/[\u0000-\u001f\u007f]/.test(value))
      throw new InvalidInput(`${what}: ${name} contains control characters`);
  }

  /**
   * Enqueues the job, or attaches to the job its request key already names (same operation and
   * fingerprint; another is `RequestKeyConflict`), and waits for its outcome, as seen from any
   * process. Rejects with `OutcomePending` when the wait ends before an outcome (the job goes on).
   */
  async call<I, O>(
    op: Operation<I, O> | string,
    input: I,
    options: CallOptions = {},
  ): Promise<CallOutcome<O>> {
    this.assertOpen();
    const timeoutMs = waitOptions(options, 'call');
    const { timeoutMs: _t, signal, ...enqueue } = options;
    if ((enqueue as EnqueueOptions).transaction !== undefined)
      throw new InvalidInput(
        'call: a transaction is not supported (the job must commit before the wait)',
      );
    // An aborted caller starts nothing.
    signal?.throwIfAborted();
    const job = await this.enqueue(op, input, enqueue);
    const known = outcomeOf(job);
    if (known) return known as CallOutcome<O>;
    return (await this.outcomes.wait(job.id, timeoutMs, signal)) as CallOutcome<O>;
  }

  /** Waits for a known job's outcome, as `call` does (`JobNotFound` for an id that does not exist). */
  async waitFor<O = Json>(jobId: string, options: WaitOptions = {}): Promise<CallOutcome<O>> {
    this.assertOpen();
    if (typeof jobId !== 'string' || jobId.length === 0)
      throw new InvalidInput('waitFor: job id must be a non-empty string');
    const timeoutMs = waitOptions(options, 'waitFor');
    return (await this.outcomes.wait(jobId, timeoutMs, options?.signal)) as CallOutcome<O>;
  }

  /** The job with its attempts and events, or null. */
  async job(id: string): Promise<JobDetail | null> {
    this.assertOpen();
    if (typeof id !== 'string' || id.length === 0)
      throw new InvalidInput('job id must be a non-empty string');
    return this.store.jobGet({ id });
  }

  async jobs(query: JobsQuery = {}): Promise<JobRecord[]> {
    this.assertOpen();
    const states =
      query.state === undefined
        ? undefined
        : Array.isArray(query.state)
          ? query.state
          : [query.state];
    for (const s of states ?? [])
      if (!isJobState(s)) throw new InvalidInput(`unknown job state ${JSON.stringify(s)}`);
    const limit = query.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
      throw new InvalidInput('limit must be an integer from 1 to 10000');
    return this.store.jobList({
      states,
      queue: query.queue,
      operation: query.operation,
      limit,
      beforeId: query.beforeId,
    });
  }

  /** Cancels a job that has not dispatched its request. */
  async cancel(id: string, options: { actor?: string; reason?: string } = {}): Promise<JobRecord> {
    this.assertOpen();
    const r = await this.store.jobCancel({
      id,
      actor: options.actor ?? this.actor,
      reason: options.reason ?? 'cancelled',
    });
    if (!r) throw new JobNotFound(id);
    // Awaiting approval: cancelled the way a denial is, by a write conditional on that state.
    if (!r.cancelled && r.job.state === 'AWAITING_APPROVAL')
      return this.approvals.cancel(id, options.actor ?? this.actor, options.reason ?? 'cancelled');
    if (!r.cancelled)
      throw new JobStateConflict(`job ${id} cannot be cancelled: ${r.why}`, r.job.state);
    this.log.info(
      {
        jobId: id,
        attemptNo: r.job.attemptCount,
        fingerprint: r.job.fingerprint,
        operation: r.job.operation,
        state: r.job.state,
      },
      'job cancelled',
    );
    return r.job;
  }

  worker(options: WorkerOptions): Worker {
    this.assertOpen();
    for (const op of options.operations) this.register(op);
    const w = new Worker(this, options);
    this.workers.add(w);
    w.once('stopped', () => this.workers.delete(w));
    return w;
  }

  /** A reclaimer not tied to a worker, for tests (`runOnce`) and `reckon` tools. */
  reclaimer(options: { clockSkewToleranceMs?: number } = {}): Reclaimer {
    return new Reclaimer(this, {
      clockSkewToleranceMs: options.clockSkewToleranceMs ?? 1_000,
      actor: `reclaimer:${process.pid}`,
    });
  }

  knownOperations(): AnyOperation[] {
    return [...this.operations.values()];
  }

  /** Stops this queue's workers (gracefully) and closes the store. */
  async close(): Promise<void> {
    if (this.closed) return;
    await Promise.all([...this.workers].map((w) => w.stop()));
    this.closed = true;
    await this.outcomes.close();
    this.stopObservingCommits?.();
    await this.store.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new InvalidInput('this queue is closed');
  }
}
