/**
 * Issue #21 item 1, on both stores: the lookup horizon (dispatchedAt + timeoutMs + graceMs) is
 * the operation's policy recorded with the job, and whoever runs a lookup enforces it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue, type Queue } from '../src/index.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type StoreKind,
  type TestStore,
} from './helpers/stores.js';
import {
  chargeAndDie,
  chargeOperation,
  earlyScheduleScenario,
  emailSend,
  untilSettled,
  verdict,
} from './helpers/two-fleets.js';

const pgReason = await pgUnavailableReason();

describe.each(STORE_KINDS)('lookup horizon: %s', (kind: StoreKind) => {
  if (kind === 'postgres' && pgReason !== null) {
    it.skip(`skipped: ${pgReason}`, () => undefined);
    return;
  }
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    while (cleanups.length) await cleanups.pop()!();
  });

  async function store(): Promise<TestStore> {
    const ts = await makeTestStore(kind);
    cleanups.push(() => ts.drop());
    return ts;
  }

  async function open(ts: TestStore, ops: Parameters<typeof openQueue>[0]): Promise<Queue> {
    const q = await openQueue({ store: ts.url, ...ops });
    cleanups.push(() => q.close());
    return q;
  }

  it('two fleets: a reclaimer that does not know the operation never shortens the wait', async () => {
    // A grace longer than the 5 s a fleet would assume for an operation it does not know, and a
    // downstream whose lookup shows a charge 6 s after it was made: any lookup at timeout + 5 s
    // reads "not found" and charges again.
    const TIMEOUT_MS = 200;
    const GRACE_MS = 7_000;
    const { op: charge, downstream } = chargeOperation({
      timeoutMs: TIMEOUT_MS,
      graceMs: GRACE_MS,
      lagMs: 6_000,
    });
    const ts = await store();
    const fleetA = await open(ts, { operations: [emailSend] });
    const fleetB = await open(ts, { operations: [charge] });
    const jobs = await fleetB.enqueueMany(
      charge,
      [1, 2, 3, 4].map((n) => ({ input: { order: `o-${n}` }, key: `order-${n}` })),
    );
    const ids = jobs.map((j) => j.id);
    expect(jobs.every((j) => j.reconcileGraceMs === GRACE_MS)).toBe(true);
    // Fleet B sends the charges and dies; its leases run out.
    await chargeAndDie(fleetB, 150, downstream);

    // Fleet A's reclaimer (which knows only email.send) marks the attempts UNKNOWN.
    const reclaimer = fleetA.reclaimer({ clockSkewToleranceMs: 0 });
    await untilTrue(async () => {
      await reclaimer.runOnce();
      return reclaimer.counts.unknown === ids.length;
    });
    for (const id of ids) {
      const d = (await fleetA.job(id))!;
      expect(d.job.state).toBe('UNKNOWN');
      expect(d.job.nextCheckAt).toBe(d.attempts[0]!.dispatchedAt! + TIMEOUT_MS + GRACE_MS);
    }

    // Fleet B restarts at once; its reconciler looks as often as it may.
    const w = fleetB.worker({ operations: [charge], reconcileIntervalMs: 20, pollIntervalMs: 20 });
    await w.start();
    cleanups.push(() => w.stop());
    await untilSettled(fleetB, ids, 20_000);
    const v = await verdict(fleetB, ids, downstream);
    expect(v.early).toEqual([]);
    expect(v.duplicates).toEqual([]);
    expect(downstream.charges.size).toBe(ids.length);
    for (const id of ids) {
      const d = (await fleetB.job(id))!;
      expect(d.job.state).toBe('SUCCEEDED');
      expect(d.attempts).toHaveLength(1);
      expect(d.attempts[0]!.resolution).toBe('succeeded');
    }
  }, 40_000);

  it('the reconciler defers a job whose check was scheduled too early, counting no failure', async () => {
    const ts = await store();
    const v = await earlyScheduleScenario(ts.url);
    expect(v.early).toEqual([]);
    expect(v.duplicates).toEqual([]);
    const q = await open(ts, {});
    const [job] = await q.jobs({ state: 'SUCCEEDED', limit: 1 });
    const d = (await q.job(job!.id))!;
    const deferred = d.events.filter((e) => e.kind === 'lookup-deferred');
    expect(deferred.length).toBeGreaterThanOrEqual(1);
    expect(deferred[0]).toMatchObject({ fromState: 'UNKNOWN', toState: 'UNKNOWN' });
    expect(d.events.some((e) => e.kind === 'lookup-inconclusive')).toBe(false);
  }, 20_000);
});

async function untilTrue(fn: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 25));
  }
}
