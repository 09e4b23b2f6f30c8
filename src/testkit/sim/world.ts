/**
 * The simulator's world: one virtual clock, one seeded random generator, and one queue of
 * events that every timer, store call and downstream message goes through. A seed therefore
 * fixes the whole run: which event comes next is decided here, never by the host's scheduler.
 *
 * Simulated processes own their events: a crashed process's events never run (its pending
 * continuations are never resumed), a frozen process's events wait until it thaws.
 */
import type { Clock, ClockTimer } from '../../core/clock.js';
import { mulberry32 } from '../../runtime/faults.js';

/** Where virtual time starts (ms since the epoch): 2024-01-01, a fixed and plausible date. */
export const SIM_EPOCH_MS = 1_704_067_200_000;

/** A simulated process: its own view of the clock, and whether it is still alive. */
export interface SimProcess {
  readonly name: string;
  /** Its wall clock minus the true time (ms), within the configured tolerance. */
  readonly skewMs: number;
  crashed: boolean;
  /** Its events wait until then (a stop-the-world pause, GC or VM freeze). */
  frozenUntil: number;
  /**
   * While set, the process is stalled until the simulator lets it go (`World.unstall`): its
   * events wait here. What it already handed to the network still goes (`goesWhileStalled`);
   * the answers wait.
   */
  stalled?: SimEvent[];
}

export interface SimEvent {
  at: number;
  /** Random order among events due at the same moment: the seed picks the interleaving. */
  tie: number;
  seq: number;
  owner: SimProcess | null;
  label: string;
  fn: () => unknown;
  cancelled: boolean;
}

/** Events ordered by (at, tie, seq). */
class EventHeap {
  private readonly items: SimEvent[] = [];

  get size(): number {
    return this.items.length;
  }

  push(e: SimEvent): void {
    const a = this.items;
    a.push(e);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(a[i]!, a[p]!)) break;
      [a[i], a[p]] = [a[p]!, a[i]!];
      i = p;
    }
  }

  pop(): SimEvent | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && before(a[l]!, a[m]!)) m = l;
        if (r < a.length && before(a[r]!, a[m]!)) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m]!, a[i]!];
        i = m;
      }
    }
    return top;
  }
}

/**
 * What a stalled process already handed to the network: its requests, and its store statements
 * but dispatch markers (a marker answered during a stall would hold the process between its
 * marker and its send, a window the README states as a limit) and the call that stalled it.
 */
function goesWhileStalled(label: string): boolean {
  if (label === 'downstream.send') return true;
  return label.startsWith('store.') && label !== 'store.attemptDispatchMany';
}

function before(x: SimEvent, y: SimEvent): boolean {
  if (x.at !== y.at) return x.at < y.at;
  if (x.tie !== y.tie) return x.tie < y.tie;
  return x.seq < y.seq;
}

/**
 * Turns of the microtask queue between two events: enough for the continuations an event
 * starts (an answer read, the next call made) to run before the next event is chosen. The run
 * never waits for the host's event loop here (a macrotask costs ~100 times more), and need not:
 * microtasks run in a fixed order, so a continuation deeper than this still runs at the same
 * point of every replay.
 */
const SETTLE_TURNS = 64;

const resolved = Promise.resolve();

async function settle(): Promise<void> {
  for (let i = 0; i < SETTLE_TURNS; i++) await resolved;
}

export class World {
  /** True time, ms since the epoch. */
  now = SIM_EPOCH_MS;
  readonly random: () => number;
  /** The readable interleaving, when asked for (`--trace`). */
  readonly trace: string[] | null;
  /** How many events ran. */
  steps = 0;
  private readonly heap = new EventHeap();
  private seq = 0;
  /** Called before each event of a live process: it may crash or freeze it first. */
  beforeStep: ((p: SimProcess) => void) | undefined;
  /** The process whose store call is executing: the store reads that process's clock. */
  caller: SimProcess | null = null;

  constructor(seed: number, trace: boolean) {
    this.random = mulberry32(seed);
    this.trace = trace ? [] : null;
  }

  /** An integer from lo to hi inclusive. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.random() * (hi - lo + 1));
  }

  chance(p: number): boolean {
    return p > 0 && this.random() < p;
  }

  log(who: SimProcess | string | null, what: string): void {
    if (!this.trace) return;
    const name = who === null ? 'world' : typeof who === 'string' ? who : who.name;
    this.trace.push(`${String(this.now - SIM_EPOCH_MS).padStart(7)} ${name.padEnd(10)} ${what}`);
  }

  schedule(delayMs: number, owner: SimProcess | null, label: string, fn: () => unknown): SimEvent {
    const e: SimEvent = {
      at: this.now + Math.max(0, delayMs),
      tie: this.random(),
      seq: this.seq++,
      owner,
      label,
      fn,
      cancelled: false,
    };
    this.heap.push(e);
    return e;
  }

  /** The store's clock: the true time as the calling process's clock reads it. */
  storeNow(): number {
    return Math.round(this.now + (this.caller?.skewMs ?? 0));
  }

  /** The clock a simulated process runs on: skewed wall time, virtual timers it owns. */
  clockOf(p: SimProcess): Clock {
    const monoBase = this.int(1_000, 1_000_000);
    return {
      now: () => Math.round(this.now + p.skewMs),
      monotonic: () => this.now - SIM_EPOCH_MS + monoBase,
      setTimeout: (fn, ms) => this.schedule(Math.ceil(ms), p, 'timer', fn) as unknown as ClockTimer,
      clearTimeout: (t) => {
        if (t) (t as unknown as SimEvent).cancelled = true;
      },
      sleep: (ms, signal) =>
        new Promise<void>((resolve, reject) => {
          if (signal?.aborted) return reject(signal.reason as Error);
          const e = this.schedule(Math.ceil(ms), p, 'sleep', () => {
            signal?.removeEventListener('abort', onAbort);
            resolve();
          });
          const onAbort = () => {
            e.cancelled = true;
            reject(signal!.reason as Error);
          };
          signal?.addEventListener('abort', onAbort, { once: true });
        }),
      random: this.random,
    };
  }

  /** Holds the events of `p` (see `goesWhileStalled`) until `unstall(p)`. */
  stall(p: SimProcess): void {
    p.stalled ??= [];
  }

  /** Lets a stalled process go: what it held runs from now, in the order the seed gave it. */
  unstall(p: SimProcess): void {
    const held = p.stalled ?? [];
    delete p.stalled;
    for (const e of held) {
      e.at = this.now;
      this.heap.push(e);
    }
  }

  /**
   * Runs events in order until `done()` says so (checked between events) or virtual time
   * passes `untilMs`. Between two events every ready continuation runs, so an event's effects
   * are complete before the next one is chosen.
   */
  async run(untilMs: number, done: () => boolean, stepsMax: number): Promise<void> {
    for (;;) {
      await settle();
      if (done() || this.steps >= stepsMax) return;
      const e = this.heap.pop();
      if (!e || e.at > untilMs) {
        if (e) this.heap.push(e);
        this.now = Math.max(this.now, untilMs);
        return;
      }
      if (e.cancelled || e.owner?.crashed) continue;
      if (e.owner?.stalled && !goesWhileStalled(e.label)) {
        e.owner.stalled.push(e);
        continue;
      }
      // Faults strike between a process's steps, i.e. at any of its awaits.
      if (e.owner && e.owner.frozenUntil <= e.at && this.beforeStep) {
        this.beforeStep(e.owner);
        if (e.owner.crashed) continue;
      }
      if (e.owner && e.owner.frozenUntil > e.at) {
        e.at = e.owner.frozenUntil;
        this.heap.push(e);
        continue;
      }
      this.now = Math.max(this.now, e.at);
      this.steps++;
      const r = e.fn();
      if (r instanceof Promise) await r;
    }
  }
}
