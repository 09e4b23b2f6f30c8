/**
 * The three recovery paths of DESIGN §4 for an UNKNOWN attempt, each against a downstream that
 * committed the effect and lost the response (the worst case: the client cannot tell).
 */
import { describe, expect, it } from 'vitest';
import { JobStateConflict } from '../../src/index.js';
import { scripted } from '../../src/testkit/downstream.js';
import { STORE_KINDS } from '../helpers/stores.js';
import { Rig, expectKeptPromises, until } from './harness.js';

describe.each(STORE_KINDS)('recovery paths on %s', (kind) => {
  it('lookup: the downstream is asked after timeout + grace and proves the effect; no second request', async (ctx) => {
    const rig = await Rig.open(ctx, kind, {
      downstream: {
        behaviour: scripted({
          'lookup-0': [{ action: 'drop' }],
          'lookup-1': [{ action: 'reset' }],
        }),
      },
    });
    const ids = await rig.enqueue('lookup', 2);
    await rig.worker({ operations: [rig.op('lookup')] });
    await rig.settle();
    expectKeptPromises(await rig.verdict(ids));
    const dropped = await rig.job(ids[0]!);
    expect(dropped.job.state).toBe('SUCCEEDED');
    expect(dropped.attempts).toHaveLength(1);
    expect(dropped.attempts[0]).toMatchObject({
      state: 'UNKNOWN',
      reason: 'no-definitive-answer',
      resolution: 'succeeded',
      resolutionSource: 'lookup',
    });
    // The lookup waited for dispatched_at + timeoutMs (1000) + graceMs (200).
    const reconciled = dropped.events.find((e) => e.kind === 'reconciled')!;
    expect(reconciled.at - dropped.attempts[0]!.dispatchedAt!).toBeGreaterThanOrEqual(1_200);
    expect(rig.downstream.requestsOf('lookup-0')).toBe(1);
    // A reset before commit: the lookup finds nothing, so a retry is safe and happens once.
    const reset = await rig.job(ids[1]!);
    expect(reset.job.state).toBe('SUCCEEDED');
    expect(reset.attempts.map((a) => [a.state, a.resolution])).toEqual([
      ['UNKNOWN', 'not_found'],
      ['SUCCEEDED', null],
    ]);
    expect(rig.downstream.effectsOf('lookup-1')).toBe(1);
  });

  it('same-key retry: the downstream deduplicates by Idempotency-Key and replays the first answer', async (ctx) => {
    const rig = await Rig.open(ctx, kind, {
      downstream: {
        honourIdempotencyKey: true,
        behaviour: scripted({ 'idempotent-0': [{ action: 'drop' }] }),
      },
    });
    const [id] = await rig.enqueue('idempotent', 1);
    await rig.worker({ operations: [rig.op('idempotent')] });
    await rig.settle();
    expectKeptPromises(await rig.verdict([id!]));
    const { job, attempts } = await rig.job(id!);
    expect(job.state).toBe('SUCCEEDED');
    expect(attempts.map((a) => [a.state, a.resolution, a.resolutionSource, a.requestKey])).toEqual([
      ['UNKNOWN', 'retry', 'same-key-retry', 'idempotent-0'],
      ['SUCCEEDED', null, null, 'idempotent-0'],
    ]);
    expect(rig.downstream.requestsOf('idempotent-0')).toBe(2);
    expect(rig.downstream.stats.replays).toBe(1);
    expect(rig.downstream.effectsOf('idempotent-0')).toBe(1);
  });

  it('neither: NEEDS_REVIEW is the only honest answer; an operator decides and the decision is journaled', async (ctx) => {
    const rig = await Rig.open(ctx, kind, {
      downstream: {
        honourIdempotencyKey: false,
        behaviour: scripted({
          'none-0': [{ action: 'drop' }],
          'none-1': [{ action: 'error', status: 503 }],
        }),
      },
    });
    const ids = await rig.enqueue('none', 2);
    await rig.worker({ operations: [rig.op('none')] });
    await rig.settle();
    const v = await rig.verdict(ids);
    expectKeptPromises(v);
    expect(v.byState.NEEDS_REVIEW).toBe(2);
    // Nothing was retried blindly: one request each, whatever happened to it.
    expect(rig.downstream.requestsOf('none-0')).toBe(1);
    expect(rig.downstream.requestsOf('none-1')).toBe(1);

    const review = await rig.q.review.list();
    expect(review.map((d) => d.job.id).sort()).toEqual([...ids].sort());
    for (const d of review) {
      expect(d.attempts[0]).toMatchObject({ state: 'UNKNOWN', resolution: null });
      expect(d.events.find((e) => e.toState === 'NEEDS_REVIEW')?.detail).toMatchObject({
        path: 'review',
      });
    }
    // The operator checks the downstream: none-0 happened, none-1 did not.
    await rig.q.review.resolve(ids[0]!, {
      as: 'succeeded',
      actor: 'ana',
      note: 'seen in the provider dashboard',
    });
    await rig.q.review.resolve(ids[1]!, {
      as: 'retry',
      actor: 'ana',
      note: 'provider has no record',
    });
    await expect(
      rig.q.review.resolve(ids[0]!, { as: 'failed', actor: 'bo' }),
    ).rejects.toBeInstanceOf(JobStateConflict);
    await until('the retried job', async () => (await rig.job(ids[1]!)).job.state === 'SUCCEEDED');

    const v2 = await rig.verdict(ids);
    expectKeptPromises(v2);
    expect(v2.byState.SUCCEEDED).toBe(2);
    expect(v2.resolvedBy.operator).toBe(2);
    const first = await rig.job(ids[0]!);
    expect(first.attempts[0]).toMatchObject({
      resolution: 'succeeded',
      resolutionSource: 'operator:ana',
      resolutionEvidence: { note: 'seen in the provider dashboard' },
    });
    expect(first.events.at(-1)).toMatchObject({
      kind: 'resolved',
      actor: 'operator:ana',
      fromState: 'NEEDS_REVIEW',
      toState: 'SUCCEEDED',
    });
    const second = await rig.job(ids[1]!);
    expect(second.attempts.map((a) => [a.state, a.resolution, a.resolutionSource])).toEqual([
      ['UNKNOWN', 'retry', 'operator:ana'],
      ['SUCCEEDED', null, null],
    ]);
    expect(rig.downstream.effectsOf('none-1')).toBe(1);
  });
});
