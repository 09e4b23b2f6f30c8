/**
 * What both stores' retention (sqlite/retention.ts, postgres/retention.ts) judges alike: which
 * states may be pruned, and the empty tally a prune starts from.
 */
import type { JobDetail, JobPruneParams, PrunableState } from './store.js';
import { ROUTINE_STEP_ID } from './trail.js';

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

/**
 * The jobs of an archived batch whose history is still exactly what was archived: the archive
 * was read before the delete's transaction, and a terminal job can still gain events meanwhile
 * (a `q.call` replay's dedup, late evidence from a worker). `eventsNow` is each job's event
 * count read under the delete's lock (events are append-only, so an unchanged count is an
 * unchanged history; the routine steps its rows' columns hold are not rows of `events`). A job
 * whose history grew is left for a later batch, which archives it again, whole: what is deleted
 * is always what was archived.
 */
export function archivedAsIs(archived: JobDetail[], eventsNow: Map<string, number>): Set<string> {
  const same = new Set<string>();
  for (const h of archived)
    if ((eventsNow.get(h.job.id) ?? 0) === storedEvents(h)) same.add(h.job.id);
  return same;
}

/** The archived trail's events that are rows of `events` (not routine steps: trail.ts). */
function storedEvents(h: JobDetail): number {
  let n = 0;
  for (const e of h.events) if (e.id !== ROUTINE_STEP_ID) n++;
  return n;
}
