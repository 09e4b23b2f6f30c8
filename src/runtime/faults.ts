/**
 * Named fault points (DESIGN §7). Tests arm them directly; child processes read
 * `RECKON_FAULTS`, e.g.
 *
 *   RECKON_FAULTS="after-send-before-response=kill@3"          kill on the 3rd hit
 *   RECKON_FAULTS="lease-expired-while-alive=pause:1500"       freeze the process 1.5 s, once
 *   RECKON_FAULTS="after-attempt-commit=throw*"                throw on every hit
 *   RECKON_FAULTS="after-response-before-commit=kill%0.05"     kill with probability 0.05 per hit
 *
 * `pause` freezes the whole thread (Atomics.wait), as a GC pause or SIGSTOP would: timers and
 * heartbeats stop too, which is what lets a lease expire while the process is alive. With
 * `RECKON_FAULTS_RESUME_FILE=<path>`, a pause also ends as soon as that file exists (it is then
 * removed, so the next pause waits for it again): a test ends the pause when what it waited for
 * has happened, with the pause's length as a cap, instead of guessing a length.
 * Probabilistic faults draw from a seeded generator (`RECKON_FAULTS_SEED`), so a run replays.
 *
 * Where each point is:
 *   before-attempt-commit         each claim, before the claim query is sent (worker.ts)
 *   after-attempt-commit          the attempt and its lease are committed; execute not started
 *   lease-expired-while-alive     inside ctx.dispatch, after the local lease check and before
 *                                 the fenced dispatch-marker write (a `pause` here outlives the lease)
 *   after-send-before-response    inside ctx.dispatch, right after `fn()` was called and returned
 *                                 its promise: the marker is committed and `fn` has run up to its
 *                                 first await. For an HTTP client that means the request is
 *                                 created but its bytes have NOT left the process (sockets
 *                                 connect and write on later turns of the event loop), so a `kill`
 *                                 here proves the UNKNOWN path (marker, no outcome) without a
 *                                 request reaching the downstream. To model "the request left and
 *                                 the worker died", kill the sender when the downstream receives
 *                                 it: the test kit's `Downstream.onRequest` (with
 *                                 `RequestInfo.pid`), as the chaos harness's kill-on-receipt does.
 *                                 A `pause` here is the documented limit "the window between the
 *                                 marker and the send" (README), not a guarantee reckon makes.
 *   after-response-before-commit  `fn` resolved (the downstream answered); the outcome is not
 *                                 yet written
 *   reclaimer-startup             the first pass of each reclaimer
 */
import { existsSync, rmSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { InvalidInput, ReckonError } from '../core/errors.js';

export const FAULT_POINTS = [
  'before-attempt-commit',
  'after-attempt-commit',
  'after-send-before-response',
  'after-response-before-commit',
  'lease-expired-while-alive',
  'reclaimer-startup',
] as const;
export type FaultPoint = (typeof FAULT_POINTS)[number];
export type FaultAction = 'throw' | 'kill' | 'pause';

export interface FaultSpec {
  point: FaultPoint;
  action: FaultAction;
  /** For `pause`: how long the thread freezes. */
  pauseMs?: number;
  /** Fire first on this hit (1-based). Default 1. */
  onHit?: number;
  /** How many times to fire; Infinity for every hit from `onHit` on. Default 1. */
  times?: number;
  /** Fire on each eligible hit with this probability (seeded). Default 1. */
  probability?: number;
}

/** Thrown by a `throw` fault: an infrastructure failure at that point. */
export class InjectedFault extends ReckonError {
  readonly point: FaultPoint;
  constructor(point: FaultPoint) {
    super('INJECTED_FAULT', `injected fault at ${point}`);
    this.point = point;
  }
}

interface Armed extends FaultSpec {
  hits: number;
  fired: number;
}

export class Faults {
  private armed = new Map<FaultPoint, Armed[]>();
  private random: () => number;
  /** What fired, for test assertions and logs. */
  readonly fired: { point: FaultPoint; action: FaultAction; detail?: unknown }[] = [];
  onFire?: (point: FaultPoint, action: FaultAction, detail?: unknown) => void;
  /** A pause ends early once this file exists (see the header). */
  resumeFile: string | undefined;

  constructor(seed = 1, resumeFile?: string) {
    this.random = mulberry32(seed);
    this.resumeFile = resumeFile;
  }

  static fromEnv(env: NodeJS.ProcessEnv = process.env): Faults {
    const faults = new Faults(
      Number(env.RECKON_FAULTS_SEED ?? 1) || 1,
      env.RECKON_FAULTS_RESUME_FILE || undefined,
    );
    for (const spec of parseFaults(env.RECKON_FAULTS ?? '')) faults.arm(spec);
    return faults;
  }

  arm(spec: FaultSpec): this {
    if (!FAULT_POINTS.includes(spec.point))
      throw new InvalidInput(
        `unknown fault point ${JSON.stringify(spec.point)}; known: ${FAULT_POINTS.join(', ')}`,
      );
    const list = this.armed.get(spec.point) ?? [];
    list.push({ onHit: 1, times: 1, probability: 1, ...spec, hits: 0, fired: 0 });
    this.armed.set(spec.point, list);
    return this;
  }

  disarm(point?: FaultPoint): void {
    if (point) this.armed.delete(point);
    else this.armed.clear();
  }

  get any(): boolean {
    return this.armed.size > 0;
  }

  /** Called by the runtime at each point. Returns normally when nothing fires. */
  hit(point: FaultPoint, detail?: unknown): void {
    const list = this.armed.get(point);
    if (!list) return;
    for (const f of list) {
      f.hits++;
      if (f.hits < (f.onHit ?? 1) || f.fired >= (f.times ?? 1)) continue;
      if ((f.probability ?? 1) < 1 && this.random() >= (f.probability ?? 1)) continue;
      f.fired++;
      this.fired.push({ point, action: f.action, detail });
      this.onFire?.(point, f.action, detail);
      fire(f, point, this.resumeFile);
    }
  }
}

function fire(f: Armed, point: FaultPoint, resumeFile: string | undefined): void {
  switch (f.action) {
    case 'kill':
      process.kill(process.pid, 'SIGKILL');
      // SIGKILL is delivered asynchronously; make sure nothing after the point runs.
      freezeMs(60_000);
      return;
    case 'pause':
      freezeMs(f.pauseMs ?? 1_000, resumeFile);
      return;
    case 'throw':
      throw new InjectedFault(point);
  }
}

/**
 * Blocks the thread: no timers, no I/O callbacks, no heartbeats. For `ms`, or until
 * `resumeFile` exists (looked for every 10 ms, then removed).
 */
export function freezeMs(ms: number, resumeFile?: string): void {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  if (!resumeFile) {
    Atomics.wait(cell, 0, 0, ms);
    return;
  }
  const end = performance.now() + ms;
  for (let left = ms; left > 0; left = end - performance.now()) {
    if (existsSync(resumeFile)) {
      rmSync(resumeFile, { force: true });
      return;
    }
    Atomics.wait(cell, 0, 0, Math.min(left, 10));
  }
}

const SPEC_RE = /^([a-z-]+)=(throw|kill|pause)(?::(\d+))?(?:@(\d+))?(\*)?(?:%([0-9.]+))?$/;

export function parseFaults(text: string): FaultSpec[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((item) => {
      const m = SPEC_RE.exec(item);
      if (!m)
        throw new InvalidInput(
          `RECKON_FAULTS: cannot read ${JSON.stringify(item)}; expected point=action[:pauseMs][@nthHit][*][%probability]`,
        );
      const spec: FaultSpec = { point: m[1] as FaultPoint, action: m[2] as FaultAction };
      if (m[3]) spec.pauseMs = Number(m[3]);
      if (m[4]) spec.onHit = Number(m[4]);
      if (m[5]) spec.times = Infinity;
      if (m[6]) spec.probability = Number(m[6]);
      if (!FAULT_POINTS.includes(spec.point))
        throw new InvalidInput(
          `RECKON_FAULTS: unknown fault point ${JSON.stringify(spec.point)}; known: ${FAULT_POINTS.join(', ')}`,
        );
      return spec;
    });
}

/** A small seeded generator, so that a chaos run replays from its seed. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
