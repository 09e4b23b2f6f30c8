/**
 * The shapes of a chaos run (chaos.ts): its options, the workload and ledger you give it for your
 * own operations, its progress and its report.
 */
import type { AnyOperation } from '../core/operation.js';
import type { ChaosKills } from './chaos-fleet.js';
import type { WorkerChildConfig } from './child-config.js';
import type { DownstreamStats, RandomPolicyWeights } from './downstream.js';
import { FLAVOURS, type Flavour } from './operations.js';
import type { Violation } from './verdict.js';

export type ChaosScenario = Flavour | 'mixed';
export const CHAOS_SCENARIOS: readonly ChaosScenario[] = [...FLAVOURS, 'mixed'];

/** How the harness hurts the workers. */
export interface ChaosKillPolicy {
  /** Mean ms between random SIGKILLs (each gap uniform in 0.5–1.5 × this); 0 for none. Default 1000. */
  everyMs?: number;
  /** Share of (re)started workers armed with one fault point from `faultMenu`. Default 0.5. */
  faultShare?: number;
  /** `RECKON_FAULTS` specs to choose from. Default: `defaultFaultMenu(worker)`, every fault point. */
  faultMenu?: string[];
  /** Built-in downstream: probability that a request's sender is killed as it arrives. Default 0.02. */
  onReceipt?: number;
}

/** The worker processes' settings (timeouts, grace and attempts apply to the built-in operations). */
export type ChaosWorkerSettings = Omit<
  WorkerChildConfig,
  'storeUrl' | 'downstreamUrl' | 'operationsModule' | 'ownerId' | 'faults' | 'faultsSeed'
>;

/** One job of a workload. `operation` is an operation's name or the operation itself. */
export interface ChaosWorkItem {
  operation: string | AnyOperation;
  input: unknown;
  key: string;
  queue?: string;
}

export interface ChaosWorkloadContext {
  jobs: number;
  seed: number;
  /** Seeded: use it for any random choice, so the run replays. */
  random: () => number;
  /** Unique to this run: put it in your keys when the store or downstream outlives a run. */
  runTag: string;
}
export type ChaosWorkload = (
  ctx: ChaosWorkloadContext,
) => ChaosWorkItem[] | Promise<ChaosWorkItem[]>;

/** Effects your downstream committed per request key: the business truth the run is judged by. */
export type ChaosLedger =
  | ((requestKey: string) => number | Promise<number>)
  | { effectsOf(requestKey: string): number | Promise<number> }
  | ReadonlyMap<string, number>;

export interface ChaosProgress {
  phase: 'chaos' | 'calm';
  settled: number;
  jobs: number;
  kills: number;
  /** Built-in downstream only; null with your own ledger. */
  effects: number | null;
  duplicates: number | null;
  elapsedMs: number;
}

export interface ChaosStart {
  seed: number;
  storeUrl: string;
  jobs: number;
  workers: number;
  scenario: ChaosScenario | 'custom';
  downstreamUrl: string | null;
}

export interface ChaosOptions {
  /** sqlite:<file> or postgres://…. Default: a fresh SQLite file in a temp directory, removed after. */
  storeUrl?: string;
  /** Jobs to enqueue (built-in workload; passed to yours). Default 300. */
  jobs?: number;
  /** Worker processes. Default 3. */
  workers?: number;
  /** Seed of every random choice. Default: random, and reported. */
  seed?: number;
  /** Built-in operations: which recovery paths. Default 'mixed' (2 lookup : 2 idempotent : 1 none). */
  scenario?: ChaosScenario;
  /**
   * Of `jobs` (built-in workload), how many the worker processes enqueue themselves, as an
   * agent's follow-up work comes: each worker its share, one job at a time, whenever its worker
   * is idle, and again from the start after each restart (a job already there is found by its
   * key). Where the store hands off (PostgreSQL), such a job may be leased to the enqueuing
   * worker in the enqueue's own commit: this puts hand-offs under the kills. Default 0.
   */
  followUps?: number;
  kills?: ChaosKillPolicy;
  /** Built-in downstream's misbehaviour per request (seeded). Default `DEFAULT_DOWNSTREAM_WEIGHTS`. */
  downstream?: RandomPolicyWeights;
  worker?: Partial<ChaosWorkerSettings>;
  /** Chaos stops after this long, or when `calmAt` of the jobs have settled. Default 20 000. */
  chaosMs?: number;
  /** Share of settled jobs after which chaos stops, so the rest settles. Default 0.85. */
  calmAt?: number;
  /** The whole run; jobs unsettled by then are reported lost. Default 120 000. */
  deadlineMs?: number;
  /** More environment for the worker processes (your module's settings, for instance). */
  workerEnv?: Record<string, string>;
  /** Your operations: a module path (absolute or from the current directory) every worker loads. */
  operationsModule?: string;
  /** With `operationsModule`: the jobs to enqueue. */
  workload?: ChaosWorkload;
  /** With `operationsModule`: effects per request key at your downstream. */
  ledger?: ChaosLedger;
  onStart?: (info: ChaosStart) => void;
  /** Called about every 100 ms while the run lasts. */
  onProgress?: (p: ChaosProgress) => void;
}

export interface ChaosReport {
  seed: number;
  storeUrl: string;
  scenario: ChaosScenario | 'custom';
  workers: number;
  /** Jobs this run enqueued, and the jobs the journal holds of them. */
  jobs: number;
  delivered: number;
  /** Of `jobs`, those the workers enqueued themselves (`followUps`), and how many of those were
   * handed to the enqueuing worker in the enqueue's commit (PostgreSQL). */
  followUps: number;
  handOffs: number;
  succeeded: number;
  failed: number;
  inReview: number;
  cancelled: number;
  reconciledByLookup: number;
  reconciledByLateWorker: number;
  retriedWithSameKey: number;
  /** Attempts whose lease expired before dispatch: provably not sent, retried. */
  retriedNotSent: number;
  lateEvidence: number;
  /** Jobs not settled (QUEUED, LEASED, UNKNOWN) when the run ended, or missing: must be 0. */
  lost: number;
  /** Request keys whose effect was committed more than once: must be 0. */
  duplicates: number;
  /** Built-in downstream: effects committed, requests received, behaviours; null with your ledger. */
  effects: number | null;
  requests: number | null;
  downstreamActions: DownstreamStats['byAction'] | null;
  kills: ChaosKills & { total: number };
  /** Fault points that fired in the workers, by `point:action` (pauses included). */
  faultsFired: Record<string, number>;
  /** Workers that exited by themselves, not by SIGKILL. */
  workerCrashes: number;
  /** Every broken promise, with its job and request key; empty when the run kept them all. */
  violations: Violation[];
  /** The queue settled before the deadline. */
  settled: boolean;
  durationMs: number;
  ok: boolean;
}
