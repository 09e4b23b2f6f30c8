/**
 * A worker process for crash tests, the demo and the chaos harness: serves the downstream
 * operations (or those of `WORKER_OPERATIONS_MODULE`) until SIGTERM (graceful stop) or until it
 * is killed. Prints `ready` on stdout once the worker has started, and `fault <point> <action>`
 * each time a fault point fires (pipes are synchronous on Linux, so the line is out before a
 * `kill` fault ends the process). Configured by its environment (see child-config.ts);
 * `RECKON_FAULTS` arms fault points.
 */
import { loadOperations, loadSchedules } from '../runtime/operations-module.js';
import type { AnyOperation } from '../core/operation.js';
import { openQueue } from '../index.js';
import { createLogger } from '../observe/logger.js';
import { childConfigFromEnv, type WorkerChildConfig } from './child-config.js';
import { downstreamOperations, operationName } from './operations.js';

async function operationsFor(c: WorkerChildConfig): Promise<AnyOperation[]> {
  if (c.operationsModule) return loadOperations(c.operationsModule);
  return downstreamOperations(
    {
      url: c.downstreamUrl!,
      timeoutMs: c.timeoutMs,
      graceMs: c.graceMs,
      maxAttempts: c.maxAttempts,
    },
    c.flavours,
  );
}

/** Its own enqueues (`enqueue`): how often it looks whether its worker holds nothing, ... */
const IDLE_CHECK_MS = 5;
/** ... and how long it then waits, so that the worker's last claim has answered. */
const IDLE_SETTLE_MS = 100;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const c = childConfigFromEnv(process.env);
  const q = await openQueue({
    store: c.storeUrl,
    actor: `worker-child:${process.pid}`,
    ...(c.logLevel ? { logger: createLogger({ level: c.logLevel, name: 'worker-child' }) } : {}),
  });
  q.faults.onFire = (point, action) => process.stdout.write(`fault ${point} ${action}\n`);
  const operations = await operationsFor(c);
  const schedules = c.operationsModule ? await loadSchedules(c.operationsModule) : [];
  const worker = q.worker({
    operations,
    ...(schedules.length > 0 ? { schedules } : {}),
    concurrency: c.concurrency,
    leaseMs: c.leaseMs,
    clockSkewToleranceMs: c.clockSkewToleranceMs,
    reclaimIntervalMs: c.reclaimIntervalMs,
    reconcileIntervalMs: c.reconcileIntervalMs,
    pollIntervalMs: c.pollIntervalMs,
    queues: c.queues,
    shutdownTimeoutMs: 5_000,
    ...(c.ownerId ? { ownerId: c.ownerId } : {}),
  });
  // Infrastructure errors of the loops are logged by the worker; listening keeps them non-fatal.
  worker.on('error', () => undefined);
  let stopping = false;
  process.on('SIGTERM', () => {
    if (stopping) return;
    stopping = true;
    q.close().then(
      () => {
        process.stdout.write('stopped\n');
        process.exit(0);
      },
      (err: unknown) => {
        process.stderr.write(`worker-child: stop failed: ${String(err)}\n`);
        process.exit(1);
      },
    );
  });
  await worker.start();
  process.stdout.write('ready\n');
  if (c.enqueue) {
    let waitIdle = true;
    for (const { flavour, n, key } of c.enqueue) {
      const op = operations.find((o) => o.name === operationName(flavour));
      if (!op) throw new Error(`worker-child: this child does not serve flavour ${flavour}`);
      // Each after the worker went idle (nothing held, its last claim answered), as an agent's
      // follow-up job would be: that is when a hand-off may happen. A job found by its key was
      // enqueued before this child started; the next one follows without waiting.
      if (waitIdle) {
        while (worker.activeCount > 0) await sleep(IDLE_CHECK_MS);
        await sleep(IDLE_SETTLE_MS);
      }
      const job = await q.enqueue(op, { n }, { key });
      waitIdle = !job.deduplicated;
      process.stdout.write(
        `enqueued ${job.id} ${job.state} ${job.deduplicated ? 'existing' : 'created'} ${key}\n`,
      );
    }
  }
}

main().catch((err: unknown) => {
  process.stderr.write(
    `worker-child: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(2);
});
