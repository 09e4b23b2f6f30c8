/**
 * Issue #33 item 1's scenario, shared by test/failed-proof.test.ts (both stores, q.call and
 * `reckon call`) and test/agents/unproven.test.ts (every tool adapter): the first request of a
 * key commits its effect and the connection drops without an answer; from then on, requests
 * go to a port that refuses connections. Nothing proves the effect did not happen.
 */
import { openQueue, type Queue } from '../../src/index.js';
import { Downstream, OK, type Behaviour } from '../../src/testkit/downstream.js';
import { notify, refusingUrl, target } from '../fixtures/proof-ops.js';
import type { Cleanup } from './cleanup.js';

/** The scenario's downstream (see above), closed at cleanup. */
export async function resetThenRefuse(cleanup: Cleanup): Promise<Downstream> {
  const dead = await refusingUrl();
  const ds = new Downstream({
    behaviour: ({ nth }): Behaviour => {
      if (nth > 1) return OK;
      target.url = dead;
      return { action: 'drop' };
    },
  });
  await ds.start();
  target.url = ds.url;
  cleanup(() => ds.close());
  return ds;
}

/** A queue on `url` and a worker (reclaimer and reconciler on, short intervals) for `notify`. */
export async function scenarioQueue(url: string, cleanup: Cleanup): Promise<Queue> {
  const q = await openQueue({ store: url, operations: [notify], outcomePollMs: 200 });
  cleanup(() => q.close());
  const w = q.worker({
    operations: [notify],
    pollIntervalMs: 20,
    reconcileIntervalMs: 50,
    reclaimIntervalMs: 50,
  });
  await w.start();
  cleanup(() => w.stop());
  return q;
}
