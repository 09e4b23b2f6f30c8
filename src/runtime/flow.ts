/**
 * Flow control in the runtime (issue #30): `q.queues` (pause, resume, list), `q.schedules`
 * (list with the next run), the worker's limited claim and its schedule ticks. The limits
 * themselves are judged in the store (store/plan/flow.ts), across every process.
 */
import type { Clock, ClockTimer } from '../core/clock.js';
import { InvalidInput, toErrorInfo } from '../core/errors.js';
import type { FlowLimit } from '../core/flow.js';
import type { AnyOperation, Logger } from '../core/operation.js';
import { cronNextAfter, planTick, slotKey, type Schedule } from '../core/schedule.js';
import type { JobState } from '../core/states.js';
import type { ClaimedAttempt, PauseRecord, ScheduleRecord, Store } from '../store/store.js';
import type { RuntimeObserver } from './observer.js';

/** What `Queues` and `Schedules` need of the queue (`Queue` passes itself). */
export interface FlowHost {
  readonly store: Store;
  readonly log: Logger;
  readonly observer: RuntimeObserver;
}

export interface QueueInfo {
  name: string;
  /** Set while the queue is paused: who paused it, when, why. */
  paused: PauseRecord | null;
  counts: Record<JobState, number> | null;
  /** The run_at of the oldest due QUEUED job, or null. */
  oldestDueAt: number | null;
}

export interface PauseOptions {
  /** Pause an operation (its jobs in every queue) rather than a queue. */
  operation?: boolean;
  /** Who; recorded with the pause. Default `api`. */
  actor?: string;
  reason?: string;
}

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;
const REASON_LENGTH_MAX = 1_000;

export class Queues {
  constructor(private readonly q: FlowHost) {}

  /**
   * Workers stop claiming this queue's (or operation's) jobs once the pause commits; attempts
   * already leased finish under their leases. Durable; true if it was not paused already.
   */
  pause(name: string, options: PauseOptions = {}): Promise<boolean> {
    return this.set(name, true, options);
  }

  /** Claims take its jobs again; true if it was paused. */
  resume(name: string, options: PauseOptions = {}): Promise<boolean> {
    return this.set(name, false, options);
  }

  private async set(name: string, paused: boolean, o: PauseOptions): Promise<boolean> {
    const kind = o.operation ? 'operation' : 'queue';
    if (typeof name !== 'string' || !NAME_RE.test(name))
      throw new InvalidInput(
        `${kind} name ${JSON.stringify(name)} is invalid: 1-128 letters, digits, . _ : / -`,
      );
    if (
      o.reason !== undefined &&
      (typeof o.reason !== 'string' || o.reason.length > REASON_LENGTH_MAX)
    )
      throw new InvalidInput(`reason must be a string of at most ${REASON_LENGTH_MAX} characters`);
    const actor = o.actor ?? 'api';
    const changed = await this.q.store.pauseSet({
      kind,
      name,
      paused,
      actor,
      reason: o.reason ?? null,
    });
    this.q.log.info({ kind, name, actor, changed }, paused ? `${kind} paused` : `${kind} resumed`);
    return changed;
  }

  /** Every queue that has jobs or is paused, by name, with its counts and pause. */
  async list(): Promise<QueueInfo[]> {
    const [stats, pauses] = await Promise.all([this.q.store.statsGet(), this.q.store.pauseList()]);
    const byName = new Map<string, QueueInfo>();
    for (const s of stats.queues)
      byName.set(s.queue, {
        name: s.queue,
        paused: null,
        counts: s.counts,
        oldestDueAt: s.oldestDueAt,
      });
    for (const p of pauses) {
      if (p.kind !== 'queue') continue;
      const info = byName.get(p.name);
      if (info) info.paused = p;
      else byName.set(p.name, { name: p.name, paused: p, counts: null, oldestDueAt: null });
    }
    return [...byName.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Every pause in force: queues and operations. */
  paused(): Promise<PauseRecord[]> {
    return this.q.store.pauseList();
  }
}

export interface ScheduleInfo extends ScheduleRecord {
  /** The next slot after now, on the store's clock (null: the cron has no more). */
  nextRunAt: number | null;
  /** How late the oldest slot not yet judged is (0: none is due): what no worker ticked. */
  lagMs: number;
}

export class Schedules {
  constructor(private readonly q: FlowHost) {}

  /** The schedules workers have registered, with their next run. */
  async list(): Promise<ScheduleInfo[]> {
    const [records, now] = await Promise.all([
      this.q.store.scheduleList(),
      this.q.store.clockNow(),
    ]);
    return records.map((r) => {
      const owed = cronNextAfter(r.cron, r.timezone, r.lastSlotAt);
      return {
        ...r,
        nextRunAt: cronNextAfter(r.cron, r.timezone, now),
        lagMs: owed !== null && owed <= now ? now - owed : 0,
      };
    });
  }
}

/** What a worker's flow pieces need of it. */
export interface FlowWorkerHost {
  readonly store: Store;
  readonly clock: Clock;
  readonly log: Logger;
  readonly observer: RuntimeObserver;
  readonly ownerId: string;
  /** Wakes the claim loop (a rate slot freed). */
  wake(): void;
}

/**
 * The worker's claims of limited operations (store `attemptClaimLimited`). When the store says
 * when a rate slot frees, the claim loop is woken then, rather than at its next poll.
 */
export class FlowClaimer {
  readonly limits: FlowLimit[];
  /** The last claim left due jobs behind at a limit (a freed slot may take them). */
  heldLast = false;
  private timer: ClockTimer | undefined;
  private timerAt = Infinity;

  constructor(
    private readonly host: FlowWorkerHost,
    operations: AnyOperation[],
  ) {
    this.limits = operations.flatMap((op) => (op.flow ? [op.flow] : []));
  }

  async claim(p: { queues: string[]; limit: number; leaseMs: number }): Promise<ClaimedAttempt[]> {
    if (this.limits.length === 0 || p.limit <= 0) return [];
    const sentAt = this.host.clock.monotonic();
    const r = await this.host.store.attemptClaimLimited({
      ownerId: this.host.ownerId,
      queues: p.queues,
      limits: this.limits,
      limit: p.limit,
      leaseMs: p.leaseMs,
    });
    const { observer } = this.host;
    this.heldLast = r.held.some((h) => h.rate + h.concurrency > 0);
    for (const h of r.held) {
      if (h.rate > 0) observer.flowHeld?.({ operation: h.operation, limit: 'rate', jobs: h.rate });
      if (h.concurrency > 0)
        observer.flowHeld?.({ operation: h.operation, limit: 'concurrency', jobs: h.concurrency });
    }
    for (const c of r.claimed)
      observer.flowClaimed?.({
        operation: c.job.operation,
        waitMs: Math.max(0, c.attempt.leasedAt - c.job.runAt),
      });
    // The slot frees retryInMs after the store's decision, made while the claim was in flight:
    // counted from when it was sent, so that the next claim is not late by this one's round trip
    // (a claim a little early is told to retry at once; a late one loses the slot's time).
    if (r.retryInMs !== null)
      this.wakeIn(Math.max(0, r.retryInMs - (this.host.clock.monotonic() - sentAt)));
    return r.claimed;
  }

  private wakeIn(ms: number): void {
    const at = this.host.clock.monotonic() + ms;
    if (this.timer && at >= this.timerAt) return;
    this.host.clock.clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = this.host.clock.setTimeout(
      () => {
        this.timer = undefined;
        this.timerAt = Infinity;
        this.host.wake();
      },
      ms,
      { unref: true },
    );
  }

  stop(): void {
    this.host.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
  }
}

/** Longest a schedule loop sleeps between ticks, so that a newly due slot is seen soon enough. */
export const SCHEDULE_TICK_MAX_MS = 1_000;
/** Shortest sleep: a slot just passed is not ticked in a tight loop. */
const SCHEDULE_TICK_MIN_MS = 5;

/** What the schedule loop needs: the store, the clock, and enqueue of the queue. */
export interface ScheduleHost extends Omit<FlowWorkerHost, 'wake'> {
  enqueueMany(
    op: AnyOperation,
    items: { input: unknown; key: string; queue?: string }[],
  ): Promise<unknown>;
}

/**
 * Ticks schedules in a worker: each tick reads each schedule's last judged slot from the store,
 * enqueues what `planTick` says (keys name the slots, so a slot is one job however many workers
 * tick), then moves the last slot forward. A worker killed between the two leaves the slot to
 * the next tick, anyone's: its enqueue then finds the job by its key.
 */
export class ScheduleRunner {
  private registered = false;

  constructor(
    private readonly host: ScheduleHost,
    readonly schedules: Schedule[],
  ) {
    const names = new Set<string>();
    for (const s of schedules) {
      if (names.has(s.name)) throw new InvalidInput(`two schedules are named ${s.name}`);
      names.add(s.name);
    }
  }

  /** One tick of every schedule; returns how long to sleep until the next slot (ms). */
  async runOnce(): Promise<number> {
    if (!this.registered) {
      for (const s of this.schedules)
        await this.host.store.scheduleRegister({
          name: s.name,
          cron: s.cron,
          timezone: s.timezone,
          operation: s.operation.name,
        });
      this.registered = true;
    }
    const [records, now] = await Promise.all([
      this.host.store.scheduleList(),
      this.host.store.clockNow(),
    ]);
    const last = new Map(records.map((r) => [r.name, r.lastSlotAt]));
    let sleepMs = SCHEDULE_TICK_MAX_MS;
    for (const s of this.schedules) {
      await this.tick(s, last.get(s.name) ?? now, now);
      const next = s.nextAfter(now);
      if (next !== null) sleepMs = Math.min(sleepMs, next - now);
    }
    return Math.max(SCHEDULE_TICK_MIN_MS, sleepMs);
  }

  private async tick(s: Schedule, lastSlot: number, now: number): Promise<void> {
    const plan = planTick(s, lastSlot, now);
    if (plan.lastSlot === lastSlot) return;
    if (plan.enqueue.length > 0)
      await this.host.enqueueMany(
        s.operation,
        plan.enqueue.map((slot) => ({
          input: s.input,
          key: slotKey(s.name, slot),
          ...(s.queue ? { queue: s.queue } : {}),
        })),
      );
    await this.host.store.scheduleAdvance({ name: s.name, lastSlotAt: plan.lastSlot });
    for (const slot of plan.enqueue)
      this.host.observer.scheduleSlot?.({
        schedule: s.name,
        outcome: 'enqueued',
        lagMs: now - slot,
      });
    if (plan.skipped > 0) {
      this.host.observer.scheduleSlot?.({
        schedule: s.name,
        outcome: 'skipped',
        lagMs: 0,
        slots: plan.skipped,
      });
      this.host.log.warn(
        { schedule: s.name, skipped: plan.skipped },
        'schedule slots missed while no worker ticked were skipped',
      );
    }
  }

  /** Ticks until `signal` aborts; errors are logged and the loop goes on. */
  async loop(signal: AbortSignal, onError: (err: unknown) => void): Promise<void> {
    while (!signal.aborted) {
      let sleepMs = SCHEDULE_TICK_MAX_MS;
      try {
        sleepMs = await this.runOnce();
      } catch (err) {
        this.host.log.error({ err: toErrorInfo(err) }, 'schedule tick failed');
        onError(err);
      }
      await this.host.clock.sleep(sleepMs, signal).catch(() => undefined);
    }
  }
}
