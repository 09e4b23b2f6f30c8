/**
 * A worker process for the operations benchmarks (bench/operations.ts): processes a no-op
 * operation at full speed and reports how many jobs it finished, over IPC, every 100 ms.
 * argv: <store url> <concurrency>
 */
import { defineOperation, openQueue } from '../src/index.js';

export const opsNoop = defineOperation<{ n: number }, number>({
  name: 'bench.ops.noop',
  fingerprint: (i) => i,
  execute: (i, ctx) => ctx.dispatch(() => Promise.resolve(i.n)),
});

if (process.send) {
  const [storeUrl, concurrencyArg] = process.argv.slice(2);
  const q = await openQueue({ store: storeUrl!, operations: [opsNoop] });
  const worker = q.worker({
    operations: [opsNoop],
    concurrency: Number(concurrencyArg ?? 10),
    // The benchmark measures its own prune: the worker's retention stays out of it.
    retention: 'off',
  });
  worker.on('error', () => undefined);
  let done = 0;
  worker.on('succeeded', () => done++);
  await worker.start();
  const timer = setInterval(() => process.send?.({ done }), 100);
  process.on('message', (m: { stop?: boolean }) => {
    if (!m.stop) return;
    void (async () => {
      clearInterval(timer);
      await worker.stop();
      await q.close();
      process.send?.({ done, stopped: true }, () => process.exit(0));
    })();
  });
  process.send({ ready: true });
}
