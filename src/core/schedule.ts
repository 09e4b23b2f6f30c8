/**
 * Schedules (DESIGN §5): a cron expression in a time zone, each occurrence (a slot) enqueued as
 * one job of an operation, exactly once however many workers tick: the job's request key names
 * the schedule and the slot (`schedule:<name>:<slot ISO>`), so a second enqueue of a slot is a
 * recorded dedup, never a second job. What a tick enqueues is decided here, purely.
 */
import { Cron } from 'croner';
import { InvalidSchedule } from './errors.js';
import type { AnyOperation } from './operation.js';

/** Slots missed while nothing ticked: skipped, or the latest `catchUp` of them enqueued. */
export type MissedPolicy = 'skip' | { catchUp: number };

export interface ScheduleSpec<I = unknown> {
  /** Unique; letters, digits, `.`, `_`, `-`, `/`. Part of every slot's request key. */
  name: string;
  /** Five fields (minute precision) or six (seconds first), as croner reads them. */
  cron: string;
  /** IANA time zone the cron is read in (e.g. `Europe/Paris`). Default UTC. */
  timezone?: string;
  operation: AnyOperation;
  /** The input of every slot's job (validated like any enqueue). */
  input: I;
  queue?: string;
  /** Default 'skip'. */
  missed?: MissedPolicy;
  /**
   * A slot enqueued later than this after its time counts as missed (handled by `missed`).
   * Default `SCHEDULE_LATE_MAX_MS`.
   */
  lateMaxMs?: number;
}

export interface Schedule {
  readonly name: string;
  readonly cron: string;
  readonly timezone: string | null;
  readonly operation: AnyOperation;
  readonly input: unknown;
  readonly queue: string | undefined;
  readonly missed: MissedPolicy;
  readonly lateMaxMs: number;
  /** The first slot strictly after `afterMs` (ms since the epoch), or null if none. */
  nextAfter(afterMs: number): number | null;
  readonly __reckonSchedule: true;
}

/** A minute: a worker busy or restarting for less still enqueues the slot it owed. */
export const SCHEDULE_LATE_MAX_MS = 60_000;
/** Most missed slots one schedule may catch up. */
export const SCHEDULE_CATCH_UP_MAX = 1_000;
/** Most slots one tick walks: a tick after a long outage stops here (the rest are missed). */
export const SCHEDULE_SLOTS_PER_TICK_MAX = 10_000;
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;

export function defineSchedule<I>(spec: ScheduleSpec<I>): Schedule {
  const name = String(spec?.name);
  if (typeof spec?.name !== 'string' || !NAME_RE.test(spec.name))
    throw new InvalidSchedule(
      name,
      'name must be 1-128 letters, digits, . _ / -, starting with a letter or digit',
    );
  if (
    !spec.operation ||
    (spec.operation as { __reckonOperation?: unknown }).__reckonOperation !== true
  )
    throw new InvalidSchedule(name, 'operation must be an operation made by defineOperation()');
  const missed = spec.missed ?? 'skip';
  if (
    missed !== 'skip' &&
    !(
      typeof missed === 'object' &&
      Number.isInteger(missed.catchUp) &&
      missed.catchUp >= 0 &&
      missed.catchUp <= SCHEDULE_CATCH_UP_MAX
    )
  )
    throw new InvalidSchedule(
      name,
      `missed must be 'skip' or { catchUp: n } with n from 0 to ${SCHEDULE_CATCH_UP_MAX}`,
    );
  const lateMaxMs = spec.lateMaxMs ?? SCHEDULE_LATE_MAX_MS;
  if (!Number.isInteger(lateMaxMs) || lateMaxMs < 0 || lateMaxMs > 7 * 24 * 3600_000)
    throw new InvalidSchedule(name, 'lateMaxMs must be an integer from 0 to 604800000 (ms)');
  let cron: Cron;
  try {
    cron = new Cron(spec.cron, {
      paused: true,
      ...(spec.timezone ? { timezone: spec.timezone } : { timezone: 'UTC' }),
    });
    cron.nextRun();
  } catch (err) {
    throw new InvalidSchedule(
      name,
      `cron ${JSON.stringify(spec.cron)}${spec.timezone ? ` in ${spec.timezone}` : ''} is invalid: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  return Object.freeze({
    name: spec.name,
    cron: spec.cron,
    timezone: spec.timezone ?? null,
    operation: spec.operation,
    input: spec.input,
    queue: spec.queue,
    missed,
    lateMaxMs,
    nextAfter(afterMs: number): number | null {
      const next = cron.nextRun(new Date(afterMs));
      return next ? next.getTime() : null;
    },
    __reckonSchedule: true as const,
  });
}

export function isSchedule(value: unknown): value is Schedule {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { __reckonSchedule?: unknown }).__reckonSchedule === true
  );
}

/** The request key of one slot: the schedule and the slot's time. */
export function slotKey(schedule: string, slotMs: number): string {
  return `schedule:${schedule}:${new Date(slotMs).toISOString()}`;
}

export interface TickPlan {
  /** Slots to enqueue, oldest first. */
  enqueue: number[];
  /** Slots passed over as missed. */
  skipped: number;
  /** The latest slot judged (enqueued or skipped): the schedule's new `last slot`. */
  lastSlot: number;
}

/**
 * What one tick at `now` does with the slots after `lastSlot` up to `now`: those at most
 * `lateMaxMs` old are on time and enqueued; older ones were missed: skipped, or the latest
 * `catchUp` of them enqueued. Pure: the same inputs give the same plan on every worker.
 */
export function planTick(s: Schedule, lastSlot: number, now: number): TickPlan {
  const due: number[] = [];
  let at = lastSlot;
  for (let i = 0; i < SCHEDULE_SLOTS_PER_TICK_MAX; i++) {
    const next = s.nextAfter(at);
    if (next === null || next > now) break;
    due.push(next);
    at = next;
  }
  const onTime = due.filter((t) => now - t <= s.lateMaxMs);
  const missed = due.filter((t) => now - t > s.lateMaxMs);
  const catchUp = s.missed === 'skip' ? 0 : s.missed.catchUp;
  const caught = catchUp > 0 ? missed.slice(-catchUp) : [];
  return {
    enqueue: [...caught, ...onTime],
    skipped: missed.length - caught.length,
    lastSlot: due.length > 0 ? due[due.length - 1]! : lastSlot,
  };
}

/** The first slot of `cron` (in `timezone`, default UTC) strictly after `afterMs`, or null. */
export function cronNextAfter(
  cron: string,
  timezone: string | null,
  afterMs: number,
): number | null {
  try {
    const next = new Cron(cron, { paused: true, timezone: timezone ?? 'UTC' }).nextRun(
      new Date(afterMs),
    );
    return next ? next.getTime() : null;
  } catch {
    return null;
  }
}
