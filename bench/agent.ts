/**
 * agent-1000: a queue under an agent's side effects. `agentJobs` jobs (5,000), each waiting 1–5 s
 * like an HTTP call (uniform, seeded: the same waits for every system and round), with
 * `agentConcurrency` (1,000) in flight in one worker process, under a lease short enough (1 s)
 * that every job's lease is renewed while it waits. Reports the completion time against the
 * ideal (total wait ÷ concurrency), how many handlers started again (a lease lost, the job run
 * twice), the worker process's CPU per job, and the store's writes per second over the run: PostgreSQL's commits and rows written in the run's database, Redis's
 * commands, and on SQLite the bytes the worker process sent to the disk.
 */
import { mulberry32 } from '../src/runtime/faults.js';
import { hostMs, sleep, waitUntil } from './lib.js';
import { readyWorkers } from './remote-worker.js';
import type { Payload } from './systems/system.js';
import type { Metrics, Workload } from './workloads.js';

const SEED = 29;

/**
 * PostgreSQL's statistics take a backend's counts at most once a second, and when it exits:
 * this long after the writers went idle or away, the counters hold all they did.
 */
const COUNTERS_SETTLE_MS = 1_200;

/** Each job's wait in ms, uniform in [lo, hi), the same sequence on every call. */
export function agentWaits(n: number, [lo, hi]: [number, number]): number[] {
  const next = mulberry32(SEED);
  return Array.from({ length: n }, () => Math.round(lo + next() * (hi - lo)));
}

export const agent: Workload = {
  name: 'agent-1000',
  unit: 's (completion)',
  async run(s, z) {
    const n = z.agentJobs;
    const waits = agentWaits(n, z.agentWaitMs);
    for (let i = 0; i < n; i += 1000) {
      const ps: Payload[] = [];
      for (let seq = i; seq < Math.min(n, i + 1000); seq++)
        ps.push({ seq, sentAt: hostMs(), waitMs: waits[seq]! });
      await s.enqueueMany(ps);
    }
    const workers = await readyWorkers(s, z.inProcess);
    await sleep(COUNTERS_SETTLE_MS);
    const before = (await s.writeCounters?.()) ?? {};
    const idealMs = waits.reduce((a, b) => a + b, 0) / z.agentConcurrency;
    const t0 = performance.now();
    await workers.start({ concurrency: z.agentConcurrency, leaseMs: z.agentLeaseMs });
    await waitUntil(
      async () => workers.done >= n || (workers.started >= n && (await s.pending()) === 0),
      idealMs * 4 + 120_000,
      `${s.name} to complete ${n} waiting jobs`,
      50,
    );
    const ms = performance.now() - t0;
    const usage = await workers.stop();
    await sleep(COUNTERS_SETTLE_MS);
    const after = (await s.writeCounters?.()) ?? {};
    const m: Metrics = {
      value: ms / 1000,
      idealS: idealMs / 1000,
      overIdeal: ms / idealMs,
      cpuUsPerJob: usage.cpuUs / n,
      // Handlers started again: a lease or lock lost while the job waited, and the job re-run.
      restarts: workers.started - n,
      peakInFlight: usage.peakInFlight,
    };
    for (const [k, v] of Object.entries(after))
      m[`${k}PerS`] = (v - (before[k] ?? 0)) / (ms / 1000);
    if (s.backend === 'sqlite') m.diskKBPerS = usage.diskBytes / 1024 / (ms / 1000);
    return m;
  },
};
