/**
 * What both stores' retention (sqlite/retention.ts, postgres/retention.ts) judges alike: which
 * states may be pruned, and the empty tally a prune starts from.
 */
import type { JobPruneParams, PrunableState } from './store.js';

const PRUNABLE: readonly PrunableState[] = ['SUCCEEDED', 'FAILED', 'CANCELLED'];

/** A count per prunable state, all zero. */
export function emptyCounts(): Record<PrunableState, number> {
  return { SUCCEEDED: 0, FAILED: 0, CANCELLED: 0 };
}

/** The prune's states, each once; a state that is not terminal throws. */
export function statesOf(p: JobPruneParams): PrunableState[] {
  const states = [...new Set(p.states)];
  for (const s of states)
    if (!PRUNABLE.includes(s))
      throw new Error(`jobPruneMany: ${String(s)} is not a terminal state`);
  return states;
}
