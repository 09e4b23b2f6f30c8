/**
 * The chaos harness (`reckon chaos`, `runChaos` in reckon/testkit): a workload against a store,
 * worker processes killed with SIGKILL at seeded random moments, at fault points and as their
 * requests arrive, paused past their leases, a downstream that drops responses, resets and
 * answers 5xx; everything that dies is restarted; when the queue has settled, the business
 * outcome of every job is judged by the downstream's ledger (verdict.ts). Every random choice
 * derives from one seed, printed in the report, so a failing run replays.
 *
 * By default the workload is the test kit's own operations against its fake downstream
 * (operations.ts). For your own operations, give `operationsModule` (loaded by every worker
 * process), a `workload` and a `ledger` that counts the effects your downstream committed per
 * request key; see docs/chaos.md.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadOperations } from '../runtime/operations-module.js';
import { ReckonError } from '../core/errors.js';
import { openQueue } from '../index.js';
import { mulberry32 } from '../runtime/faults.js';
import type { Queue } from '../runtime/queue.js';
import { redactStoreUrl } from '../store/open.js';
import { ChaosFleet } from './chaos-fleet.js';
import {
  CHAOS_SCENARIOS,
  type ChaosKillPolicy,
  type ChaosOptions,
  type ChaosProgress,
  type ChaosReport,
  type ChaosWorkerSettings,
  type ChaosWorkload,
} from './chaos-types.js';
import {
  armKillOnReceipt,
  builtInWorkload,
  enqueueAll,
  ledgerFor,
  replayable,
} from './chaos-workload.js';
import { CHILD_DEFAULTS } from './child-config.js';
import {
  randomPolicy,
  startDownstream,
  type Downstream,
  type RandomPolicyWeights,
  weightsProblem,
} from './downstream.js';
import { isSettled, jobDetails, judgeDetails, type Verdict, type Violation } from './verdict.js';

export * from './chaos-types.js';

/** Short timings, so that recovery shows within seconds. */
export const CHAOS_WORKER_DEFAULTS: ChaosWorkerSettings = {
  ...CHILD_DEFAULTS,
  // Few slots per worker, so that the run lasts long enough for the chaos to matter.
  concurrency: 2,
  leaseMs: 800,
  reclaimIntervalMs: 100,
  reconcileIntervalMs: 100,
  // Above the downstream's slowest answer (600 ms), so a lookup never runs while a request is in flight.
  timeoutMs: 1_500,
  graceMs: 300,
  maxAttempts: 8,
};

/** Mostly fine, and every kind of trouble a real service has; every request is a little slow. */
export const DEFAULT_DOWNSTREAM_WEIGHTS: RandomPolicyWeights = {
  ok: 88,
  fail: 2,
  error: 3,
  reset: 3,
  drop: 4,
  delayProbability: 1,
  delayMsMax: 600,
};

/**
 * Every fault point (DESIGN §7). Probabilities are per hit; each spec fires once per process.
 * `before-attempt-commit` is hit on every claim poll, hence its small probability.
 *
 * The pauses outlive the lease: before the marker (the fence must stop the worker) and after the
 * answer (the late worker's report is evidence). A pause freezes the whole process, so it also
 * holds the process's other attempts wherever they are, possibly between their marker and their
 * send; it is therefore kept shorter than `timeoutMs + graceMs`. Longer freezes open the window
 * between the marker and the send, a documented limit (README), not a promise reckon makes.
 */
export function defaultFaultMenu(
  w: Pick<ChaosWorkerSettings, 'leaseMs' | 'timeoutMs' | 'graceMs'>,
): string[] {
  const pauseMax = w.timeoutMs + w.graceMs - PAUSE_MARGIN_MS;
  const pause = (leases: number) => Math.round(Math.min(w.leaseMs * leases, pauseMax));
  return [
    'before-attempt-commit=kill%0.005',
    'after-attempt-commit=kill%0.1',
    'after-send-before-response=kill%0.1',
    'after-response-before-commit=kill%0.1',
    `lease-expired-while-alive=pause:${pause(1.5)}%0.1`,
    `after-response-before-commit=pause:${pause(1.9)}%0.1`,
    'reclaimer-startup=kill%0.2',
  ];
}

/** What a woken process needs to send what it held, before a lookup may run. */
const PAUSE_MARGIN_MS = 250;

const TICK_MS = 100;
/** After the deadline, how long the calm workers may still take to report their follow-ups' ids. */
const FOLLOW_UP_IDS_WAIT_MS = 15_000;
/** Workers that fail to start this often mean a broken setup (module, store), not chaos. */
const START_FAILURES_MAX = 5;

export async function runChaos(options: ChaosOptions = {}): Promise<ChaosReport> {
  const o = validate(options);
  const started = Date.now();
  const rand = mulberry32(o.seed);
  const runTag = `${o.seed}.${started.toString(36)}`;
  const tempDir = options.storeUrl ? undefined : mkdtempSync(join(tmpdir(), 'reckon-chaos-'));
  const storeUrl = options.storeUrl ?? `sqlite:${join(tempDir!, 'reckon.db')}`;
  const { custom, userOps, downstream } = await setUp(o, options, runTag);
  // The built-in workload, decided up front; its last `followUps` jobs are the workers' own.
  const builtIn = custom ? [] : builtInWorkload(o, downstream!.url, runTag);
  const followUps = builtIn.slice(builtIn.length - o.followUps);
  const fleet = newFleet({ o, options, storeUrl, downstreamUrl: downstream?.url, followUps });
  let q: Queue | undefined;
  try {
    q = await openQueue({ store: storeUrl, actor: 'chaos', operations: userOps });
    options.onStart?.({
      seed: o.seed,
      storeUrl: redactStoreUrl(storeUrl),
      jobs: o.jobs,
      workers: o.workers,
      scenario: custom ? 'custom' : o.scenario,
      downstreamUrl: downstream?.url ?? null,
    });
    // A reused store may hold settled jobs of earlier runs: progress counts this run's only.
    const baseline = await settledCount(q);
    const items = custom
      ? await o.workload!({
          jobs: o.jobs,
          seed: o.seed,
          random: mulberry32(o.seed ^ 0x5eed),
          runTag,
        })
      : builtIn.slice(0, builtIn.length - followUps.length);
    const ids = await enqueueAll(q, items);
    const expected = ids.length + followUps.length;
    const faults = () => (rand() < o.kills.faultShare ? pick(o.kills.faultMenu, rand) : '');
    if (downstream) armKillOnReceipt(downstream, fleet, o.seed, runTag, o.kills.onReceipt);
    fleet.startAll(faults);
    let settled = await chaosLoop(q, fleet, downstream, o, {
      baseline,
      jobs: expected,
      rand,
      faults,
      started,
    });
    if (downstream) downstream.onRequest = undefined;
    // Each follow-up's id, from the child that enqueued it (or, if it died before saying so, from
    // its successor, which finds the job by its key): the calm workers walk their lists to the end.
    if (followUps.length > 0)
      settled =
        (await waitFor(
          () => fleet.enqueued.size >= followUps.length,
          started + o.deadlineMs + FOLLOW_UP_IDS_WAIT_MS,
        )) && settled;
    await fleet.stopAll();
    ids.push(...[...fleet.enqueued.values()].map((e) => e.id));
    const details = await jobDetails(q, ids);
    const ledger = await ledgerFor(options.ledger, downstream, details);
    const verdict = judgeDetails(details, ledger, { complete: true });
    return report(o, {
      storeUrl,
      custom,
      expected,
      verdict,
      fleet,
      downstream,
      settled,
      started,
    });
  } finally {
    await fleet.killAll();
    await q?.close();
    await downstream?.close();
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  }
}

/** Your operations (the pauses bounded by their timeouts), or the built-in downstream, started. */
async function setUp(
  o: ReturnType<typeof validate>,
  options: ChaosOptions,
  runTag: string,
): Promise<{
  custom: boolean;
  userOps: Awaited<ReturnType<typeof loadOperations>>;
  downstream: Awaited<ReturnType<typeof startDownstream>> | undefined;
}> {
  const custom = o.operationsModule !== undefined;
  const userOps = custom ? await loadOperations(o.operationsModule!) : [];
  // Your operations' own timeouts bound the pauses (see defaultFaultMenu).
  if (custom && !options.kills?.faultMenu)
    o.kills.faultMenu = defaultFaultMenu({
      leaseMs: o.worker.leaseMs,
      timeoutMs: Math.min(...userOps.map((op) => op.timeoutMs + op.reconcile.graceMs)),
      graceMs: 0,
    });
  const downstream = custom
    ? undefined
    : await startDownstream({
        // Only the `idempotent` flavour's service deduplicates: the others must not be saved by it.
        honourIdempotencyKey: (key) => key.startsWith('idempotent-'),
        behaviour: replayable(
          randomPolicy(o.seed, options.downstream ?? DEFAULT_DOWNSTREAM_WEIGHTS),
          runTag,
        ),
      });
  return { custom, userOps, downstream };
}

/** The worker processes; each slot's share of the follow-ups, which its worker enqueues. */
function newFleet(p: {
  o: ReturnType<typeof validate>;
  options: ChaosOptions;
  storeUrl: string;
  downstreamUrl: string | undefined;
  followUps: ReturnType<typeof builtInWorkload>;
}): ChaosFleet {
  const { o, followUps } = p;
  return new ChaosFleet(
    o.workers,
    {
      ...o.worker,
      storeUrl: p.storeUrl,
      ...(p.downstreamUrl ? { downstreamUrl: p.downstreamUrl } : {}),
      ...(o.operationsModule !== undefined ? { operationsModule: o.operationsModule } : {}),
    },
    o.seed,
    p.options.workerEnv,
    (slot) =>
      followUps
        .filter((_, k) => k % o.workers === slot)
        .map(({ flavour, n, key }) => ({ flavour, n, key })),
  );
}

type Resolved = Required<
  Pick<
    ChaosOptions,
    'jobs' | 'followUps' | 'workers' | 'seed' | 'scenario' | 'chaosMs' | 'calmAt' | 'deadlineMs'
  >
> & {
  kills: Required<ChaosKillPolicy>;
  worker: ChaosWorkerSettings;
  operationsModule?: string;
  workload?: ChaosWorkload;
  onProgress?: (p: ChaosProgress) => void;
};

function validate(options: ChaosOptions): Resolved {
  const int = (name: string, value: number, min: number, max: number): number => {
    if (!Number.isInteger(value) || value < min || value > max)
      throw new RangeError(`chaos ${name} must be an integer from ${min} to ${max}, got ${value}`);
    return value;
  };
  const share = (name: string, value: number): number => {
    if (!(value >= 0 && value <= 1)) throw new RangeError(`chaos ${name} must be from 0 to 1`);
    return value;
  };
  const scenario = options.scenario ?? 'mixed';
  if (!CHAOS_SCENARIOS.includes(scenario))
    throw new RangeError(`chaos scenario must be one of ${CHAOS_SCENARIOS.join(', ')}`);
  const custom = options.operationsModule !== undefined;
  if (custom && (!options.workload || !options.ledger))
    throw new TypeError('chaos with your own operationsModule needs a workload and a ledger');
  if (!custom && (options.workload || options.ledger))
    throw new TypeError('chaos workload and ledger are for your own operationsModule');
  if (options.downstream) {
    if (custom) throw new TypeError('chaos downstream weights are for the built-in downstream');
    const problem = weightsProblem(options.downstream);
    if (problem) throw new RangeError(`chaos downstream ${problem}`);
  }
  const worker = { ...CHAOS_WORKER_DEFAULTS, ...(options.worker ?? {}) };
  const k = options.kills ?? {};
  const jobs = int('jobs', options.jobs ?? 300, 1, 100_000);
  if (custom && options.followUps)
    throw new TypeError('chaos followUps are jobs of the built-in workload, not of yours');
  return {
    jobs,
    followUps: int('followUps', options.followUps ?? 0, 0, jobs),
    workers: int('workers', options.workers ?? 3, 1, 64),
    seed: int('seed', options.seed ?? Math.floor(Math.random() * 2 ** 31), 0, 2 ** 32 - 1),
    scenario,
    chaosMs: int('chaosMs', options.chaosMs ?? 20_000, 0, 86_400_000),
    calmAt: share('calmAt', options.calmAt ?? 0.85),
    deadlineMs: int('deadlineMs', options.deadlineMs ?? 120_000, 1_000, 86_400_000),
    kills: {
      everyMs: int('kills.everyMs', k.everyMs ?? 1_000, 0, 3_600_000),
      faultShare: share('kills.faultShare', k.faultShare ?? 0.5),
      faultMenu: k.faultMenu ?? defaultFaultMenu(worker),
      onReceipt: share('kills.onReceipt', k.onReceipt ?? 0.02),
    },
    worker,
    ...(custom ? { operationsModule: resolve(options.operationsModule!) } : {}),
    ...(options.workload ? { workload: options.workload } : {}),
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
  };
}

/** Runs until every job settled or the deadline passed; true when settled. */
async function chaosLoop(
  q: Queue,
  fleet: ChaosFleet,
  downstream: Downstream | undefined,
  o: Resolved,
  run: {
    baseline: number;
    jobs: number;
    rand: () => number;
    faults: () => string;
    started: number;
  },
): Promise<boolean> {
  const gap = () => o.kills.everyMs * (0.5 + run.rand());
  const chaosUntil = Date.now() + o.chaosMs;
  const deadline = run.started + o.deadlineMs;
  let nextKill = Date.now() + gap();
  let calm = o.chaosMs === 0;
  for (;;) {
    const settled = (await settledCount(q)) - run.baseline;
    o.onProgress?.({
      phase: calm ? 'calm' : 'chaos',
      settled,
      jobs: run.jobs,
      kills: fleet.kills.sigkill + fleet.kills.atFaultPoints + fleet.kills.onReceipt,
      effects: downstream?.stats.effects ?? null,
      duplicates: downstream ? downstream.duplicates().length : null,
      elapsedMs: Date.now() - run.started,
    });
    if (settled >= run.jobs && (await isSettled(q))) return true;
    if (Date.now() > deadline) return false;
    if (fleet.crashes.length >= START_FAILURES_MAX)
      throw new ReckonError(
        'CHAOS_WORKERS_CRASHING',
        `worker processes keep exiting by themselves (bad settings or operations module?):\n${fleet.crashes.slice(-2).join('\n')}`,
      );
    if (!calm && (Date.now() > chaosUntil || settled >= run.jobs * o.calmAt)) {
      // The last stretch without chaos: every worker restarted without fault points.
      calm = true;
      if (downstream) downstream.onRequest = undefined;
      await fleet.calm();
    }
    if (!calm && o.kills.everyMs > 0 && Date.now() >= nextKill) {
      await fleet.killOne(run.rand, run.faults);
      nextKill = Date.now() + gap();
    }
    await new Promise((r) => setTimeout(r, TICK_MS));
  }
}

function report(
  o: Resolved,
  r: {
    storeUrl: string;
    custom: boolean;
    /** Jobs the run enqueued or had its workers enqueue. */
    expected: number;
    verdict: Verdict;
    fleet: ChaosFleet;
    downstream: Downstream | undefined;
    settled: boolean;
    started: number;
  },
): ChaosReport {
  const { verdict: v, fleet, downstream } = r;
  const lost: Violation[] = v.unsettled.map(({ jobId, state }) => ({
    kind: 'lost',
    jobId,
    requestKey: '',
    state,
    effects: 0,
    message: `still ${state} when the run ended`,
  }));
  const kills = fleet.kills;
  const out: ChaosReport = {
    seed: o.seed,
    storeUrl: redactStoreUrl(r.storeUrl),
    scenario: r.custom ? 'custom' : o.scenario,
    workers: o.workers,
    jobs: r.expected,
    delivered: v.jobs,
    followUps: o.followUps,
    handOffs: fleet.handOffs,
    succeeded: v.byState.SUCCEEDED,
    failed: v.byState.FAILED,
    inReview: v.byState.NEEDS_REVIEW,
    cancelled: v.byState.CANCELLED,
    reconciledByLookup: v.resolvedBy.lookup,
    reconciledByLateWorker: v.resolvedBy.lateWorker,
    retriedWithSameKey: v.resolvedBy.sameKey,
    retriedNotSent: v.expiredBeforeDispatch,
    lateEvidence: v.lateEvidence,
    lost: v.unsettled.length + Math.max(0, r.expected - v.jobs),
    duplicates: v.duplicates.length,
    effects: downstream?.stats.effects ?? null,
    requests: downstream?.stats.requests ?? null,
    downstreamActions: downstream ? { ...downstream.stats.byAction } : null,
    kills: { ...kills, total: kills.sigkill + kills.atFaultPoints + kills.onReceipt },
    faultsFired: { ...fleet.faultsFired },
    workerCrashes: fleet.crashes.length,
    violations: [...v.findings, ...lost],
    settled: r.settled,
    durationMs: Date.now() - r.started,
    ok: false,
  };
  out.ok = out.violations.length === 0 && out.lost === 0 && out.duplicates === 0;
  return out;
}

async function settledCount(q: Queue): Promise<number> {
  const stats = await q.store.statsGet();
  return stats.queues.reduce(
    (n, s) => n + s.counts.SUCCEEDED + s.counts.FAILED + s.counts.CANCELLED + s.counts.NEEDS_REVIEW,
    0,
  );
}

/** Polls `done` every tick until it holds (true) or `until` (epoch ms) passed (false). */
async function waitFor(done: () => boolean, until: number): Promise<boolean> {
  while (!done()) {
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, TICK_MS));
  }
  return true;
}

function pick(list: readonly string[], rand: () => number): string {
  return list.length === 0 ? '' : list[Math.floor(rand() * list.length)]!;
}
