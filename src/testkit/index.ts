/**
 * reckon/testkit: tools for proving that your own operations keep reckon's promise. A fake
 * downstream with an effect ledger, worker child processes to kill -9, the verdict judged by the
 * business outcome, and the demo.
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
export type { WorkerChildConfig } from './child-config.js';
export { WorkerChild, startWorkerChild, workerChildCommand } from './fleet.js';
export type { ChildExit } from './fleet.js';
export { judge, judgeDetails, jobDetails, isSettled, waitUntilSettled } from './verdict.js';
export type { Verdict, EffectLedger } from './verdict.js';
export { runDemo } from './demo.js';
export type { DemoOptions, DemoReport } from './demo.js';
