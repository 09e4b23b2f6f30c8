/**
 * `reckon work --operations <module>`: runs a worker until SIGINT or SIGTERM.
 *
 * The first signal stops gracefully: no new claims, in-flight attempts finish (or are aborted
 * after --shutdown-timeout-ms), then the store closes. A second signal exits at once; that is
 * safe because expired leases are reclaimed and reconciled by the next worker.
 */
import { constants } from 'node:os';
import { performance } from 'node:perf_hooks';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { createLogger, type LoggerOptions } from '../../observe/logger.js';
import { Metrics } from '../../observe/metrics.js';
import { parseRetentionSpec, type RetentionOptions } from '../../runtime/retention.js';
import type { Worker } from '../../runtime/worker.js';
import { parseAllowedHosts } from '../../server/host-check.js';
import { startMetricsServer, type HttpEndpoint } from '../../server/metrics-server.js';
import { readinessRoute, type WorkerPhase } from '../../server/readiness.js';
import { loadOperations, loadSchedules, OPERATIONS_HELP } from '../operations-module.js';
import { formatDuration, printJson, println } from '../output.js';
import { intOption, listOption } from '../parse.js';
import { addJsonOption, addStoreOption, openCliQueue, type StoreFlags } from '../store-option.js';

interface WorkFlags extends StoreFlags {
  operations: string;
  concurrency: number;
  prefetch: number;
  leaseMs: number;
  queue?: string[];
  logLevel: NonNullable<LoggerOptions['level']>;
  shutdownTimeoutMs: number;
  metricsPort?: number;
  metricsHost: string;
  allowedHosts?: string;
  retention?: RetentionOptions;
  json?: boolean;
}

function retentionOption(value: string): RetentionOptions {
  try {
    return parseRetentionSpec(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

const COUNTED = [
  'succeeded',
  'failed',
  'unknown',
  'review',
  'reconciled',
  'retrying',
  'fenced',
] as const;
type Counted = (typeof COUNTED)[number];

export function registerWork(program: Command): void {
  const cmd = program
    .command('work')
    .summary('run a worker for the operations of a module')
    .description(
      'Claims jobs of the operations exported by --operations, runs each through the dispatch ' +
        'boundary, and recovers what crashed workers left behind (expired leases, UNKNOWN ' +
        'attempts). Logs are JSON lines on stderr; a one-line summary goes to stdout on stop.\n\n' +
        'Ctrl-C (SIGINT) or SIGTERM stops gracefully: jobs in flight finish first. A second ' +
        'signal exits at once (130 / 143); leased jobs are then recovered by the next worker.',
    )
    .requiredOption('--operations <module>', OPERATIONS_HELP)
    .option('--concurrency <n>', 'jobs run at the same time', intOption(1, 10_000), 10)
    .option(
      '--prefetch <n>',
      'jobs claimed ahead of a free slot (each holds a lease while it waits; raise it for many short jobs)',
      intOption(0, 10_000),
      0,
    )
    .option(
      '--lease-ms <ms>',
      'lease length; heartbeats renew it',
      intOption(100, 86_400_000),
      30_000,
    )
    .option(
      '--queue <names>',
      'queue(s) to work, repeatable or comma-separated (default: "default")',
      listOption,
    )
    .option(
      '--shutdown-timeout-ms <ms>',
      'after a stop signal, how long jobs in flight may run before they are aborted',
      intOption(0, 86_400_000),
      30_000,
    )
    .option(
      '--metrics-port <port>',
      "serve Prometheus metrics on this port: this worker's counters and the store's gauges, with /healthz (alive) and /readyz (taking jobs: started, not stopping, store answering) (0 = any free port)",
      intOption(0, 65_535),
    )
    .option('--metrics-host <host>', 'address for --metrics-port', '127.0.0.1')
    .option(
      '--allowed-hosts <names>',
      'more Host header names --metrics-port answers, besides its address, localhost and IP ' +
        'addresses (DNS rebinding); * for any (env RECKON_SERVE_ALLOWED_HOSTS)',
      process.env.RECKON_SERVE_ALLOWED_HOSTS,
    )
    .option(
      '--retention <spec>',
      'delete terminal histories after: off, or e.g. SUCCEEDED=7d,CANCELLED=7d,FAILED=30d (the default)',
      retentionOption,
    )
    .addOption(
      new Option('--log-level <level>', 'log level')
        .choices(['trace', 'debug', 'info', 'warn', 'error', 'silent'])
        .default('info'),
    )
    .addHelpText(
      'after',
      '\nExample:\n  $ reckon work --operations ./ops.js --concurrency 20 --queue emails,payments',
    );
  addStoreOption(cmd);
  addJsonOption(cmd, 'print the summary on stop as JSON');
  cmd.action(runWork);
}

async function runWork(flags: WorkFlags): Promise<void> {
  const operations = await loadOperations(flags.operations);
  // Schedules the module exports are ticked by this worker (each slot one job, fleet-wide).
  const schedules = await loadSchedules(flags.operations);
  const logger = createLogger({ level: flags.logLevel });
  const metrics = flags.metricsPort === undefined ? undefined : new Metrics();
  const q = await openCliQueue(flags.store, {
    mustExist: true,
    operations,
    logger,
    ...(metrics ? { observer: metrics.observer } : {}),
  });
  let endpoint: HttpEndpoint | undefined;
  let phase: WorkerPhase = 'starting';
  if (metrics) {
    metrics.attachStore(q.store);
    try {
      endpoint = await startMetricsServer({
        metrics,
        port: flags.metricsPort!,
        host: flags.metricsHost,
        // The same check as `reckon serve`: a web page cannot read the metrics by DNS rebinding.
        allowedHosts: parseAllowedHosts(flags.allowedHosts),
        routes: [
          readinessRoute({
            phase: () => phase,
            storeAnswers: () => q.store.clockNow(),
            clock: q.clock,
          }),
        ],
      });
    } catch (err) {
      await q.close();
      throw err;
    }
    logger.info({ url: `${endpoint.url}/metrics` }, 'serving metrics');
    process.stderr.write(`reckon: metrics at ${endpoint.url}/metrics\n`);
  }
  const started = performance.now();
  let worker: Worker;
  try {
    worker = q.worker({
      operations,
      ...(schedules.length > 0 ? { schedules } : {}),
      concurrency: flags.concurrency,
      prefetch: flags.prefetch,
      leaseMs: flags.leaseMs,
      queues: flags.queue ?? ['default'],
      shutdownTimeoutMs: flags.shutdownTimeoutMs,
      ...(flags.retention !== undefined ? { retention: flags.retention } : {}),
    });
  } catch (err) {
    await q.close();
    throw err;
  }
  const counts = Object.fromEntries(COUNTED.map((k) => [k, 0])) as Record<Counted, number>;
  for (const k of COUNTED) worker.on(k, () => void counts[k]++);
  const signal = await runUntilSignal(worker, (p) => (phase = p));
  await endpoint?.close();
  await q.close();
  const summary = {
    stoppedBy: signal,
    ranMs: Math.round(performance.now() - started),
    ownerId: worker.ownerId,
    operations: operations.map((o) => o.name),
    ...counts,
  };
  if (flags.json) return printJson(summary);
  println(
    `worker stopped by ${signal} after ${formatDuration(summary.ranMs)}: ` +
      `${counts.succeeded} succeeded, ${counts.failed} failed, ${counts.retrying} to retry, ` +
      `${counts.unknown} unknown, ${counts.reconciled} reconciled, ${counts.review} to review` +
      (counts.fenced > 0 ? `, ${counts.fenced} fenced out` : ''),
  );
}

/** Starts the worker and resolves with the first stop signal; a second one exits at once. */
async function runUntilSignal(
  worker: Worker,
  onPhase: (phase: WorkerPhase) => void,
): Promise<NodeJS.Signals> {
  let first: NodeJS.Signals | undefined;
  let stopped!: (sig: NodeJS.Signals) => void;
  const got = new Promise<NodeJS.Signals>((resolve) => (stopped = resolve));
  const onSignal = (sig: NodeJS.Signals) => {
    if (first !== undefined) {
      process.stderr.write(`reckon: second ${sig}: exiting now; leased jobs will be reclaimed\n`);
      process.exit(128 + constants.signals[sig]);
    }
    first = sig;
    onPhase('stopping');
    process.stderr.write(
      `reckon: ${sig}: stopping after jobs in flight (${sig} again to exit now)\n`,
    );
    stopped(sig);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  await worker.start();
  if (first === undefined) onPhase('ready');
  const sig = await got;
  // The second-signal handler stays installed until the worker has stopped.
  await worker.stop();
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  return sig;
}
