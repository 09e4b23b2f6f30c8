/**
 * The deterministic simulator (docs/simulation.md): `runSim` runs one seed, `runSimBatch` many,
 * `shrinkSim` makes a failing seed smaller, `replayCommand` prints the command that replays it.
 */
export { runSim } from './run.js';
export type { SimResult, SimRunOptions } from './run.js';
export { runSimBatch, shrinkSim, replayCommand } from './batch.js';
export type { SimBatchOptions, SimBatchReport, ShrinkResult } from './batch.js';
export { SIM_FAULTS } from './scenario.js';
export type { SimFault, SimLimits } from './scenario.js';
