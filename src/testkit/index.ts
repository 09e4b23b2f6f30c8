/**
 * reckon/testkit: tools for proving that your own operations keep reckon's promise. A fake
 * downstream with an effect ledger, worker child processes to kill -9, the verdict judged by the
 * business outcome, the chaos harness (`runChaos`, also for your own operations), the demo, and
 * the deterministic simulator (`runSim`, docs/simulation.md).
 */
export {
  Downstream,
  DownstreamClient,
  startDownstream,
  scripted,
  randomPolicy,
  OK,
} from './downstream.js';
export type {
  Behaviour,
  BehaviourPolicy,
  DownstreamOptions,
  DownstreamResponse,
  DownstreamStats,
  EffectResult,
  LedgerEntry,
  LookupAnswer,
  RandomPolicyWeights,
  RequestInfo,
} from './downstream.js';
export {
  FLAVOURS,
  DEFINITIVE_STATUSES,
  downstreamOperation,
  downstreamOperations,
  operationName,
  isFlavour,
} from './operations.js';
export type { Flavour, EffectInput, DownstreamOperationOptions } from './operations.js';
export { CHILD_DEFAULTS, childEnv, childConfigFromEnv } from './child-config.js';
export type { WorkerChildConfig, ChildConfigInput } from './child-config.js';
export { WorkerChild, startWorkerChild, workerChildCommand } from './fleet.js';
export type { ChildExit, WorkerChildOptions } from './fleet.js';
export { judge, judgeDetails, jobDetails, isSettled, waitUntilSettled } from './verdict.js';
export type { Verdict, EffectLedger, Violation, ViolationKind } from './verdict.js';
export {
  runChaos,
  CHAOS_SCENARIOS,
  CHAOS_WORKER_DEFAULTS,
  DEFAULT_DOWNSTREAM_WEIGHTS,
  defaultFaultMenu,
} from './chaos.js';
export type {
  ChaosOptions,
  ChaosReport,
  ChaosScenario,
  ChaosKillPolicy,
  ChaosWorkerSettings,
  ChaosWorkItem,
  ChaosWorkload,
  ChaosWorkloadContext,
  ChaosLedger,
  ChaosProgress,
  ChaosStart,
} from './chaos.js';
export type { ChaosKills } from './chaos-fleet.js';
export { progressBar, renderChaosReport } from './chaos-output.js';
export type { ProgressView } from './chaos-output.js';
export { runDemo } from './demo.js';
export type { DemoOptions, DemoReport } from './demo.js';
export { runSim, runSimBatch, shrinkSim, replayCommand, SIM_FAULTS } from './sim/index.js';
export type {
  SimResult,
  SimRunOptions,
  SimBatchOptions,
  SimBatchReport,
  ShrinkResult,
  SimFault,
  SimLimits,
} from './sim/index.js';
