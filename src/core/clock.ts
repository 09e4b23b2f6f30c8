/**
 * The one place the runtime takes time from: the wall clock, a monotonic clock for local
 * deadlines, and timers. Production uses `systemClock`; the simulator (`reckon sim`) passes a
 * virtual clock so that a seed fixes every timer of a run. Code in src/runtime reads time and
 * sets timers only through the `Clock` it was given, never through the globals.
 */

/** A pending timer of a `Clock`: opaque, cancelled with `clock.clearTimeout`. */
export interface ClockTimer {
  readonly __clockTimer: true;
}

export interface TimerOptions {
  /** The timer alone does not keep the process alive (Node's `unref`). Default false. */
  unref?: boolean;
}

export interface Clock {
  /** Wall-clock time, ms since the epoch. Judges nothing a store judges (leases use its clock). */
  now(): number;
  /** A monotonic time in ms, for deadlines this process measures itself (`performance.now()`). */
  monotonic(): number;
  setTimeout(fn: () => void, ms: number, options?: TimerOptions): ClockTimer;
  /** Cancels a pending timer; undefined or an already fired timer is fine. */
  clearTimeout(timer: ClockTimer | undefined): void;
  /** Resolves after `ms`; rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /**
   * A number in [0, 1) for jitter and fresh job ids. Absent: `Math.random` and the uuid
   * library's own randomness. The simulator gives a seeded one, so that a seed fixes the ids.
   */
  random?(): number;
}

/** `clock.random()`, or `Math.random()` for a clock without one. */
export function randomOf(clock: Clock): number {
  return clock.random ? clock.random() : Math.random();
}

type NodeTimer = ReturnType<typeof globalThis.setTimeout>;

/** The real clock: `Date.now`, `performance.now` and Node's timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimeout(fn, ms, options) {
    const t = globalThis.setTimeout(fn, ms);
    if (options?.unref) t.unref();
    return t as unknown as ClockTimer;
  },
  clearTimeout(timer) {
    if (timer !== undefined) globalThis.clearTimeout(timer as unknown as NodeTimer);
  },
  sleep(ms, signal) {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason as Error);
      const onAbort = () => {
        globalThis.clearTimeout(t);
        reject(signal!.reason as Error);
      };
      const t = globalThis.setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
};
