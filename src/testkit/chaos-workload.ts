/**
 * What a chaos run puts in and reads out: the built-in workload, enqueued in durable batches; the
 * downstream's seeded, replayable misbehaviour and its kills on receipt; and the ledger the
 * verdict reads, yours or the built-in downstream's.
 */
import type { AnyOperation } from '../core/operation.js';
import { mulberry32 } from '../runtime/faults.js';
import type { Queue } from '../runtime/queue.js';
import type { JobDetail } from '../store/store.js';
import type { ChaosFleet } from './chaos-fleet.js';
import type {
  ChaosLedger,
  ChaosScenario,
  ChaosWorkerSettings,
  ChaosWorkItem,
} from './chaos-types.js';
import type { BehaviourPolicy, Downstream } from './downstream.js';
import { downstreamOperation, type Flavour } from './operations.js';
import type { EffectLedger } from './verdict.js';

const FLAVOUR_MIX: Flavour[] = ['lookup', 'lookup', 'idempotent', 'idempotent', 'none'];
const ENQUEUE_BATCH_MAX = 500;

/**
 * The downstream's behaviour from (seed, key without the run tag, nth): the same seed replays
 * the same misbehaviour, while the run tag keeps keys unique in a reused store.
 */
export function replayable(policy: BehaviourPolicy, runTag: string): BehaviourPolicy {
  return (req) => policy({ ...req, key: req.key.replace(`-${runTag}-`, '-') });
}

/** The sender of a request dies as it arrives, for a seeded share of requests. */
export function armKillOnReceipt(
  d: Downstream,
  fleet: ChaosFleet,
  seed: number,
  runTag: string,
  p: number,
): void {
  if (p <= 0) return;
  d.onRequest = ({ key, nth, pid }) => {
    // Decided by (seed, key, nth) alone, whatever order the requests arrive in.
    const draw = mulberry32(hashOf(`receipt:${seed}:${key.replace(`-${runTag}-`, '-')}:${nth}`));
    if (pid && draw() < p) fleet.killOnReceipt(pid);
  };
}

/** A job of the built-in workload: its flavour and number say what a worker child enqueues. */
export type BuiltInItem = ChaosWorkItem & { flavour: Flavour; n: number };

export function builtInWorkload(
  o: { scenario: ChaosScenario; jobs: number; worker: ChaosWorkerSettings },
  url: string,
  runTag: string,
): BuiltInItem[] {
  const mix = o.scenario === 'mixed' ? FLAVOUR_MIX : [o.scenario];
  // The same settings as the workers' operations: the job's timeout decides when a lookup may run.
  const settings = {
    url,
    timeoutMs: o.worker.timeoutMs,
    graceMs: o.worker.graceMs,
    maxAttempts: o.worker.maxAttempts,
  };
  const ops = new Map(mix.map((f) => [f, downstreamOperation(f, settings)]));
  // Keys carry a run tag, so a reused store never deduplicates them into an earlier run's jobs.
  return Array.from({ length: o.jobs }, (_, n) => {
    const flavour = mix[n % mix.length]!;
    return {
      operation: ops.get(flavour)!,
      input: { n },
      key: `${flavour}-${runTag}-${n}`,
      flavour,
      n,
    };
  });
}

/** Enqueues in durable batches per operation; returns the job ids. */
export async function enqueueAll(q: Queue, items: ChaosWorkItem[]): Promise<string[]> {
  const byOp = new Map<string | AnyOperation, ChaosWorkItem[]>();
  for (const item of items) byOp.set(item.operation, [...(byOp.get(item.operation) ?? []), item]);
  const ids: string[] = [];
  for (const [op, list] of byOp)
    for (let i = 0; i < list.length; i += ENQUEUE_BATCH_MAX) {
      const batch = list.slice(i, i + ENQUEUE_BATCH_MAX).map(({ input, key, queue }) => ({
        input,
        key,
        ...(queue ? { queue } : {}),
      }));
      ids.push(...(await q.enqueueMany(op, batch)).map((j) => j.id));
    }
  return ids;
}

/** A synchronous ledger for the verdict: the user's read once per job, after the run. */
export async function ledgerFor(
  ledger: ChaosLedger | undefined,
  downstream: Downstream | undefined,
  details: JobDetail[],
): Promise<EffectLedger> {
  if (!ledger) return downstream!;
  if (ledger instanceof Map) {
    const map = ledger as ReadonlyMap<string, number>;
    return { effectsOf: (key) => map.get(key) ?? 0 };
  }
  const read =
    typeof ledger === 'function'
      ? ledger
      : (key: string) =>
          (ledger as { effectsOf(k: string): number | Promise<number> }).effectsOf(key);
  const counts = new Map<string, number>();
  for (const { job } of details) {
    const n = await read(job.requestKey);
    if (!Number.isInteger(n) || n < 0)
      throw new TypeError(`the chaos ledger said ${String(n)} effects for ${job.requestKey}`);
    counts.set(job.requestKey, n);
  }
  return { effectsOf: (key) => counts.get(key) ?? 0 };
}

function hashOf(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}
