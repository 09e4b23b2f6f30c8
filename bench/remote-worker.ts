/**
 * The workers of a run, seen from the producer: by default a worker process of the system
 * (bench/worker-process.ts, attached to what this process opened), as in production; with
 * `inProcess`, the system's worker in this very process, as the bench ran before issue #29
 * (for comparing with figures of that time).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { hostMs, waitUntil } from './lib.js';
import type { BenchSystem, Running } from './systems/system.js';

export interface WorkRequest {
  concurrency: number;
  leaseMs?: number;
  /** reckon only: the keyed operation (see WorkOptions.keyed). */
  keyed?: boolean;
  /** Report each job's start time (hostMs), for latency. */
  starts?: boolean;
}

export interface WorkerUsage {
  /** CPU time of the worker process (user + system) from the start of the work to the stop. */
  cpuUs: number;
  /** Bytes the worker process sent to the disk meanwhile (SQLite's writes; 0 for servers). */
  diskBytes: number;
  /** The most handlers running at once (started and not yet returned). */
  peakInFlight: number;
}

export type ToWorker = { work: WorkRequest } | { stop: true };
export type FromWorker =
  | { ready: true }
  | { started: number; done: number; starts?: [number, number][] }
  | { stopped: WorkerUsage }
  | { error: string };

export interface Workers {
  /** Jobs whose handler started; throws if the worker process failed. */
  readonly started: number;
  /** Jobs the system reported durably done (0 where it cannot say). */
  readonly done: number;
  /** seq → hostMs() of each start, when the work asked for them. */
  readonly starts: Map<number, number>;
  /** Starts the work: the clock of a run starts just before this. */
  start(w: WorkRequest): Promise<void>;
  stop(): Promise<WorkerUsage>;
}

const SCRIPT = fileURLToPath(new URL('./worker-process.ts', import.meta.url));

/** Makes the workers ready to start: a process attached to the system's target, or nothing. */
export async function readyWorkers(s: BenchSystem, inProcess: boolean): Promise<Workers> {
  return inProcess ? localWorkers(s) : await remoteWorkers(s);
}

function localWorkers(s: BenchSystem): Workers {
  let started = 0;
  let done = 0;
  const starts = new Map<number, number>();
  let running: Running | undefined;
  let cpu0 = process.cpuUsage();
  let inFlight = 0;
  let peak = 0;
  return {
    get started() {
      return started;
    },
    get done() {
      return done;
    },
    starts,
    async start(w) {
      cpu0 = process.cpuUsage();
      running = await s.work({
        concurrency: w.concurrency,
        ...(w.leaseMs !== undefined ? { leaseMs: w.leaseMs } : {}),
        ...(w.keyed ? { keyed: true } : {}),
        onStart: (p) => {
          started++;
          peak = Math.max(peak, ++inFlight);
          if (w.starts) starts.set(p.seq, hostMs());
        },
        onEnd: () => void inFlight--,
        onDone: () => void done++,
      });
    },
    async stop() {
      const cpu = process.cpuUsage(cpu0);
      await running?.stop();
      return { cpuUs: cpu.user + cpu.system, diskBytes: 0, peakInFlight: peak };
    },
  };
}

async function remoteWorkers(s: BenchSystem): Promise<Workers> {
  const child: ChildProcess = fork(SCRIPT, [s.name, s.target], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let ready = false;
  let started = 0;
  let done = 0;
  let usage: WorkerUsage | undefined;
  let failure: string | undefined;
  let exited = false;
  const starts = new Map<number, number>();
  child.on('message', (m: FromWorker) => {
    if ('ready' in m) ready = true;
    else if ('stopped' in m) usage = m.stopped;
    else if ('error' in m) failure = m.error;
    else {
      started = m.started;
      done = m.done;
      for (const [seq, t] of m.starts ?? []) starts.set(seq, t);
    }
  });
  child.on('exit', (code) => {
    exited = true;
    if (!usage && !failure) failure = `exited with code ${code}`;
  });
  const alive = () => {
    if (failure) throw new Error(`bench: ${s.name}'s worker process: ${failure}`);
  };
  const send = (m: ToWorker) => child.send(m);
  await waitUntil(() => (alive(), ready), 60_000, `${s.name}'s worker process to attach`, 5);
  return {
    get started() {
      alive();
      return started;
    },
    get done() {
      alive();
      return done;
    },
    starts,
    start(w) {
      send({ work: w });
      return Promise.resolve();
    },
    async stop() {
      send({ stop: true });
      await waitUntil(() => (alive(), usage !== undefined), 120_000, `${s.name}'s workers to stop`);
      await waitUntil(() => exited, 30_000, `${s.name}'s worker process to exit`, 20);
      return usage!;
    },
  };
}
