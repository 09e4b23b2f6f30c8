/**
 * Many seeds, one after the other, and the shrinker: a failing seed is re-run with fewer jobs
 * and fewer kinds of fault, keeping each cut that still fails, until none can be cut. The
 * result is one command that replays the smallest failing run, bit for bit.
 */
import { SIM_FAULTS, type SimFault, type SimLimits } from './scenario.js';
import { runSim, type SimResult } from './run.js';

export interface SimBatchOptions extends SimLimits {
  /** The first seed (default 1) and how many (default 100). */
  from?: number;
  seeds?: number;
  /** Stop at the first failing seed (default true). */
  stopAtFailure?: boolean;
  /** Told of every finished seed (for progress lines). */
  onResult?: (r: SimResult, done: number) => void;
}

export interface SimBatchReport {
  seeds: number;
  failed: SimResult[];
  ms: number;
  seedsPerSecond: number;
  /** Events run over all seeds. */
  steps: number;
}

export async function runSimBatch(o: SimBatchOptions = {}): Promise<SimBatchReport> {
  const from = o.from ?? 1;
  const count = o.seeds ?? 100;
  const started = performance.now();
  const failed: SimResult[] = [];
  let steps = 0;
  let done = 0;
  for (let seed = from; seed < from + count; seed++) {
    const r = await runSim({ seed, ...limitsOf(o) });
    done++;
    steps += r.steps;
    o.onResult?.(r, done);
    if (!r.ok) {
      failed.push(r);
      if (o.stopAtFailure !== false) break;
    }
  }
  const ms = performance.now() - started;
  return { seeds: done, failed, ms, seedsPerSecond: done / (ms / 1000), steps };
}

function limitsOf(o: SimLimits): SimLimits {
  return {
    ...(o.jobsMax !== undefined ? { jobsMax: o.jobsMax } : {}),
    ...(o.without ? { without: o.without } : {}),
  };
}

export interface ShrinkResult {
  seed: number;
  limits: Required<SimLimits>;
  result: SimResult;
  /** Re-runs the shrinker made. */
  tries: number;
}

/**
 * The fewest jobs, then the fewest fault kinds, with which `seed` still fails. Greedy: each
 * cut is kept if the run still fails (with any violation), so the answer is a local minimum.
 */
export async function shrinkSim(seed: number, start: SimLimits = {}): Promise<ShrinkResult> {
  let limits: Required<SimLimits> = {
    jobsMax: start.jobsMax ?? 10,
    without: [...(start.without ?? [])],
  };
  let result = await runSim({ seed, ...limits });
  let tries = 1;
  if (result.ok) return { seed, limits, result, tries };
  limits.jobsMax = Math.min(limits.jobsMax, result.jobs);
  const attempt = async (next: Required<SimLimits>): Promise<boolean> => {
    tries++;
    const r = await runSim({ seed, ...next });
    if (r.ok) return false;
    limits = next;
    result = r;
    return true;
  };
  for (let jobs = 1; jobs < limits.jobsMax; jobs++)
    if (await attempt({ ...limits, jobsMax: jobs })) break;
  for (const f of SIM_FAULTS)
    if (result.faults.includes(f)) await attempt({ ...limits, without: [...limits.without, f] });
  return { seed, limits, result, tries };
}

/** The one command that replays a run, with its trace. */
export function replayCommand(seed: number, limits: SimLimits = {}): string {
  const parts = ['reckon sim', `--seed ${seed}`];
  if (limits.jobsMax !== undefined) parts.push(`--jobs-max ${limits.jobsMax}`);
  if (limits.without && limits.without.length > 0)
    parts.push(`--without ${[...limits.without].sort(bySimFault).join(',')}`);
  parts.push('--trace');
  return parts.join(' ');
}

function bySimFault(a: SimFault, b: SimFault): number {
  return SIM_FAULTS.indexOf(a) - SIM_FAULTS.indexOf(b);
}
