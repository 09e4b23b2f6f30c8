/**
 * An approved job is a job like any other: a worker killed (SIGKILL) at each fault point of
 * DESIGN §7 after the approval, then a healthy one, and the effect happens exactly once at the
 * downstream. One approved job per fault point, on both stores.
 */
import { describe, expect, it } from 'vitest';
import { FAULT_POINTS, defineOperation } from '../src/index.js';
import { STORE_KINDS } from './helpers/stores.js';
import { Rig, expectKeptPromises } from './reliability/harness.js';

describe.each(STORE_KINDS)(
  'an approved job under a worker killed at each fault point, on %s',
  (kind) => {
    it.for(FAULT_POINTS)(
      '%s: SIGKILL, then recovery runs the approved effect exactly once',
      async (point, ctx) => {
        const rig = await Rig.open(ctx, kind);
        const op = defineOperation({ ...rig.op('lookup').spec, approval: true });
        const job = await rig.q.enqueue(op, { n: 1 }, { key: `approved-${point}` });
        // Before the approval, a worker has nothing to claim.
        expect(job.state).toBe('AWAITING_APPROVAL');
        await rig.q.approvals.decide(job.id, { approve: true, actor: 'alice' });
        const doomed = rig.child({ faults: `${point}=kill` });
        expect(await doomed.exited, rig.childLogs()).toMatchObject({ signal: 'SIGKILL' });
        rig.child();
        await rig.settle();
        const v = await rig.verdict([job.id]);
        expectKeptPromises(v);
        expect(v.byState.SUCCEEDED).toBe(1);
        expect(rig.downstream.effectsOf(job.requestKey)).toBe(1);
        const { events } = await rig.job(job.id);
        expect(events.filter((e) => e.kind === 'approved')).toHaveLength(1);
      },
    );
  },
);
