/**
 * An approved job is a job like any other: a worker killed (SIGKILL) at each fault point of
 * DESIGN §7 after the approval, then a healthy one, and the effect happens exactly once at the
 * downstream. One approved job per fault point, on both stores; and the same run with a build
 * that resends UNKNOWN requests blindly must show the second effect.
 */
import { describe, expect, it, type TestContext } from 'vitest';
import { FAULT_POINTS, defineOperation, type FaultPoint } from '../src/index.js';
import { STORE_KINDS, type StoreKind } from './helpers/stores.js';
import { Rig, expectKeptPromises } from './reliability/harness.js';

/** One approved job, a worker killed at `point`, then recovery by a worker (`env`: a broken build). */
async function approvedUnderKill(
  ctx: TestContext,
  kind: StoreKind,
  point: FaultPoint,
  env: Record<string, string> = {},
) {
  const rig = await Rig.open(ctx, kind);
  const op = defineOperation({ ...rig.op('lookup').spec, approval: true });
  const job = await rig.q.enqueue(op, { n: 1 }, { key: `approved-${point}` });
  // Before the approval, a worker has nothing to claim.
  expect(job.state).toBe('AWAITING_APPROVAL');
  await rig.q.approvals.decide(job.id, { approve: true, actor: 'alice' });
  const doomed = rig.child({ faults: `${point}=kill` });
  expect(await doomed.exited, rig.childLogs()).toMatchObject({ signal: 'SIGKILL' });
  rig.child({}, env);
  await rig.settle();
  return { rig, job, v: await rig.verdict([job.id]) };
}

describe.each(STORE_KINDS)(
  'an approved job under a worker killed at each fault point, on %s',
  (kind) => {
    it.for(FAULT_POINTS)(
      '%s: SIGKILL, then recovery runs the approved effect exactly once',
      async (point, ctx) => {
        const { rig, job, v } = await approvedUnderKill(ctx, kind, point);
        expectKeptPromises(v);
        expect(v.byState.SUCCEEDED).toBe(1);
        expect(rig.downstream.effectsOf(job.requestKey)).toBe(1);
        expect(rig.downstream.requestsOf(job.requestKey)).toBe(1);
        const { events } = await rig.job(job.id);
        expect(events.filter((e) => e.kind === 'approved')).toHaveLength(1);
      },
    );

    it('catches a build that resends every UNKNOWN request with its key', async (ctx) => {
      const { rig, job, v } = await approvedUnderKill(ctx, kind, 'after-response-before-commit', {
        NODE_ENV: 'test',
        RECKON_UNSAFE_DISABLE_SAFEGUARD: 'same-key-resend',
      });
      expect(rig.downstream.effectsOf(job.requestKey)).toBe(2);
      expect(v.duplicates).toEqual([{ key: job.requestKey, effects: 2 }]);
    });
  },
);
