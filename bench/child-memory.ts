/**
 * A worker of any system in its own process, for the memory workload: attaches to the database
 * (or queue) the parent loaded, measures its baseline, starts the system's worker as the
 * processing workloads do, and once the first job has started lets it run for `ms`, sampling
 * process.memoryUsage() every 100 ms. Reports to the parent over IPC, then exits.
 * argv: <system> <target> <concurrency> <ms>
 */
import { sleep, waitUntil } from './lib.js';
import { loadSystems } from './systems/all.js';
import type { BenchSystem } from './systems/system.js';

const MB = 2 ** 20;
const [name, target, concurrencyArg, msArg] = process.argv.slice(2);

/** Only the system under test is loaded: the others' libraries would count in its memory. */
async function load(system: string): Promise<BenchSystem> {
  const create = (await loadSystems([system], (m) => process.stderr.write(m + '\n')))[system]!;
  return create();
}

const s = await load(name!);
// After the imports (the system's library, the tsx loader): what the process costs before it
// holds a connection or a job.
const baselineRss = process.memoryUsage().rss;
await s.attach(target!);
let processed = 0;
const running = await s.work({
  concurrency: Number(concurrencyArg),
  onStart: () => void processed++,
});
await waitUntil(() => processed > 0, 60_000, `${name} to start a job`);
let peakRss = 0;
const deadline = performance.now() + Number(msArg);
while (performance.now() < deadline) {
  peakRss = Math.max(peakRss, process.memoryUsage().rss);
  await sleep(100);
}
const m = process.memoryUsage();
const report = {
  rssMB: m.rss / MB,
  peakRssMB: Math.max(peakRss, m.rss) / MB,
  heapUsedMB: m.heapUsed / MB,
  baselineRssMB: baselineRss / MB,
  processed,
};
process.send?.({ report }, () => {
  // The numbers are in; stopping is not measured (a worker mid-batch may take a while).
  void Promise.race([running.stop().then(() => s.close()), sleep(10_000)]).then(() =>
    process.exit(0),
  );
});
