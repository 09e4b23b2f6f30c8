/**
 * A worker of any system in its own process, as in production: the bench's own process is the
 * producer (and holds the clock), this one only works. It attaches to what the parent opened,
 * says it is ready, and on the parent's word starts the system's worker; every 10 ms (when
 * something changed) it reports how many jobs started and how many the system said were done,
 * and, when asked, each job's start time. Asked to stop, it reads its CPU time and the bytes it
 * sent to the disk, stops the worker, detaches and exits.
 * argv: <system> <target>
 */
import { readFileSync } from 'node:fs';
import { hostMs } from './lib.js';
import type { FromWorker, ToWorker, WorkRequest } from './remote-worker.js';
import { loadSystems } from './systems/all.js';
import type { BenchSystem, Running } from './systems/system.js';

const [name, target] = process.argv.slice(2) as [string, string];
const send = (m: FromWorker, then: () => void = () => undefined) =>
  process.send?.(m, undefined, undefined, then);

/** Bytes this process caused to be written to the storage layer (Linux task I/O accounting). */
function diskWrittenBytes(): number {
  try {
    const m = /^write_bytes: (\d+)$/m.exec(readFileSync('/proc/self/io', 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

const s: BenchSystem = (await loadSystems([name], (m) => process.stderr.write(m + '\n')))[name]!();
await s.attach(target);

let started = 0;
let done = 0;
let handling = 0;
let peak = 0;
let starts: [number, number][] = [];
let reported = '';
let running: Running | undefined;
let cpu0 = process.cpuUsage();
let disk0 = 0;

const flush = () => {
  const key = `${started}/${done}`;
  if (key === reported && starts.length === 0) return;
  reported = key;
  send({ started, done, ...(starts.length > 0 ? { starts } : {}) });
  starts = [];
};
const timer = setInterval(flush, 10);

async function begin(w: WorkRequest): Promise<void> {
  cpu0 = process.cpuUsage();
  disk0 = diskWrittenBytes();
  running = await s.work({
    concurrency: w.concurrency,
    ...(w.leaseMs !== undefined ? { leaseMs: w.leaseMs } : {}),
    ...(w.keyed ? { keyed: true } : {}),
    onStart: (p) => {
      started++;
      peak = Math.max(peak, ++handling);
      if (w.starts) starts.push([p.seq, hostMs()]);
    },
    onEnd: () => void handling--,
    onDone: () => void done++,
  });
}

async function end(): Promise<void> {
  const cpu = process.cpuUsage(cpu0);
  const diskBytes = diskWrittenBytes() - disk0;
  await running?.stop();
  clearInterval(timer);
  flush();
  await s.close();
  send({ stopped: { cpuUs: cpu.user + cpu.system, diskBytes, peakInFlight: peak } }, () =>
    process.exit(0),
  );
}

process.on('message', (m: ToWorker) => {
  const step = 'work' in m ? begin(m.work) : end();
  step.catch((err: unknown) => {
    send({ error: err instanceof Error ? (err.stack ?? err.message) : String(err) }, () =>
      process.exit(1),
    );
  });
});
send({ ready: true });
