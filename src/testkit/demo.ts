/**
 * `reckon demo`: the promise, shown. A few hundred jobs against a fake payment-like service on
 * loopback, worker processes killed with SIGKILL at seeded random moments and at fault points,
 * restarted, until everything settles; then the count of effects the service saw twice: 0.
 *
 * A short chaos run (chaos.ts) with the demo's numbers, a progress bar and the closing table.
 * The exit code is the caller's: non-zero when `duplicates > 0` or `lost > 0`.
 */
import { runChaos, type ChaosReport } from './chaos.js';
import { progressBar, renderChaosReport, type ProgressView } from './chaos-output.js';

export interface DemoOptions {
  /** Default: a fresh SQLite file in a temp directory, removed afterwards. */
  storeUrl?: string;
  /** Jobs to enqueue. Default 300. */
  jobs?: number;
  /** Worker processes. Default 3. */
  workers?: number;
  /** Seed of every random choice (behaviours, kill moments, fault points); printed, so a run replays. */
  seed?: number;
  /** Print the report as JSON instead of a progress bar and table. */
  json?: boolean;
  /** Where to print. Default process.stdout. */
  out?: NodeJS.WritableStream;
}

export interface DemoReport {
  seed: number;
  storeUrl: string;
  /** Jobs durably enqueued. */
  delivered: number;
  succeeded: number;
  failed: number;
  inReview: number;
  reconciledByLookup: number;
  reconciledByLateWorker: number;
  retriedWithSameKey: number;
  /** Attempts whose worker died before dispatch: provably not sent, retried. */
  retriedNotSent: number;
  /** Jobs not settled at the end (QUEUED, LEASED, UNKNOWN): must be 0. */
  lost: number;
  /** Request keys whose effect the downstream committed more than once: must be 0. */
  duplicates: number;
  /** Effects the downstream committed, and requests it received. */
  effects: number;
  requests: number;
  kills: { sigkill: number; atFaultPoints: number; onReceipt: number };
  violations: string[];
  durationMs: number;
  ok: boolean;
}

/** How long the chaos lasts at most, and how long the rest may take to settle. */
const CHAOS_MS_MAX = 20_000;
const SETTLE_MS_MAX = 60_000;

export async function runDemo(options: DemoOptions = {}): Promise<DemoReport> {
  const jobs = options.jobs ?? 300;
  const workers = options.workers ?? 3;
  const out = options.out ?? process.stdout;
  if (!Number.isInteger(jobs) || jobs < 1 || jobs > 10_000)
    throw new RangeError('demo jobs must be an integer from 1 to 10000');
  if (!Number.isInteger(workers) || workers < 1 || workers > 32)
    throw new RangeError('demo workers must be an integer from 1 to 32');
  let bar: ProgressView | undefined;
  const chaos = await runChaos({
    ...(options.storeUrl ? { storeUrl: options.storeUrl } : {}),
    jobs,
    workers,
    seed: options.seed ?? Math.floor(Math.random() * 1_000_000),
    scenario: 'mixed',
    // A SIGKILL at a seeded random moment, every 0.7 to 2 s, while work remains.
    kills: { everyMs: 1_350 },
    chaosMs: CHAOS_MS_MAX,
    deadlineMs: CHAOS_MS_MAX + SETTLE_MS_MAX,
    onStart: (s) => {
      if (options.json) return;
      out.write(
        `reckon demo: ${s.jobs} jobs, ${s.workers} worker processes, seed ${s.seed}, store ${s.storeUrl}\n` +
          `downstream ${s.downstreamUrl} (Idempotency-Key and lookup by key); workers are killed with SIGKILL as they run\n`,
      );
      bar = progressBar(out, s.jobs);
    },
    onProgress: (p) => bar?.update(p),
  });
  bar?.stop();
  const report = demoReport(chaos);
  const colour = (out as { isTTY?: boolean }).isTTY === true;
  out.write(
    options.json ? `${JSON.stringify(report, null, 2)}\n` : renderChaosReport(chaos, colour),
  );
  return report;
}

function demoReport(r: ChaosReport): DemoReport {
  return {
    seed: r.seed,
    storeUrl: r.storeUrl,
    delivered: r.delivered,
    succeeded: r.succeeded,
    failed: r.failed,
    inReview: r.inReview,
    reconciledByLookup: r.reconciledByLookup,
    reconciledByLateWorker: r.reconciledByLateWorker,
    retriedWithSameKey: r.retriedWithSameKey,
    retriedNotSent: r.retriedNotSent,
    lost: r.lost,
    duplicates: r.duplicates,
    effects: r.effects ?? 0,
    requests: r.requests ?? 0,
    kills: {
      sigkill: r.kills.sigkill,
      atFaultPoints: r.kills.atFaultPoints,
      onReceipt: r.kills.onReceipt,
    },
    violations: r.violations.map(
      (v) =>
        `job ${v.jobId} (key ${v.requestKey || '-'}, ${v.state}, ${v.effects} effects): ${v.message}`,
    ),
    durationMs: r.durationMs,
    ok: r.ok,
  };
}
