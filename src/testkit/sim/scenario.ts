/**
 * What a seed chooses before the run starts: the fleets and their operation tables, the
 * worker settings, the jobs, and how hard each kind of fault hits. `limit` (from the shrinker)
 * caps the jobs and turns fault kinds off, so that a failing seed can be made smaller.
 */
import type { WorkerSettings } from '../../runtime/settings.js';
import { SIM_FLAVOURS, type SimFlavour, type SimOperationSettings } from './sim-downstream.js';
import { mulberry32 } from '../../runtime/faults.js';

/** The fault kinds a seed may switch on; the shrinker switches them off one at a time. */
export const SIM_FAULTS = [
  'crash',
  'freeze',
  'drop',
  'slow',
  'down',
  'throttle',
  'refuse',
  'lookup',
  'skew',
  'store',
  'operators',
  'retention',
  'conflicts',
  'stall',
  'versions',
  'restore',
] as const;
export type SimFault = (typeof SIM_FAULTS)[number];

/**
 * Kinds added after the first release of the simulator: drawn after everything else, so that
 * a seed without them keeps the scenario (and the interleaving) it had before they existed.
 */
const LATER_FAULTS: readonly SimFault[] = ['stall', 'versions', 'restore'];

export interface SimLimits {
  /** At most this many jobs (the shrinker lowers it). */
  jobsMax?: number;
  /** Fault kinds left out, whatever the seed says. */
  without?: readonly SimFault[];
}

export interface SimJob {
  n: number;
  key: string;
  flavour: SimFlavour;
  /** When its enqueue (or call) is first tried, ms after the start. */
  atMs: number;
  /** Enqueued with `q.call` and waited for (ms), or a plain enqueue. */
  callMs: number | null;
  /** The caller enqueues the same key again later (an agent's retry): it must get the same job. */
  repeat: boolean;
  /** Also enqueued under another operation with the same key: must be refused. */
  conflict: SimFlavour | null;
}

export interface SimScenario {
  fleets: SimFlavour[][];
  processes: { fleet: number; skewMs: number }[];
  worker: Partial<WorkerSettings> & { leaseMs: number; clockSkewToleranceMs: number };
  op: SimOperationSettings;
  jobs: SimJob[];
  faults: Set<SimFault>;
  /** The faults the seed chose, before `limits.without` took any out. */
  seedFaults: Set<SimFault>;
  chaosMs: number;
  storeLatencyMsMax: number;
  /** Longest freeze that keeps the lookup horizon's promise (see docs/chaos.md on pauses). */
  freezeMsMax: number;
  retentionMs: number | null;
  /**
   * The fleet (index) that runs an older version of the lookup operations, one without a
   * lookup (`versions`): its workers and reclaimers schedule an UNKNOWN job's first check at
   * once, as a fleet of an older release would. Null: every fleet runs the same version.
   */
  oldFleet: number | null;
  /** A backup taken at `backupAtMs`, the host lost and the backup restored at `lostAtMs`. */
  restore: { backupAtMs: number; lostAtMs: number } | null;
}

/** The scenario's own generator (a different stream from the world's, same seed). */
class Draw {
  private readonly random: () => number;
  constructor(seed: number) {
    this.random = mulberry32((seed ^ 0x5ce7a410) >>> 0);
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.random() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.random() < p;
  }
}

function pick<T>(w: Draw, xs: readonly T[]): T {
  return xs[w.int(0, xs.length - 1)]!;
}

/**
 * The seed's scenario, drawn from a generator of its own (not the world's) and always in the
 * same order, whatever `limits` leave out: a shrunk run keeps the seed's jobs and faults.
 */
export function chooseScenario(seed: number, limits: SimLimits = {}): SimScenario {
  const w = new Draw(seed);
  const faults = new Set<SimFault>(
    SIM_FAULTS.filter((f) => !LATER_FAULTS.includes(f) && w.chance(0.55)),
  );
  const all = new Set(faults);
  const without = new Set(limits.without ?? []);
  for (const f of without) faults.delete(f);
  const leaseMs = pick(w, [1_000, 1_500, 2_000]);
  const tol = pick(w, [200, 400]);
  const op: SimOperationSettings = {
    timeoutMs: w.int(2, 4) * leaseMs,
    graceMs: w.int(500, 1_500),
    maxAttempts: w.int(2, 5),
    approvalTimeoutMs: w.int(2_000, 15_000),
  };
  const storeLatencyMsMax = w.int(1, 30);
  const fleets: SimFlavour[][] = w.chance(0.35)
    ? splitFleets(w)
    : [SIM_FLAVOURS.filter((f) => f !== 'approved' || w.chance(0.7))];
  const processes = Array.from({ length: w.int(1, 3) }, (_, i) => {
    const skewMs = w.int(-tol / 2, tol / 2);
    return { fleet: i % fleets.length, skewMs: faults.has('skew') ? skewMs : 0 };
  });
  if (processes.length < fleets.length) processes.push({ fleet: 1, skewMs: 0 });
  const flavours = [...new Set(fleets.flat())];
  const chaosMs = w.int(8_000, 25_000);
  const jobs: SimJob[] = Array.from({ length: w.int(2, 10) }, (_, i) => {
    const flavour = pick(w, flavours);
    const atMs = w.int(0, Math.floor(chaosMs * 0.6));
    const call = w.chance(0.3);
    const callMs = w.int(500, 20_000);
    const repeat = w.chance(0.2);
    const conflict = w.chance(0.3);
    const other = pick(w, flavours);
    return {
      n: i,
      key: `k${i}`,
      flavour,
      atMs,
      callMs: call ? callMs : null,
      repeat,
      conflict: faults.has('conflicts') && conflict ? other : null,
    };
  }).slice(0, limits.jobsMax ?? Infinity);
  const retentionMs = w.int(4_000, 12_000);
  drawLater(w, all, faults, without);
  const oldFleet = faults.has('versions') ? withOldFleet(fleets, processes) : null;
  const restore = restoreTimes(w, chaosMs, faults.has('restore'));
  return {
    fleets,
    processes,
    worker: {
      leaseMs,
      clockSkewToleranceMs: tol,
      concurrency: w.int(1, 4),
      pollIntervalMs: w.int(100, 1_000),
      reclaimIntervalMs: w.int(300, 1_500),
      reconcileIntervalMs: w.int(300, 1_500),
      prefetch: w.int(0, 1),
    },
    op,
    jobs,
    faults,
    chaosMs,
    storeLatencyMsMax,
    // Sent after its marker and past its lookup horizon, a request is a limit reckon states, not
    // a promise it breaks: a freeze stays within timeout + grace, less skew and the legs.
    freezeMsMax: op.timeoutMs + op.graceMs - tol - 2 * storeLatencyMsMax - 40 - 100,
    // A restore brings pruned histories back: the two are not judged together.
    retentionMs: faults.has('retention') && !restore ? retentionMs : null,
    seedFaults: all,
    oldFleet,
    restore,
  };
}

/** The kinds added later, drawn last (see LATER_FAULTS). */
function drawLater(w: Draw, all: Set<SimFault>, faults: Set<SimFault>, without: Set<SimFault>) {
  for (const f of LATER_FAULTS)
    if (w.chance(0.55)) {
      all.add(f);
      if (!without.has(f)) faults.add(f);
    }
}

/** When the backup is taken, and when the host is lost (and the backup restored). */
function restoreTimes(w: Draw, chaosMs: number, on: boolean): SimScenario['restore'] {
  const backupAtMs = w.int(Math.floor(chaosMs * 0.2), Math.floor(chaosMs * 0.6));
  const lostAtMs = w.int(backupAtMs + 1_000, chaosMs);
  return on ? { backupAtMs, lostAtMs } : null;
}

/**
 * Two fleets on one store, the second running an older version of the lookup operations:
 * both serve them, and each fleet has a process. Returns the old fleet's index.
 */
function withOldFleet(fleets: SimFlavour[][], processes: SimScenario['processes']): number {
  if (fleets.length === 1) fleets.push([...fleets[0]!]);
  for (const fleet of fleets) if (!fleet.includes('lookup')) fleet.push('lookup');
  if (processes.length < 2) processes.push({ fleet: 1, skewMs: 0 });
  processes.forEach((p, i) => (p.fleet = i % 2));
  return 1;
}

/** Two fleets with different operation tables; every flavour is served by one of them. */
function splitFleets(w: Draw): SimFlavour[][] {
  const a: SimFlavour[] = [];
  const b: SimFlavour[] = [];
  for (const f of SIM_FLAVOURS) {
    const r = w.int(0, 2);
    if (r !== 1) a.push(f);
    if (r !== 0) b.push(f);
  }
  if (a.length === 0) a.push('lookup');
  if (b.length === 0) b.push('none');
  return [a, b];
}
