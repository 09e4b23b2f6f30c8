/**
 * The workloads. Each takes an open system and returns its measurements; the caller opens a
 * fresh database for every (workload, system, round).
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { agent } from './agent.js';
import { inFlight, percentile, sleep, waitUntil, hostMs } from './lib.js';
import { readyWorkers } from './remote-worker.js';
import { benchOp, type ReckonSystem } from './systems/reckon.js';
import type { BenchSystem, Payload } from './systems/system.js';

export interface Sizes {
  enqueueJobs: number;
  processJobs: number;
  latencyJobs: number;
  latencyRatePerSec: number;
  /** Jobs waiting in claim-10k and claim-1m. */
  claimWaitingSmall: number;
  claimWaitingLarge: number;
  /** Timed single claims per run (after `claimWarmup` untimed ones). */
  claimSamples: number;
  claimWarmup: number;
  /** Jobs waiting in memory-1m, and how long its worker runs before it is measured. */
  memoryWaiting: number;
  memoryMs: number;
  /** Concurrent callers in call-1000. */
  callJobs: number;
  /**
   * The processing workloads' workers in the bench's own process (as before issue #29), not in
   * a worker process of their own.
   */
  inProcess: boolean;
  /** agent-1000: jobs, jobs in flight, the lease, and the range of each job's wait (ms). */
  agentJobs: number;
  agentConcurrency: number;
  agentLeaseMs: number;
  agentWaitMs: [number, number];
}

export type Metrics = Record<string, number>;

export interface Workload {
  name: string;
  /** What the headline number means; higher is better unless `lowerIsBetter`. */
  unit: string;
  /** Only these systems run it (default: all). */
  only?: (s: BenchSystem) => boolean;
  /**
   * Runs in the first round only, whatever --rounds says: the bulk-loaded workloads (a million
   * jobs per system) take minutes per run and vary little between rounds.
   */
  firstRoundOnly?: boolean;
  run(s: BenchSystem, sizes: Sizes): Promise<Metrics>;
}

const payload = (seq: number): Payload => ({ seq, sentAt: hostMs() });

function rate(n: number, ms: number): number {
  return Math.round((n / ms) * 1000);
}

async function enqueueBatches(s: BenchSystem, n: number, batch = 1000): Promise<void> {
  for (let i = 0; i < n; i += batch) {
    const ps: Payload[] = [];
    for (let j = i; j < Math.min(n, i + batch); j++) ps.push(payload(j));
    await s.enqueueMany(ps);
  }
}

const enqueueSerial: Workload = {
  name: 'enqueue-1by1',
  unit: 'jobs/s',
  async run(s, z) {
    const t0 = performance.now();
    for (let i = 0; i < z.enqueueJobs; i++) await s.enqueue(payload(i));
    return { value: rate(z.enqueueJobs, performance.now() - t0) };
  },
};

const enqueue32: Workload = {
  name: 'enqueue-32',
  unit: 'jobs/s',
  async run(s, z) {
    const t0 = performance.now();
    await inFlight(z.enqueueJobs, 32, (i) => s.enqueue(payload(i)));
    return { value: rate(z.enqueueJobs, performance.now() - t0) };
  },
};

const enqueueBatch: Workload = {
  name: 'enqueue-batch1000',
  unit: 'jobs/s',
  async run(s, z) {
    // Batches are fast: five times the jobs keep the run long enough to time.
    const n = z.enqueueJobs * 5;
    const t0 = performance.now();
    await enqueueBatches(s, n);
    return { value: rate(n, performance.now() - t0) };
  },
};

/**
 * `n` jobs pre-enqueued, then one worker of `concurrency` runs them all. `keyed` (reckon only):
 * the jobs' operation has a concurrency limit of 1 per key, one key per job (benchKeyedOp), so
 * every claim is the limited claim and no key is contended: its cost against process-c<N>.
 */
function processing(concurrency: number, keyed = false): Workload {
  return {
    name: `process-c${concurrency}${keyed ? '-keyed' : ''}`,
    unit: 'jobs/s',
    ...(keyed ? { only: (s: BenchSystem) => s.family === 'reckon' } : {}),
    async run(s, z) {
      if (keyed) (s as ReckonSystem).keyed = true;
      const n = z.processJobs;
      await enqueueBatches(s, n);
      // The producer (this process) has enqueued; the workers are another process, attached and
      // idle until told to start.
      const workers = await readyWorkers(s, z.inProcess);
      const t0 = performance.now();
      await workers.start({ concurrency, ...(keyed ? { keyed } : {}) });
      // Durable completions: counted from the system's own event where it has one, else
      // polled from the database once every handler has run.
      await waitUntil(() => workers.started >= n, 600_000, `${s.name} to start ${n} jobs`);
      await waitUntil(
        async () => workers.done >= n || (await s.pending()) === 0,
        120_000,
        `${s.name} to complete ${n} jobs`,
        10,
      );
      const ms = performance.now() - t0;
      const usage = await workers.stop();
      return { value: rate(n, ms), cpuUsPerJob: usage.cpuUs / n };
    },
  };
}

/** Pickup (enqueue called → handler started) and end-to-end (→ completion durable) latency. */
async function steadyLatency(
  s: BenchSystem,
  z: Sizes,
  starts: Map<number, number>,
  dones: Map<number, number>,
): Promise<{ sent: Map<number, number> }> {
  const sent = new Map<number, number>();
  const t0 = performance.now();
  const gap = 1000 / z.latencyRatePerSec;
  const inflight: Promise<void>[] = [];
  for (let i = 0; i < z.latencyJobs; i++) {
    const due = t0 + i * gap;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait - 0.5);
    // The last half millisecond: yield until due (a spin here would hold back the I/O of the
    // workers that run in this process, the very callbacks whose latency is measured).
    while (performance.now() < due) await new Promise<void>((r) => setImmediate(r));
    const p = payload(i);
    sent.set(i, p.sentAt);
    inflight.push(s.enqueue(p));
  }
  await Promise.all(inflight);
  await waitUntil(() => starts.size >= z.latencyJobs, 60_000, `${s.name} to start every job`);
  if (dones.size > 0)
    await waitUntil(() => dones.size >= z.latencyJobs, 60_000, `${s.name} to finish every job`);
  return { sent };
}

function latencyMetrics(
  sent: Map<number, number>,
  starts: Map<number, number>,
  dones: Map<number, number>,
): Metrics {
  const pickup: number[] = [];
  const e2e: number[] = [];
  for (const [seq, t] of sent) {
    const st = starts.get(seq);
    if (st !== undefined) pickup.push(st - t);
    const dn = dones.get(seq);
    if (dn !== undefined) e2e.push(dn - t);
  }
  const m: Metrics = {
    value: percentile(pickup, 50),
    pickupP50: percentile(pickup, 50),
    pickupP99: percentile(pickup, 99),
  };
  if (e2e.length > 0) {
    m.e2eP50 = percentile(e2e, 50);
    m.e2eP99 = percentile(e2e, 99);
  }
  return m;
}

const latency: Workload = {
  name: 'latency-200ps',
  unit: 'ms (pickup p50)',
  async run(s, z) {
    const starts = new Map<number, number>();
    const dones = new Map<number, number>();
    const running = await s.work({
      concurrency: 10,
      onStart: (p) => starts.set(p.seq, hostMs()),
      onDone: (p) => dones.set(p.seq, hostMs()),
    });
    await sleep(200);
    const { sent } = await steadyLatency(s, z, starts, dones);
    await running.stop();
    return latencyMetrics(sent, starts, dones);
  },
};

/** The same, with the system's worker in a process of its own (the producer is this one). */
const latencyCrossProcess: Workload = {
  name: 'latency-200ps-xproc',
  unit: 'ms (pickup p50)',
  async run(s, z) {
    const workers = await readyWorkers(s, false);
    await workers.start({ concurrency: 10, starts: true });
    await sleep(200);
    const { sent } = await steadyLatency(s, z, workers.starts, new Map());
    await workers.stop();
    return latencyMetrics(sent, workers.starts, new Map());
  },
};

/**
 * Claim latency with `waiting` jobs queued: bulk-load them (BenchSystem.bulkLoad, untimed), then
 * time `claimSamples` single claims in a row, each the system's own take-one-job call on an
 * otherwise idle system (Claimer.claimOne), from the call until its result is back (committed,
 * where the system commits). The first `claimWarmup` claims are not counted.
 */
function claimLatency(name: string, waiting: (z: Sizes) => number): Workload {
  return {
    name,
    firstRoundOnly: true,
    unit: 'ms (claim p50)',
    only: (s) => !s.noBulkLoad,
    async run(s, z) {
      const n = waiting(z);
      const t0 = performance.now();
      await s.bulkLoad(n);
      const loadS = (performance.now() - t0) / 1000;
      const pending = await s.pending();
      if (pending !== n) throw new Error(`bench: ${s.name} has ${pending} jobs waiting, not ${n}`);
      const claimer = await s.claimer();
      const ms: number[] = [];
      try {
        for (let i = 0; i < z.claimWarmup + z.claimSamples; i++) {
          const t = performance.now();
          const got = await claimer.claimOne();
          const dt = performance.now() - t;
          if (got !== 1) throw new Error(`bench: ${s.name} claimed ${got} jobs, not 1`);
          if (i >= z.claimWarmup) ms.push(dt);
        }
      } finally {
        await claimer.close();
      }
      return {
        value: percentile(ms, 50),
        p50: percentile(ms, 50),
        p99: percentile(ms, 99),
        max: Math.max(...ms),
        waiting: n,
        loadS,
      };
    },
  };
}

/**
 * Worker memory with `memoryWaiting` jobs queued: bulk-load them, start one worker process of
 * the system (bench/child-memory.ts: concurrency 10, the processing workloads' settings), let it
 * process for `memoryMs` after its first job started, then read its RSS and V8 heap.
 */
const memory: Workload = {
  name: 'memory-1m',
  firstRoundOnly: true,
  unit: 'MB (worker RSS)',
  only: (s) => !s.noBulkLoad,
  async run(s, z) {
    await s.bulkLoad(z.memoryWaiting);
    const child = fork(
      fileURLToPath(new URL('./child-memory.ts', import.meta.url)),
      [s.name, s.target, '10', String(z.memoryMs)],
      { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
    );
    let report: Metrics | undefined;
    let exited = false;
    child.on('message', (m: { report?: Metrics }) => {
      if (m.report) report = m.report;
    });
    child.on('exit', () => (exited = true));
    await waitUntil(
      () => report !== undefined || exited,
      120_000 + z.memoryMs,
      `${s.name}'s worker process to report`,
      50,
    );
    await waitUntil(() => exited, 30_000, `${s.name}'s worker process to exit`, 50);
    if (!report) throw new Error(`bench: ${s.name}'s worker process exited without a report`);
    return { value: report.rssMB!, ...report, waiting: z.memoryWaiting };
  },
};

/**
 * 1,000 concurrent `q.call`s in one process against a worker (concurrency 10) in the same
 * process: how long after each outcome commits (the worker's `succeeded` event, emitted once the
 * outcome is durable) its caller's wait resolves, woken by the store's notifications.
 */
const callWaiters: Workload = {
  name: 'call-1000',
  unit: 'ms (commit to caller p50)',
  only: (s) => s.family === 'reckon',
  async run(s, z) {
    const q = (s as ReckonSystem).queue;
    const n = z.callJobs;
    const run = Date.now();
    const resolved = new Map<number, number>();
    const calls = Array.from({ length: n }, (_, seq) =>
      q.call(benchOp, payload(seq), { key: `call-${run}-${seq}`, timeoutMs: 300_000 }).then((o) => {
        resolved.set(seq, hostMs());
        if (o.state !== 'SUCCEEDED') throw new Error(`bench: call ${seq} ended ${o.state}`);
      }),
    );
    await waitUntil(
      async () => (await s.pending()) >= n,
      60_000,
      `${s.name} to enqueue ${n} calls`,
    );
    const done = new Map<number, number>();
    const running = await s.work({
      concurrency: 10,
      onStart: () => undefined,
      onDone: (p) => done.set(p.seq, hostMs()),
    });
    await Promise.all(calls);
    await running.stop();
    const waits: number[] = [];
    for (const [seq, t] of resolved) {
      const d = done.get(seq);
      if (d !== undefined) waits.push(t - d);
    }
    if (waits.length !== n) throw new Error(`bench: ${waits.length} of ${n} calls were timed`);
    return {
      value: percentile(waits, 50),
      p50: percentile(waits, 50),
      p99: percentile(waits, 99),
      max: Math.max(...waits),
      callers: n,
    };
  },
};

export const WORKLOADS: Workload[] = [
  enqueueSerial,
  enqueue32,
  enqueueBatch,
  processing(10),
  processing(50),
  processing(50, true),
  latency,
  latencyCrossProcess,
  claimLatency('claim-10k', (z) => z.claimWaitingSmall),
  claimLatency('claim-1m', (z) => z.claimWaitingLarge),
  memory,
  callWaiters,
  agent,
];
