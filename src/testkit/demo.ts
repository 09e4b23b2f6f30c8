/**
 * `reckon demo`: the promise, shown. A few hundred jobs against a fake payment-like service on
 * loopback, worker processes killed with SIGKILL at seeded random moments and at fault points,
 * restarted, until everything settles; then the count of effects the service saw twice: 0.
 *
 * The exit code is the caller's: non-zero when `duplicates > 0` or `lost > 0`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import cliProgress from 'cli-progress';
import Table from 'cli-table3';
import { openQueue } from '../index.js';
import { mulberry32 } from '../runtime/faults.js';
import type { Queue } from '../runtime/queue.js';
import type { WorkerChildConfig } from './child-config.js';
import { randomPolicy, startDownstream } from './downstream.js';
import { startWorkerChild, type WorkerChild } from './fleet.js';
import { downstreamOperation, type Flavour } from './operations.js';
import { isSettled, judge } from './verdict.js';

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
  kills: { sigkill: number; atFaultPoints: number };
  violations: string[];
  durationMs: number;
  ok: boolean;
}

const FLAVOUR_MIX: Flavour[] = ['lookup', 'lookup', 'idempotent', 'idempotent', 'none'];
/** The timings of the demo's workers: short, so that recovery shows within seconds. */
const CHILD: Partial<WorkerChildConfig> = {
  // Few slots per worker, so that the run lasts long enough for the chaos to matter.
  concurrency: 2,
  leaseMs: 800,
  clockSkewToleranceMs: 100,
  reclaimIntervalMs: 100,
  reconcileIntervalMs: 100,
  pollIntervalMs: 25,
  // Above the service's slowest answer (600 ms), so a lookup never runs while a request is in flight.
  timeoutMs: 1_500,
  graceMs: 300,
  maxAttempts: 8,
};
const FAULT_MENU = [
  'after-attempt-commit=kill%0.04',
  'after-send-before-response=kill%0.04',
  'after-response-before-commit=kill%0.04',
  'lease-expired-while-alive=pause:1200%0.05',
  'after-response-before-commit=pause:1500%0.05',
];
const CHAOS_MS_MAX = 20_000;
const SETTLE_MS_MAX = 60_000;

export async function runDemo(options: DemoOptions = {}): Promise<DemoReport> {
  const seed = options.seed ?? Math.floor(Math.random() * 1_000_000);
  const jobs = options.jobs ?? 300;
  const workers = options.workers ?? 3;
  const out = options.out ?? process.stdout;
  if (!Number.isInteger(jobs) || jobs < 1 || jobs > 10_000)
    throw new RangeError('demo jobs must be an integer from 1 to 10000');
  if (!Number.isInteger(workers) || workers < 1 || workers > 32)
    throw new RangeError('demo workers must be an integer from 1 to 32');
  const tempDir = options.storeUrl ? undefined : mkdtempSync(join(tmpdir(), 'reckon-demo-'));
  const storeUrl = options.storeUrl ?? `sqlite:${join(tempDir!, 'reckon.db')}`;
  const started = Date.now();
  const rand = mulberry32(seed);
  const downstream = await startDownstream({
    // The jobs that model a service without dedup must not be saved by one.
    honourIdempotencyKey: (key) => !key.startsWith('none-'),
    behaviour: randomPolicy(seed, {
      ok: 88,
      fail: 2,
      error: 3,
      reset: 3,
      drop: 4,
      delayProbability: 1,
      delayMsMax: 600,
    }),
  });
  let q: Queue | undefined;
  const fleet = new Fleet(workers, storeUrl, downstream.url, seed);
  try {
    q = await openQueue({ store: storeUrl, actor: 'demo' });
    if (!options.json)
      out.write(
        `reckon demo: ${jobs} jobs, ${workers} worker processes, seed ${seed}, store ${storeUrl}\n` +
          `downstream ${downstream.url} (Idempotency-Key and lookup by key); workers are killed with SIGKILL as they run\n`,
      );
    // A reused store may hold settled jobs of earlier runs: progress counts this run's only.
    const baseline = await settledCount(q);
    const ids = await enqueueAll(q, downstream.url, jobs, `${seed}.${started.toString(36)}`);
    const bar = options.json ? undefined : progressBar(out, jobs);
    fleet.startAll(() => randomFaults(rand));
    // Chaos: a SIGKILL at a seeded random moment, every 0.7 to 2 s, while work remains.
    const chaosUntil = Date.now() + CHAOS_MS_MAX;
    let nextKill = Date.now() + 700 + rand() * 1_300;
    const deadline = Date.now() + CHAOS_MS_MAX + SETTLE_MS_MAX;
    let calm = false;
    for (;;) {
      const settled = (await settledCount(q)) - baseline;
      bar?.update(settled, {
        kills: fleet.kills.sigkill + fleet.kills.atFaultPoints,
        effects: downstream.stats.effects,
        dups: downstream.duplicates().length,
      });
      if (settled >= jobs && (await isSettled(q))) break;
      if (Date.now() > deadline) break;
      if (!calm && (Date.now() > chaosUntil || settled >= jobs * 0.85)) {
        // Last stretch without chaos: restart every worker without fault points.
        calm = true;
        await fleet.calm();
      }
      if (!calm && Date.now() >= nextKill) {
        await fleet.killOne(rand, () => randomFaults(rand));
        nextKill = Date.now() + 700 + rand() * 1_300;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    bar?.stop();
    await fleet.stopAll();
    const verdict = await judge(q, downstream, ids);
    const report: DemoReport = {
      seed,
      storeUrl,
      delivered: verdict.jobs,
      succeeded: verdict.byState.SUCCEEDED,
      failed: verdict.byState.FAILED,
      inReview: verdict.byState.NEEDS_REVIEW,
      reconciledByLookup: verdict.resolvedBy.lookup,
      reconciledByLateWorker: verdict.resolvedBy.lateWorker,
      retriedWithSameKey: verdict.resolvedBy.sameKey,
      retriedNotSent: verdict.expiredBeforeDispatch,
      lost: verdict.unsettled.length + Math.max(0, jobs - verdict.jobs),
      duplicates: verdict.duplicates.length,
      effects: downstream.stats.effects,
      requests: downstream.stats.requests,
      kills: { ...fleet.kills },
      violations: verdict.violations,
      durationMs: Date.now() - started,
      ok: false,
    };
    report.ok = report.duplicates === 0 && report.lost === 0 && report.violations.length === 0;
    const colour = (out as { isTTY?: boolean }).isTTY === true;
    out.write(options.json ? `${JSON.stringify(report, null, 2)}\n` : renderReport(report, colour));
    return report;
  } finally {
    await fleet.killAll();
    await q?.close();
    await downstream.close();
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  }
}

/** Enqueues the demo's jobs; keys carry a run tag, so a reused store never dedupes them into old jobs. */
async function enqueueAll(q: Queue, url: string, jobs: number, runTag: string): Promise<string[]> {
  const ops = new Map(FLAVOUR_MIX.map((f) => [f, downstreamOperation(f, { url })]));
  const byFlavour = new Map<Flavour, { input: { n: number }; key: string }[]>();
  for (let n = 0; n < jobs; n++) {
    const flavour = FLAVOUR_MIX[n % FLAVOUR_MIX.length]!;
    const list = byFlavour.get(flavour) ?? [];
    list.push({ input: { n }, key: `${flavour}-${runTag}-${n}` });
    byFlavour.set(flavour, list);
  }
  const ids: string[] = [];
  for (const [flavour, items] of byFlavour)
    ids.push(...(await q.enqueueMany(ops.get(flavour)!, items)).map((j) => j.id));
  return ids;
}

async function settledCount(q: Queue): Promise<number> {
  const stats = await q.store.statsGet();
  return stats.queues.reduce(
    (n, s) => n + s.counts.SUCCEEDED + s.counts.FAILED + s.counts.CANCELLED + s.counts.NEEDS_REVIEW,
    0,
  );
}

function randomFaults(rand: () => number): string {
  // Half of the workers also carry a fault point that may kill (or freeze) them mid-attempt.
  return rand() < 0.5 ? FAULT_MENU[Math.floor(rand() * FAULT_MENU.length)]! : '';
}

/** Worker processes in fixed slots: a dead one is restarted; chaos kills one at a time. */
class Fleet {
  private readonly slots: (WorkerChild | undefined)[];
  private readonly killedByUs = new WeakSet<WorkerChild>();
  private running = true;
  private childSeed: number;
  readonly kills = { sigkill: 0, atFaultPoints: 0 };

  constructor(
    size: number,
    private readonly storeUrl: string,
    private readonly downstreamUrl: string,
    seed: number,
  ) {
    this.slots = new Array<WorkerChild | undefined>(size).fill(undefined);
    this.childSeed = seed;
  }

  startAll(faults: () => string): void {
    for (let i = 0; i < this.slots.length; i++) this.start(i, faults());
  }

  private start(slot: number, faults: string): void {
    const child = startWorkerChild({
      ...CHILD,
      storeUrl: this.storeUrl,
      downstreamUrl: this.downstreamUrl,
      ownerId: `demo-${slot}-${++this.childSeed}`,
      faults,
      faultsSeed: this.childSeed,
    });
    this.slots[slot] = child;
    void child.exited.then(() => {
      if (this.killedByUs.has(child)) return;
      // Died by itself: a fault point fired (kill), or it crashed; either way, restart it.
      this.kills.atFaultPoints++;
      if (this.running && this.slots[slot] === child)
        setTimeout(() => {
          if (this.running && this.slots[slot] === child) this.start(slot, '');
        }, 100);
    });
  }

  async killOne(rand: () => number, faults: () => string): Promise<void> {
    const live = this.slots.map((c, i) => [c, i] as const).filter(([c]) => c?.alive);
    if (live.length === 0) return;
    const [child, slot] = live[Math.floor(rand() * live.length)]!;
    this.killedByUs.add(child!);
    this.kills.sigkill++;
    await child!.kill();
    this.start(slot, faults());
  }

  /** Replaces every worker by one without fault points. */
  async calm(): Promise<void> {
    for (let i = 0; i < this.slots.length; i++) {
      const child = this.slots[i];
      if (child) {
        this.killedByUs.add(child);
        if (child.alive) this.kills.sigkill++;
        await child.kill();
      }
      this.start(i, '');
    }
  }

  /** Graceful: SIGTERM, each worker finishes what it holds. */
  stopAll(): Promise<unknown> {
    return this.each((c) => c.stop());
  }

  killAll(): Promise<unknown> {
    return this.each((c) => c.kill());
  }

  private each(end: (c: WorkerChild) => Promise<unknown>): Promise<unknown> {
    this.running = false;
    const live = this.slots.filter((c): c is WorkerChild => c !== undefined);
    for (const c of live) this.killedByUs.add(c);
    return Promise.all(live.map(end));
  }
}

function progressBar(out: NodeJS.WritableStream, total: number): cliProgress.SingleBar {
  const bar = new cliProgress.SingleBar(
    {
      stream: out,
      format:
        'settled {bar} {value}/{total} | effects {effects} | kills {kills} | duplicates {dups}',
      barsize: 30,
      hideCursor: true,
      noTTYOutput: true,
      notTTYSchedule: 2_000,
    },
    cliProgress.Presets.shades_classic,
  );
  bar.start(total, 0, { effects: 0, kills: 0, dups: 0 });
  return bar;
}

function renderReport(r: DemoReport, colour: boolean): string {
  const table = new Table({
    head: ['', 'jobs'],
    colAligns: ['left', 'right'],
    style: { compact: true, ...(colour ? {} : { head: [], border: [] }) },
  });
  table.push(
    ['delivered (enqueued)', r.delivered],
    ['succeeded', r.succeeded],
    ['  reconciled by lookup', r.reconciledByLookup],
    ['  reconciled by the late worker', r.reconciledByLateWorker],
    ['  retried with the same key', r.retriedWithSameKey],
    ['  retried, provably not sent', r.retriedNotSent],
    ['in review (NEEDS_REVIEW)', r.inReview],
    ['failed (definitive answer)', r.failed],
    ['lost', r.lost],
    ['duplicates at the downstream (must be 0)', r.duplicates],
    ['kills: SIGKILL / at fault points', `${r.kills.sigkill} / ${r.kills.atFaultPoints}`],
  );
  const verdict = r.ok
    ? `every effect happened at most once; every job settled (${(r.durationMs / 1000).toFixed(1)} s, seed ${r.seed})`
    : `BROKEN PROMISE: ${r.duplicates} duplicates, ${r.lost} lost\n${r.violations.slice(0, 20).join('\n')}`;
  return `${table.toString()}\n${verdict}\n`;
}
