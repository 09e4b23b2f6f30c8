/**
 * Awaiting a job's outcome from any process (`q.call`, `q.waitFor`): what an agent's tool call
 * needs.
 *
 * One registry of waiters per queue (job id → waiters) and one store subscription, opened on the
 * first wait and closed with the queue, however many waiters there are. A notification names the
 * jobs that changed (or none: "check them all"); the states of the waited ones are then read in
 * one query. Polling (1 s with jitter, backing off to 5 s while notifications work) is the
 * fallback, so a lost notification costs latency, never an outcome.
 *
 * A wait resolves with a terminal outcome; it rejects with `OutcomePending` when its time runs
 * out or its signal aborts first: the job's state and evidence, never a guess.
 */
import { randomOf, systemClock, type Clock, type ClockTimer } from '../core/clock.js';
import {
  InvalidInput,
  JobNotFound,
  OutcomePending,
  QueueClosed,
  errorMessage,
  type ErrorInfo,
  type OutcomeEvidence,
} from '../core/errors.js';
import type { Json } from '../core/json.js';
import type { Logger } from '../core/operation.js';
import type { JobChangeSubscription, JobDetail, JobStateRow, Store } from '../store/store.js';

/** How long a wait lasts when the caller gives no `timeoutMs`. */
export const DEFAULT_WAIT_MS = 30_000;
/** The longest wait one call may ask for (setTimeout's limit, about 24.8 days). */
export const WAIT_MS_MAX = 2_147_483_647;
/** Poll interval while waiters exist; with working notifications it backs off to 5x (5 s). */
export const OUTCOME_POLL_MS = 1_000;
export const OUTCOME_POLL_MAX_MS = 5_000;
/** Ids per state read: bounded statements, however many waiters. */
const READ_CHUNK = 1_000;
/**
 * State reads in flight at once. One: on PostgreSQL they run on the listener's own connection,
 * which takes one query at a time; what changes meanwhile is read together by the next one.
 */
const READS_MAX = 1;
/** Events kept in an OutcomePending's evidence. */
const EVIDENCE_EVENTS = 5;

/** How a wait ended with an outcome. `result` and `error` are as the journal keeps them. */
export type CallOutcome<R = Json> =
  | { state: 'SUCCEEDED'; result: R; jobId: string }
  | { state: 'FAILED'; error: ErrorInfo; jobId: string }
  | { state: 'CANCELLED'; error: ErrorInfo; jobId: string };

export interface WaitOptions {
  /** How long to wait for an outcome (ms). Default 30 s; 0 answers from the current state. */
  timeoutMs?: number;
  /** Aborting it ends the wait (`OutcomePending`, with the abort reason as cause). */
  signal?: AbortSignal;
}

interface Waiter {
  jobId: string;
  resolve: (o: CallOutcome) => void;
  reject: (err: unknown) => void;
  settled: boolean;
  /** Its time ran out or its signal aborted: the answer is being read. */
  ending: boolean;
  timer: ClockTimer | undefined;
  cleanup: () => void;
}

/** Checks `timeoutMs` and `signal`; returns the wait in ms. */
export function waitOptions(o: WaitOptions | undefined, what: string): number {
  if (o !== undefined && (typeof o !== 'object' || o === null))
    throw new InvalidInput(`${what}: options must be an object`);
  const ms = o?.timeoutMs ?? DEFAULT_WAIT_MS;
  if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 0 || ms > WAIT_MS_MAX)
    throw new InvalidInput(`${what}: timeoutMs must be an integer from 0 to ${WAIT_MS_MAX} (ms)`);
  const s = o?.signal;
  if (
    s !== undefined &&
    (typeof s !== 'object' || s === null || typeof s.aborted !== 'boolean' || !('reason' in s))
  )
    throw new InvalidInput(`${what}: signal must be an AbortSignal`);
  return ms;
}

/** The outcome of a job in a terminal state, or undefined while it is not terminal. */
export function outcomeOf(row: JobStateRow): CallOutcome | undefined {
  switch (row.state) {
    case 'SUCCEEDED':
      return { state: 'SUCCEEDED', result: row.result, jobId: row.id };
    case 'FAILED':
      return {
        state: 'FAILED',
        error: row.error ?? { name: 'Error', message: 'the job failed' },
        jobId: row.id,
      };
    case 'CANCELLED':
      return {
        state: 'CANCELLED',
        error: row.error ?? { name: 'Cancelled', message: 'the job was cancelled' },
        jobId: row.id,
      };
    default:
      return undefined;
  }
}

/** What explains a pending job: its latest attempt and last events. */
export function evidenceOf(detail: JobDetail): OutcomeEvidence {
  const latest = detail.attempts.reduce<JobDetail['attempts'][number] | undefined>(
    (a, b) => (a === undefined || b.attemptNo > a.attemptNo ? b : a),
    undefined,
  );
  return {
    attempt: latest
      ? {
          attemptNo: latest.attemptNo,
          state: latest.state,
          reason: latest.reason,
          dispatchedAt: latest.dispatchedAt,
          resolution: latest.resolution,
        }
      : null,
    events: detail.events.slice(-EVIDENCE_EVENTS).map((e) => ({
      kind: e.kind,
      fromState: e.fromState,
      toState: e.toState,
      actor: e.actor,
      detail: e.detail,
      at: e.at,
    })),
  };
}

export class OutcomeWaiters {
  private readonly waiters = new Map<string, Set<Waiter>>();
  private subscription: Promise<JobChangeSubscription | undefined> | undefined;
  private subscribed = false;
  /** The subscription's own reads (see `JobChangeSubscription.jobStateMany`), once it is open. */
  private subscriptionRead: JobChangeSubscription['jobStateMany'];
  private subscriptionWatch: JobChangeSubscription['watch'];
  /** Jobs of new waits, to be watched (see `JobChangeSubscription.watch`) before their first read. */
  private readonly unwatched = new Set<string>();
  /** Ids named by notifications since the last read; `all`: check every waited job. */
  private readonly changed = new Set<string>();
  private all = false;
  private reading = 0;
  private pollTimer: ClockTimer | undefined;
  private pollMs = OUTCOME_POLL_MS;
  private closed = false;
  private count = 0;

  constructor(
    private readonly store: Store,
    private readonly o: {
      log: Logger;
      pollMs?: number;
      /** Told when outstanding waits go up or down (a metrics gauge). */
      onCount?: (delta: 1 | -1) => void;
      /** Timers of the waits and the poll. Default the real clock. */
      clock?: Clock;
    },
  ) {
    this.pollMs = o.pollMs ?? OUTCOME_POLL_MS;
    this.clock = o.clock ?? systemClock;
  }

  private readonly clock: Clock;

  /** Outstanding waits (for metrics and tests). */
  get size(): number {
    return this.count;
  }

  /** Waits for the job's outcome; `timeoutMs` already checked (see `waitOptions`). */
  async wait(jobId: string, timeoutMs: number, signal?: AbortSignal): Promise<CallOutcome> {
    if (this.closed) throw new QueueClosed(jobId);
    await this.subscribe();
    if (this.closed) throw new QueueClosed(jobId);
    return new Promise<CallOutcome>((resolve, reject) => {
      const w: Waiter = {
        jobId,
        resolve,
        reject,
        settled: false,
        ending: false,
        timer: undefined,
        cleanup: () => undefined,
      };
      // An aborted signal or no time at all: answered from what the journal says now.
      if (signal?.aborted) return void this.givingUp(w, 'aborted', signal.reason);
      if (timeoutMs === 0) return void this.givingUp(w, 'timeout');
      // Registered before the first read: a change committed in between is not missed.
      this.add(w);
      w.timer = this.clock.setTimeout(() => void this.givingUp(w, 'timeout'), timeoutMs);
      if (signal) {
        const onAbort = () => void this.givingUp(w, 'aborted', signal.reason);
        signal.addEventListener('abort', onAbort, { once: true });
        w.cleanup = () => signal.removeEventListener('abort', onAbort);
      }
      // The first read joins the others of this turn: a thousand calls, a few queries.
      if (this.subscriptionWatch) this.unwatched.add(jobId);
      this.changed.add(jobId);
      this.readChanged();
      this.schedulePoll();
    });
  }

  /** The wait is over without an outcome: OutcomePending with the job's evidence. */
  private async givingUp(w: Waiter, reason: 'timeout' | 'aborted', cause?: unknown): Promise<void> {
    // Once: a timeout and an abort may both fire.
    if (w.settled || w.ending) return;
    w.ending = true;
    // No longer woken; answered from what the journal says now.
    this.remove(w);
    this.clock.clearTimeout(w.timer);
    w.cleanup();
    let detail: JobDetail | null;
    try {
      detail = await this.store.jobGet({ id: w.jobId });
    } catch (err) {
      return this.settle(w, { err });
    }
    if (!detail) return this.settle(w, { err: new JobNotFound(w.jobId) });
    const { job } = detail;
    const outcome = outcomeOf({
      id: job.id,
      state: job.state,
      result: job.result,
      error: job.error,
    });
    if (outcome) return this.settle(w, { outcome });
    const err = new OutcomePending({
      jobId: job.id,
      state: job.state,
      evidence: evidenceOf(detail),
      reason,
      cause,
    });
    this.settle(w, { err });
  }

  private settle(w: Waiter, r: { outcome: CallOutcome } | { err: unknown }): void {
    if (w.settled) return;
    w.settled = true;
    this.remove(w);
    this.clock.clearTimeout(w.timer);
    w.cleanup();
    if ('outcome' in r) w.resolve(r.outcome);
    else w.reject(r.err);
  }

  private add(w: Waiter): void {
    let set = this.waiters.get(w.jobId);
    if (!set) this.waiters.set(w.jobId, (set = new Set()));
    set.add(w);
    this.count++;
    this.o.onCount?.(1);
  }

  private remove(w: Waiter): void {
    const set = this.waiters.get(w.jobId);
    if (!set?.delete(w)) return;
    if (set.size === 0) {
      this.waiters.delete(w.jobId);
      this.unwatched.delete(w.jobId);
    }
    this.count--;
    this.o.onCount?.(-1);
    if (this.count === 0) {
      this.clock.clearTimeout(this.pollTimer);
      this.pollTimer = undefined;
    }
  }

  /** Opens the store subscription once; a store without one (or a failed one) leaves polling. */
  private subscribe(): Promise<JobChangeSubscription | undefined> {
    this.subscription ??= (async () => {
      if (!this.store.jobChangeSubscribe) return undefined;
      try {
        const sub = await this.store.jobChangeSubscribe({
          onChange: (ids, states) => this.onChange(ids, states),
        });
        this.subscribed = true;
        this.subscriptionRead = sub.jobStateMany?.bind(sub);
        this.subscriptionWatch = sub.watch?.bind(sub);
        return sub;
      } catch (err) {
        this.o.log.warn(
          { err: errorMessage(err) },
          'outcome notifications unavailable; waiters poll instead',
        );
        return undefined;
      }
    })();
    return this.subscription;
  }

  private onChange(ids: string[], states?: JobStateRow[]): void {
    if (this.count === 0) return;
    if (ids.length === 0) this.all = true;
    // States the notification carried (committed): outcomes settle without a read, and a job
    // still pending needs none either.
    const known = new Set<string>();
    for (const row of states ?? []) {
      known.add(row.id);
      const outcome = outcomeOf(row);
      if (outcome)
        for (const w of [...(this.waiters.get(row.id) ?? [])]) this.settle(w, { outcome });
    }
    for (const id of ids) if (!known.has(id) && this.waiters.has(id)) this.changed.add(id);
    if (this.all || this.changed.size > 0) this.readChanged();
  }

  /**
   * Reads the states of the changed (or all) waited jobs: what changed while reads are in
   * flight is read together by the next one, with at most READS_MAX reads at a time.
   */
  private readChanged(): void {
    if (this.reading >= READS_MAX) return;
    this.reading++;
    void (async () => {
      try {
        while (!this.closed && (this.all || this.changed.size > 0)) {
          const ids = this.all ? [...this.waiters.keys()] : [...this.changed];
          this.all = false;
          this.changed.clear();
          // New waits' jobs are watched before they are read: a later change is then notified.
          const fresh = ids.filter((id) => this.unwatched.delete(id));
          if (fresh.length > 0) await this.watch(fresh);
          await this.check(ids);
        }
      } finally {
        this.reading--;
      }
    })();
  }

  private async watch(ids: string[]): Promise<void> {
    for (let i = 0; i < ids.length; i += READ_CHUNK) {
      try {
        await this.subscriptionWatch!({ ids: ids.slice(i, i + READ_CHUNK) });
      } catch (err) {
        // Not notified then: polling still finds the outcome.
        this.o.log.warn({ err: errorMessage(err) }, 'watching jobs for outcomes failed');
      }
    }
  }

  /** Settles the waiters of every job here that reached an outcome; true if any did. */
  private async check(ids: string[]): Promise<boolean> {
    let any = false;
    for (let i = 0; i < ids.length; i += READ_CHUNK) {
      const chunk = ids.slice(i, i + READ_CHUNK);
      let rows: JobStateRow[];
      try {
        rows = await this.read(chunk);
      } catch (err) {
        // The store is unreachable for now: the next notification or poll tries again.
        this.o.log.warn({ err: errorMessage(err) }, 'reading waited jobs failed');
        return any;
      }
      const found = new Set<string>();
      for (const row of rows) {
        found.add(row.id);
        const outcome = outcomeOf(row);
        if (!outcome) continue;
        any = true;
        for (const w of [...(this.waiters.get(row.id) ?? [])]) this.settle(w, { outcome });
      }
      // Gone from the journal while waited for (retention removed its history).
      for (const id of chunk)
        if (!found.has(id))
          for (const w of [...(this.waiters.get(id) ?? [])])
            this.settle(w, { err: new JobNotFound(id) });
    }
    return any;
  }

  private async read(ids: string[]): Promise<JobStateRow[]> {
    if (this.subscriptionRead) {
      try {
        return await this.subscriptionRead({ ids });
      } catch {
        // Its connection is down for now: the store's own read below.
      }
    }
    if (this.store.jobStateMany) return this.store.jobStateMany({ ids });
    return Promise.all(ids.map((id) => this.store.jobGet({ id }))).then((details) =>
      details.flatMap((d) =>
        d ? [{ id: d.job.id, state: d.job.state, result: d.job.result, error: d.job.error }] : [],
      ),
    );
  }

  /** The fallback: every waited job is read now and then, whatever the notifications do. */
  private schedulePoll(): void {
    if (this.pollTimer || this.closed || this.count === 0) return;
    const base = this.subscribed ? this.pollMs : (this.o.pollMs ?? OUTCOME_POLL_MS);
    const ms = base * (0.8 + randomOf(this.clock) * 0.4);
    this.pollTimer = this.clock.setTimeout(
      () => {
        this.pollTimer = undefined;
        void this.poll();
      },
      ms,
      { unref: true },
    );
  }

  private async poll(): Promise<void> {
    if (this.closed || this.count === 0) return;
    const any = await this.check([...this.waiters.keys()]);
    // Notifications are working and nothing slipped past them: poll less often.
    const base = this.o.pollMs ?? OUTCOME_POLL_MS;
    this.pollMs =
      any || !this.subscribed
        ? base
        : Math.min(this.pollMs * 2, Math.max(OUTCOME_POLL_MAX_MS, base * 5));
    this.schedulePoll();
  }

  /** Rejects every outstanding wait with QueueClosed and closes the subscription. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.clock.clearTimeout(this.pollTimer);
    for (const set of [...this.waiters.values()])
      for (const w of [...set]) this.settle(w, { err: new QueueClosed(w.jobId) });
    const sub = await this.subscription;
    await sub?.close().catch(() => undefined);
  }
}
