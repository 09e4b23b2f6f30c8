/**
 * Attacks on the invariants of DESIGN §2 that need more than one fault: a worker frozen past its
 * lease after it dispatched (fencing and late evidence, invariant 7), a store clock that runs
 * ahead of the worker's (invariants 2 and 3), and every process killed at once (invariants 1-5).
 */
import { describe, expect, it } from 'vitest';
import { defineOperation } from '../../src/index.js';
import { systemClock } from '../../src/core/clock.js';
import { DownstreamClient, randomPolicy } from '../../src/testkit/downstream.js';
import { FLAVOURS } from '../../src/testkit/operations.js';
import { STORE_KINDS } from '../helpers/stores.js';
import { Rig, expectKeptPromises, until } from './harness.js';

describe.each(STORE_KINDS)('fencing and late evidence on %s', (kind) => {
  it('a worker frozen past its lease after dispatch is fenced; its late result resolves the job (late-worker)', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const [id] = await rig.enqueue('none', 1);
    // Frozen until the test resumes it, once the rescuer has reclaimed (the minute is a cap).
    const pause = rig.pauseControl();
    const frozen = rig.child(
      { faults: 'after-response-before-commit=pause:60000', ownerId: 'frozen', concurrency: 1 },
      pause.env,
    );
    await until(
      'the effect, before the worker freezes',
      () => rig.downstream.effectsOf('none-0') === 1,
    );
    rig.child({ ownerId: 'rescuer' });
    // No lookup, no dedup: the rescuer can only hand the job to a person...
    await until('NEEDS_REVIEW', async () => (await rig.job(id!)).job.state === 'NEEDS_REVIEW');
    pause.resume();
    // ...until the frozen worker wakes with the answer it got, and the journal keeps it.
    const { job, attempts, events } = await until('the late result', async () => {
      const d = await rig.job(id!);
      return d.job.state === 'SUCCEEDED' && d;
    });
    expectKeptPromises(await rig.verdict([id!]));
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({
      ownerId: 'frozen',
      state: 'UNKNOWN',
      reason: 'lease-expired-after-dispatch',
      resolution: 'succeeded',
      resolutionSource: 'late-worker',
    });
    expect(attempts[0]!.resolutionEvidence).toMatchObject({
      outcome: 'SUCCEEDED',
      ownerId: 'frozen',
      result: { key: 'none-0' },
    });
    expect(job.result).toMatchObject({ key: 'none-0' });
    expect(events.at(-1)).toMatchObject({
      kind: 'reconciled',
      actor: 'frozen',
      fromState: 'NEEDS_REVIEW',
      toState: 'SUCCEEDED',
    });
    expect(rig.downstream.requestsOf('none-0')).toBe(1);
    expect(frozen.alive).toBe(true);
  });

  it("when a lookup settled the job first, the frozen worker's late result is kept as a late-evidence event", async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const [id] = await rig.enqueue('lookup', 1);
    const pause = rig.pauseControl();
    rig.child(
      { faults: 'after-response-before-commit=pause:60000', ownerId: 'frozen', concurrency: 1 },
      pause.env,
    );
    await until(
      'the effect, before the worker freezes',
      () => rig.downstream.effectsOf('lookup-0') === 1,
    );
    rig.child({ ownerId: 'rescuer' });
    await until(
      'the lookup settles the job',
      async () => (await rig.job(id!)).job.state === 'SUCCEEDED',
    );
    pause.resume();
    const { job, attempts, events } = await until('the late-evidence event', async () => {
      const d = await rig.job(id!);
      return d.events.some((e) => e.kind === 'late-evidence') && d;
    });
    expectKeptPromises(await rig.verdict([id!]));
    expect(job.state).toBe('SUCCEEDED');
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({
      state: 'UNKNOWN',
      resolution: 'succeeded',
      resolutionSource: 'lookup',
    });
    const late = events.find((e) => e.kind === 'late-evidence')!;
    expect(late).toMatchObject({ actor: 'frozen', attemptNo: 1 });
    expect(late.detail).toMatchObject({ outcome: 'SUCCEEDED', result: { key: 'lookup-0' } });
    expect(rig.downstream.requestsOf('lookup-0')).toBe(1);
  });
});

describe('store clock against worker clock (sqlite: the clock is injected)', () => {
  it('a store clock moved past the lease refuses the fenced marker while the worker still believes it holds', async (ctx) => {
    let offsetMs = 0;
    const rig = await Rig.open(ctx, 'sqlite', {
      queue: { clock: { ...systemClock, now: () => Date.now() + offsetMs } },
    });
    const client = new DownstreamClient(rig.downstream.url);
    let claimed!: () => void;
    const claimedP = new Promise<void>((r) => (claimed = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const dispatchErrors: unknown[] = [];
    const op = defineOperation({
      name: 'clock.effect',
      execute: async (input: { n: number }, ctx) => {
        if (ctx.attemptNo === 1) {
          claimed();
          await gate;
        }
        try {
          return await ctx.dispatch(() =>
            client.post(ctx.requestKey, input, { idempotencyKey: ctx.requestKey }),
          );
        } catch (err) {
          dispatchErrors.push(err);
          throw err;
        }
      },
      retry: { maxAttempts: 3, backoff: { initialMs: 10, factor: 1, maxMs: 10 } },
    });
    const job = await rig.q.enqueue(op, { n: 1 }, { key: 'clock-1' });
    // No heartbeat and no reclaimer before the marker: the store's clock alone must refuse it.
    await rig.worker({
      operations: [op],
      leaseMs: 1_000,
      heartbeatIntervalMs: 900,
      safetyMarginMs: 100,
      recover: false,
    });
    await claimedP;
    offsetMs = 5_000;
    release();
    const done = await until('the retry to succeed', async () => {
      const d = await rig.job(job.id);
      return d.job.state === 'SUCCEEDED' && d;
    });
    expect(dispatchErrors).toHaveLength(1);
    expect(dispatchErrors[0]).toMatchObject({ code: 'NOT_DISPATCHED' });
    expect((dispatchErrors[0] as Error).message).toMatch(/lease-expired/);
    expect(done.attempts.map((a) => [a.state, a.reason, a.dispatchedAt === null])).toEqual([
      ['FAILED_BEFORE_SEND', 'dispatch-refused', true],
      ['SUCCEEDED', null, false],
    ]);
    expect(rig.downstream.requestsOf('clock-1')).toBe(1);
    expect(rig.downstream.effectsOf('clock-1')).toBe(1);
  });
});

describe.each(STORE_KINDS)('every process killed mid-run on %s', (kind) => {
  it('a few hundred jobs, three workers, SIGKILL all twice, restart: each effect once or NEEDS_REVIEW, nothing lost', async (ctx) => {
    const seed = Number(process.env.RECKON_SEED ?? 20240611);
    const rig = await Rig.open(ctx, kind, {
      downstream: {
        // The flavour without recovery paths talks to a service that ignores idempotency keys.
        honourIdempotencyKey: (key) => !key.startsWith('none-'),
        behaviour: randomPolicy(seed, {
          ok: 85,
          fail: 3,
          error: 4,
          reset: 3,
          drop: 5,
          delayProbability: 0.3,
          delayMsMax: 150,
        }),
      },
    });
    const ids: string[] = [];
    for (let chunk = 0; chunk < 30; chunk++) {
      const flavour = FLAVOURS[chunk % FLAVOURS.length]!;
      const jobs = await rig.q.enqueueMany(
        rig.op(flavour),
        Array.from({ length: 10 }, (_, i) => ({
          input: { n: chunk * 10 + i },
          key: `${flavour}-${chunk * 10 + i}`,
        })),
      );
      ids.push(...jobs.map((j) => j.id));
    }
    const fleet = () => [0, 1, 2].map(() => rig.child({ concurrency: 8 }));
    for (const fraction of [1 / 3, 2 / 3]) {
      const children = fleet();
      await until(
        `${Math.round(fraction * 100)}% of the effects`,
        () => rig.downstream.stats.effects >= ids.length * fraction,
        30_000,
      );
      await Promise.all(children.map((c) => c.kill()));
      // Invariant 1: everything enqueued is still in the journal after kill -9 of every worker.
      expect((await rig.q.jobs({ limit: 10_000 })).length).toBe(ids.length);
      expect(rig.downstream.duplicates()).toEqual([]);
    }
    fleet();
    await rig.settle(45_000);
    const v = await rig.verdict(ids);
    if (process.env.RECKON_TEST_VERDICT === '1') console.log(rig.childLogs());
    expectKeptPromises(v);
    expect(v.jobs).toBe(300);
    // The kills caught work in flight, so recovery had something to prove.
    const killedMidAttempt = (await Promise.all(ids.map((id) => rig.job(id)))).filter((d) =>
      d.attempts.some((a) => a.reason?.startsWith('lease-expired')),
    ).length;
    expect(killedMidAttempt).toBeGreaterThan(0);
  });
});

describe.each(STORE_KINDS)('graceful stop on %s', (kind) => {
  it('SIGTERM lets attempts in flight finish: no lease expires, nothing is left UNKNOWN', async (ctx) => {
    const rig = await Rig.open(ctx, kind, {
      downstream: { behaviour: () => ({ action: 'ok', delayMs: 300 }) },
    });
    const ids = await rig.enqueue('none', 6);
    const worker = rig.child({ concurrency: 3 });
    await until('requests in flight', () => rig.downstream.stats.requests >= 2);
    expect(await worker.stop()).toEqual({ code: 0, signal: null });
    const mid = await Promise.all(ids.map((id) => rig.job(id)));
    for (const { job } of mid) expect(['SUCCEEDED', 'QUEUED']).toContain(job.state);
    expect(mid.filter((d) => d.job.state === 'SUCCEEDED').length).toBeGreaterThanOrEqual(2);
    rig.child({ concurrency: 3 });
    await rig.settle();
    const v = await rig.verdict(ids);
    expectKeptPromises(v);
    expect(v.byState.SUCCEEDED).toBe(6);
    const all = await Promise.all(ids.map((id) => rig.job(id)));
    expect(all.flatMap((d) => d.attempts).every((a) => a.state === 'SUCCEEDED')).toBe(true);
  });
});
