/**
 * A reckon worker in its own process (for pickup latency across processes on SQLite). Reports
 * each job's start time to the parent over IPC; stops when the parent says so.
 * argv: <store url> <concurrency>
 */
import { openQueue } from '../src/index.js';
import { hostMs } from './lib.js';
import { BENCH_PREFETCH, benchOp, setStartHook } from './systems/reckon.js';

const [storeUrl, concurrencyArg] = process.argv.slice(2);
const q = await openQueue({ store: storeUrl!, operations: [benchOp] });
let pending: [number, number][] = [];
setStartHook((p) => pending.push([p.seq, hostMs()]));
const worker = q.worker({
  operations: [benchOp],
  concurrency: Number(concurrencyArg ?? 10),
  prefetch: BENCH_PREFETCH,
});
await worker.start();
const flush = setInterval(() => {
  if (pending.length === 0) return;
  process.send?.({ starts: pending });
  pending = [];
}, 20);
process.on('message', (m: { stop?: boolean }) => {
  if (!m.stop) return;
  void (async () => {
    await worker.stop();
    clearInterval(flush);
    if (pending.length) process.send?.({ starts: pending });
    await q.close();
    process.send?.({ stopped: true }, () => process.exit(0));
  })();
});
process.send?.({ ready: true });
