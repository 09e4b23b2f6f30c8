/**
 * One test per row of DESIGN §7, each with a real worker process killed (or frozen) at the
 * fault point, judged by the effects at the downstream.
 */
import { describe, expect, it, type TestContext } from 'vitest';
import { Faults } from '../../src/index.js';
import { FLAVOURS } from '../../src/testkit/operations.js';
import { STORE_KINDS } from '../helpers/stores.js';
import { Rig, expectKeptPromises, until } from './harness.js';

describe.each(STORE_KINDS)('DESIGN §7 fault points on %s', (kind) => {
  it('before-attempt-commit: killed before the claim, no attempt exists; a restart does each job once', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const ids = await rig.enqueue('lookup', 3);
    const doomed = rig.child({ faults: 'before-attempt-commit=kill' });
    expect(await doomed.exited).toMatchObject({ signal: 'SIGKILL' });
    for (const id of ids) {
      const { job, attempts } = await rig.job(id);
      expect(job.state).toBe('QUEUED');
      expect(attempts).toEqual([]);
    }
    expect(rig.downstream.stats.requests).toBe(0);

    rig.child();
    await rig.settle();
    const v = await rig.verdict(ids);
    expectKeptPromises(v);
    expect(v.byState.SUCCEEDED).toBe(3);
    for (const id of ids) expect((await rig.job(id)).attempts).toHaveLength(1);
  });

  it('after-attempt-commit: killed before dispatch, FAILED_BEFORE_SEND (lease-expired-before-dispatch), retried, once', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const ids = await rig.enqueue('none', 3);
    const doomed = rig.child({ faults: 'after-attempt-commit=kill', concurrency: 4 });
    expect(await doomed.exited).toMatchObject({ signal: 'SIGKILL' });
    for (const id of ids) {
      const { job, attempts } = await rig.job(id);
      expect(job.state).toBe('LEASED');
      expect(attempts[0]).toMatchObject({ state: 'LEASED', dispatchedAt: null });
    }

    rig.child();
    await rig.settle();
    const v = await rig.verdict(ids);
    expectKeptPromises(v);
    // Even the flavour without any recovery path retries: no marker, provably not sent.
    expect(v.byState.SUCCEEDED).toBe(3);
    for (const id of ids) {
      const { job, attempts } = await rig.job(id);
      expect(attempts.map((a) => [a.state, a.reason])).toEqual([
        ['FAILED_BEFORE_SEND', 'lease-expired-before-dispatch'],
        ['SUCCEEDED', null],
      ]);
      expect(rig.downstream.requestsOf(job.requestKey)).toBe(1);
    }
  });

  it('after-attempt-commit of a job its own worker was handed at enqueue (PostgreSQL): FAILED_BEFORE_SEND, retried, once', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    // The child enqueues one job at a time for its own idle worker; killed at the fourth one.
    const doomed = rig.child({
      faults: 'after-attempt-commit=kill@4',
      concurrency: 1,
      ownerId: 'doomed',
      enqueue: [0, 1, 2, 3, 4].map((n) => ({ flavour: 'none', n, key: `none-${n}` })),
    });
    expect(await doomed.exited).toMatchObject({ signal: 'SIGKILL' });
    // Three jobs ran whole. Where the store hands off (PostgreSQL), an enqueue answered LEASED:
    // its job was leased in the enqueue's commit (each would, were the worker always idle by
    // then; the child waits 100 ms for that).
    // (The fourth answer may or may not be out before the kill.)
    const states = doomed.enqueued.map((e) => e.state);
    expect(states.length).toBeGreaterThanOrEqual(3);
    if (kind === 'postgres') expect(states).toContain('LEASED');
    else expect(new Set(states)).toEqual(new Set(['QUEUED']));
    const jobs = await rig.q.jobs();
    expect(jobs.map((j) => j.requestKey).sort()).toEqual(['none-0', 'none-1', 'none-2', 'none-3']);
    const killed = jobs.find((j) => j.requestKey === 'none-3')!;
    const before = await rig.job(killed.id);
    expect(before.job.state).toBe('LEASED');
    expect(before.attempts).toEqual([
      expect.objectContaining({ ownerId: 'doomed', state: 'LEASED', dispatchedAt: null }),
    ]);

    rig.child();
    await rig.settle();
    const v = await rig.verdict(jobs.map((j) => j.id));
    expectKeptPromises(v);
    expect(v.byState.SUCCEEDED).toBe(4);
    const { attempts } = await rig.job(killed.id);
    expect(attempts.map((a) => [a.ownerId === 'doomed', a.state, a.reason])).toEqual([
      [true, 'FAILED_BEFORE_SEND', 'lease-expired-before-dispatch'],
      [false, 'SUCCEEDED', null],
    ]);
    for (const j of jobs) expect(rig.downstream.requestsOf(j.requestKey)).toBe(1);
  });

  it('after-send-before-response: killed with the request in flight, UNKNOWN, reconciled, once', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const [id] = await rig.enqueue('lookup', 1);
    const doomed = rig.child({ faults: 'after-send-before-response=kill', concurrency: 1 });
    expect(await doomed.exited).toMatchObject({ signal: 'SIGKILL' });
    const before = await rig.job(id!);
    expect(before.attempts[0]!.dispatchedAt).not.toBeNull();

    rig.child();
    await rig.settle();
    const v = await rig.verdict([id!]);
    expectKeptPromises(v);
    expect(v.byState.SUCCEEDED).toBe(1);
    const { attempts } = await rig.job(id!);
    expect(attempts[0]).toMatchObject({
      state: 'UNKNOWN',
      reason: 'lease-expired-after-dispatch',
      resolutionSource: 'lookup',
    });
    // Whether the bytes left before the kill decides what the lookup proves; either way, once.
    expect(attempts).toHaveLength(attempts[0]!.resolution === 'succeeded' ? 1 : 2);
    expect(['succeeded', 'not_found']).toContain(attempts[0]!.resolution);
    expect(rig.downstream.requestsOf('lookup-0')).toBe(1);
  });

  it('after-send-before-response as a throw (in-process): UNKNOWN, and the abandoned request cannot crash the worker', async (ctx) => {
    const faults = new Faults().arm({ point: 'after-send-before-response', action: 'throw' });
    const rig = await Rig.open(ctx, kind, {
      queue: { faults },
      // The abandoned request fails after the fault fired: an unhandled rejection would kill the process.
      downstream: { behaviour: () => ({ action: 'reset', delayMs: 30 }) },
    });
    const [id] = await rig.enqueue('none', 1);
    await rig.worker({ operations: [rig.op('none')] });
    await rig.settle();
    await until('the abandoned request to fail', () => rig.downstream.stats.byAction.reset === 1);
    // An unhandled rejection of the abandoned request would surface once the event loop turns.
    await new Promise((r) => setImmediate(r));
    expectKeptPromises(await rig.verdict([id!]));
    const { job, attempts } = await rig.job(id!);
    expect(job.state).toBe('NEEDS_REVIEW');
    expect(attempts[0]).toMatchObject({ state: 'UNKNOWN', error: { code: 'INJECTED_FAULT' } });
    expect(faults.fired).toHaveLength(1);
  });

  it('after-send-before-response: killed while the downstream holds the request, which commits, UNKNOWN, lookup proves it', async (ctx) => {
    const rig = await Rig.open(ctx, kind, {
      downstream: {
        behaviour: ({ nth }) => (nth === 1 ? { action: 'ok', delayMs: 300 } : { action: 'ok' }),
      },
    });
    const [id] = await rig.enqueue('lookup', 1);
    const doomed = rig.child({ concurrency: 1 });
    rig.downstream.onRequest = () => void doomed.kill();
    expect(await doomed.exited).toMatchObject({ signal: 'SIGKILL' });
    await until('the delayed effect', () => rig.downstream.effectsOf('lookup-0') === 1);

    rig.child();
    await rig.settle();
    const v = await rig.verdict([id!]);
    expectKeptPromises(v);
    const { job, attempts } = await rig.job(id!);
    expect(job.state).toBe('SUCCEEDED');
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({
      state: 'UNKNOWN',
      resolution: 'succeeded',
      resolutionSource: 'lookup',
    });
    expect(rig.downstream.requestsOf('lookup-0')).toBe(1);
  });

  it('after-response-before-commit: the effect happened, UNKNOWN, reconciled by request key via lookup', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const [id] = await rig.enqueue('lookup', 1);
    const doomed = rig.child({ faults: 'after-response-before-commit=kill', concurrency: 1 });
    expect(await doomed.exited).toMatchObject({ signal: 'SIGKILL' });
    expect(rig.downstream.effectsOf('lookup-0')).toBe(1);
    expect((await rig.job(id!)).job.state).toBe('LEASED');

    rig.child();
    await rig.settle();
    expectKeptPromises(await rig.verdict([id!]));
    const { job, attempts, events } = await rig.job(id!);
    expect(job.state).toBe('SUCCEEDED');
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({
      state: 'UNKNOWN',
      resolution: 'succeeded',
      resolutionSource: 'lookup',
    });
    expect(attempts[0]!.resolutionEvidence).toMatchObject({ found: true, outcome: 'succeeded' });
    expect(job.result).toMatchObject({ key: 'lookup-0' });
    expect(events.map((e) => e.kind)).toEqual(
      expect.arrayContaining(['dispatched', 'attempt-unknown', 'reconciled']),
    );
    expect(rig.downstream.requestsOf('lookup-0')).toBe(1);
  });

  it('lease-expired-while-alive: frozen past its lease before dispatch, one owner, the late dispatch is refused', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const [id] = await rig.enqueue('none', 1);
    // Frozen until the rescuer has done the job (the minute is only a cap): however long the
    // rescuer takes to boot, the frozen worker cannot wake first.
    const pause = rig.pauseControl();
    const frozen = rig.child(
      { faults: 'lease-expired-while-alive=pause:60000', concurrency: 1, ownerId: 'frozen' },
      pause.env,
    );
    await until(
      'the claim by the frozen worker',
      async () => (await rig.job(id!)).job.state === 'LEASED',
    );
    const rescuer = rig.child({ ownerId: 'rescuer' });
    await until(
      'the rescuer to finish the job',
      async () => (await rig.job(id!)).job.state === 'SUCCEEDED',
    );
    // The frozen worker wakes, tries to dispatch, is refused, and reports what it knows.
    pause.resume();
    const detail = await until('the late report of the frozen worker', async () => {
      const d = await rig.job(id!);
      return d.events.some((e) => e.kind === 'late-evidence') && d;
    });
    expect(frozen.alive).toBe(true);
    expectKeptPromises(await rig.verdict([id!]));
    expect(
      detail.attempts.map((a) => [a.ownerId, a.state, a.reason, a.dispatchedAt === null]),
    ).toEqual([
      ['frozen', 'FAILED_BEFORE_SEND', 'lease-expired-before-dispatch', true],
      ['rescuer', 'SUCCEEDED', null, false],
    ]);
    const late = detail.events.find((e) => e.kind === 'late-evidence')!;
    expect(late).toMatchObject({ actor: 'frozen', attemptNo: 1 });
    expect(late.detail).toMatchObject({
      outcome: 'FAILED_BEFORE_SEND',
      error: { code: 'NOT_DISPATCHED' },
    });
    expect(rig.downstream.requestsOf('none-0')).toBe(1);
    await frozen.stop();
    await rescuer.stop();
  });

  /** A worker killed mid-run, reclaimers killed at startup, then recovery (`env`: a broken build). */
  async function reclaimerStorm(ctx: TestContext, env: Record<string, string> = {}) {
    const rig = await Rig.open(ctx, kind, {
      downstream: { behaviour: () => ({ action: 'ok', delayMs: 150 }) },
    });
    // Interleaved, so that every batch a worker claims holds all three recovery paths.
    const ids: string[] = [];
    for (let i = 0; i < 8; i++)
      for (const flavour of FLAVOURS)
        ids.push((await rig.q.enqueue(rig.op(flavour), { n: i }, { key: `${flavour}-${i}` })).id);
    // A worker killed mid-run leaves leases with and without dispatch markers.
    const first = rig.child({ concurrency: 12 }, env);
    await until('a few requests in flight', () => rig.downstream.stats.requests >= 6);
    await first.kill();
    // Each of these claims a batch and dies as its reclaimer starts: more orphaned leases.
    for (let i = 0; i < 3; i++) {
      const c = rig.child({ faults: 'reclaimer-startup=kill', concurrency: 3 }, env);
      expect(await c.exited).toMatchObject({ signal: 'SIGKILL' });
    }
    // Two recovery-only processes race over the same expired leases and UNKNOWN jobs, then workers finish.
    const recoverers = [
      rig.child({ queues: ['nothing-here'] }, env),
      rig.child({ queues: ['nothing-here'] }, env),
    ];
    await Promise.all(recoverers.map((r) => r.ready));
    rig.child({ concurrency: 6 }, env);
    await rig.settle(30_000);
    return { rig, ids, v: await rig.verdict(ids) };
  }

  it('reclaimer-startup: reclaimers killed at startup again and again; recovery stays idempotent', async (ctx) => {
    const { rig, ids, v } = await reclaimerStorm(ctx);
    expectKeptPromises(v);
    expect(v.byState.SUCCEEDED + v.byState.NEEDS_REVIEW).toBe(ids.length);
    // The kill left requests in flight: each recovery path had work to do.
    expect(v.resolvedBy.lookup).toBeGreaterThan(0);
    expect(v.resolvedBy.sameKey).toBeGreaterThan(0);
    expect(v.byState.NEEDS_REVIEW).toBeGreaterThan(0);
    // Another pass over a settled journal changes nothing.
    const before = await Promise.all(ids.map((id) => rig.job(id)));
    const reclaimer = rig.q.reclaimer({ clockSkewToleranceMs: 0 });
    expect(await reclaimer.runOnce()).toBe(false);
    expect(reclaimer.counts).toEqual({ failedBeforeSend: 0, unknown: 0 });
    const after = await Promise.all(ids.map((id) => rig.job(id)));
    expect(after).toEqual(before);
  });

  it('reclaimer-startup catches a build that resends every UNKNOWN request with its key', async (ctx) => {
    const { v } = await reclaimerStorm(ctx, {
      NODE_ENV: 'test',
      RECKON_UNSAFE_DISABLE_SAFEGUARD: 'same-key-resend',
    });
    expect(v.duplicates.length).toBeGreaterThan(0);
    expect(v.duplicates.every((d) => !d.key.startsWith('idempotent-'))).toBe(true);
  });
});
