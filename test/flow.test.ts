/**
 * Flow control (issue #30) in one process, on both stores: pause and resume, per-key
 * concurrency, rate limits, a downstream's 429, schedules. The verdict is what the downstream
 * received. Worker processes: test/reliability/flow-processes.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TestContext } from 'vitest';
import { defineOperation, defineSchedule, openQueue, type Queue } from '../src/index.js';
import { planFlowClaim } from '../src/store/plan/index.js';
import { mulberry32 } from '../src/runtime/faults.js';
import { planTick } from '../src/core/schedule.js';
import { FlowDownstream } from './helpers/flow-downstream.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type TestStore,
} from './helpers/stores.js';
import { limited, perAccount, plain, throttled } from './fixtures/flow-ops.js';
import { until } from './reliability/harness.js';

const FAST = { pollIntervalMs: 20, leaseMs: 2_000, reclaimIntervalMs: 100 } as const;

describe('flow plan (pure)', () => {
  it('takes what each key has room for, in claim order, and says when a rate slot frees', () => {
    const plan = planFlowClaim(
      { operation: 'op', rate: { max: 2, perMs: 1_000 }, concurrency: { max: 1 } },
      [
        { rateKey: '', concurrencyKey: 'a', dueAt: 0 },
        { rateKey: '', concurrencyKey: 'a', dueAt: 0 },
        { rateKey: '', concurrencyKey: 'b', dueAt: 0 },
        { rateKey: '', concurrencyKey: 'c', dueAt: 0 },
      ],
      {
        leased: new Map([['b', 1]]),
        starts: new Map([['', { count: 1, oldestAt: 500 }]]),
        holds: new Map(),
      },
      10,
      1_000,
    );
    // a: taken (rate 2/2 used); a again: rate full; b: busy; c: rate full.
    expect(plan.take).toEqual([0]);
    // Each is judged by the rate first: b, too, finds the window full.
    expect(plan.heldByRate).toBe(3);
    expect(plan.heldByConcurrency).toBe(0);
    expect(plan.retryAt).toBe(1_500);
  });

  it('a hold (Retry-After) stops every start of its key until it ends', () => {
    const plan = planFlowClaim(
      { operation: 'op', rate: { max: 100, perMs: 1_000 }, concurrency: null },
      [
        { rateKey: 'x', concurrencyKey: '', dueAt: 0 },
        { rateKey: 'y', concurrencyKey: '', dueAt: 0 },
      ],
      { leased: new Map(), starts: new Map(), holds: new Map([['x', 5_000]]) },
      10,
      1_000,
    );
    expect(plan.take).toEqual([1]);
    expect(plan.retryAt).toBe(5_000);
  });

  it('spaces starts of one key; a late claim fills the slots it missed, up to a quarter window back', () => {
    const limit = { operation: 'op', rate: { max: 20, perMs: 1_000 }, concurrency: null };
    const waiting = (n: number, dueAt = 0) =>
      Array.from({ length: n }, () => ({ rateKey: '', concurrencyKey: '', dueAt }));
    const counts = (next: number) => ({
      leased: new Map(),
      starts: new Map(),
      holds: new Map([['', next]]),
    });
    // Its slot was 30 ms ago: one start, the next on the grid, 20 ms from now.
    const onTime = planFlowClaim(limit, waiting(3), counts(970), 10, 1_000);
    expect(onTime.take).toEqual([0]);
    expect(onTime.nextStartAt.get('')).toBe(1_020);
    expect(onTime.retryAt).toBe(1_020);
    // 130 ms late (the slots at 870, 920, 970 missed): those starts go now, the next on the grid.
    const late = planFlowClaim(limit, waiting(10), counts(870), 10, 1_000);
    expect(late.take).toEqual([0, 1, 2]);
    expect(late.nextStartAt.get('')).toBe(1_020);
    // 900 ms late: caught up a quarter window (250 ms) at most, the rest is lost.
    const stalled = planFlowClaim(limit, waiting(10), counts(100), 10, 1_000);
    expect(stalled.take).toEqual([0, 1, 2, 3, 4, 5]);
    expect(stalled.nextStartAt.get('')).toBe(1_050);
    // A job due only now is owed no slot before it: one start, the next an interval later.
    const fresh = planFlowClaim(limit, waiting(10, 1_000), counts(870), 10, 1_000);
    expect(fresh.take).toEqual([0]);
    expect(fresh.nextStartAt.get('')).toBe(1_050);
    // A key with nothing stored (idle a whole window): a new grid at now.
    const idle = planFlowClaim(limit, waiting(10), { ...counts(0), holds: new Map() }, 10, 1_000);
    expect(idle.take).toEqual([0]);
    expect(idle.nextStartAt.get('')).toBe(1_050);
  });

  it('catching up never puts more than max starts in any window, and keeps the rate on a late host', () => {
    // Claims as a store makes them, on the plan's word: each at the retry time it was given plus
    // a lateness (a loaded host), now and then a stall; starts recorded at the claim's time.
    // Without the catch-up (a claim an interval late restarting the grid) the means were 17.1
    // and 18.8.
    const cases = [
      { seed: 1, lateMs: 60, stallMs: 0, floor: 19.3 },
      { seed: 2, lateMs: 30, stallMs: 200, floor: 19.4 },
      { seed: 3, lateMs: 30, stallMs: 1_500, floor: 0 },
    ];
    for (const { seed, lateMs, stallMs, floor } of cases) {
      const max = 20;
      const perMs = 1_000;
      const limit = { operation: 'op', rate: { max, perMs }, concurrency: null };
      const random = mulberry32(seed);
      const starts: number[] = [];
      let next: number | undefined;
      let now = 0;
      const end = 60_000;
      while (now < end) {
        const inWindow = starts.filter((t) => t > now - perMs);
        const plan = planFlowClaim(
          limit,
          Array.from({ length: 8 }, () => ({ rateKey: '', concurrencyKey: '', dueAt: 0 })),
          {
            leased: new Map(),
            starts: new Map(
              inWindow.length > 0 ? [['', { count: inWindow.length, oldestAt: inWindow[0]! }]] : [],
            ),
            holds: new Map(next !== undefined && next > now - perMs ? [['', next]] : []),
          },
          1 + Math.floor(random() * 8),
          now,
        );
        for (const _ of plan.take) starts.push(now);
        const n = plan.nextStartAt.get('');
        if (n !== undefined) next = Math.max(next ?? n, n);
        const late = stallMs > 0 && random() < 0.01 ? stallMs : random() * lateMs;
        now = Math.max(now + 1, (plan.retryAt ?? now) + Math.floor(late));
      }
      const crowded = starts.filter((t, i) => i >= max && t - starts[i - max]! < perMs);
      expect(crowded, `seed ${seed}`).toEqual([]);
      const mean = starts.filter((t) => t < end).length / (end / perMs);
      expect(mean, `seed ${seed}`).toBeGreaterThanOrEqual(floor);
      expect(mean, `seed ${seed}`).toBeLessThanOrEqual(max);
    }
  });

  it('schedules: on-time slots enqueued, missed ones skipped or caught up (bounded)', () => {
    const s = defineSchedule({
      name: 's',
      cron: '* * * * * *',
      operation: plain,
      input: { n: 0 },
      lateMaxMs: 1_500,
    });
    const t0 = Date.UTC(2026, 0, 1, 0, 0, 0);
    expect(planTick(s, t0, t0 + 2_500)).toEqual({
      enqueue: [t0 + 1_000, t0 + 2_000],
      skipped: 0,
      lastSlot: t0 + 2_000,
    });
    const late = planTick(s, t0, t0 + 10_000);
    expect(late.enqueue).toEqual([t0 + 9_000, t0 + 10_000]);
    expect(late.skipped).toBe(8);
    const caught = planTick({ ...s, missed: { catchUp: 3 } }, t0, t0 + 10_000);
    expect(caught.enqueue).toEqual([t0 + 6_000, t0 + 7_000, t0 + 8_000, t0 + 9_000, t0 + 10_000]);
    expect(caught.skipped).toBe(5);
  });

  it('rejects limits and schedules that cannot work, with a message naming the fix', () => {
    expect(() =>
      defineOperation({
        name: 'bad',
        rateLimit: { max: 0, perMs: 1000 },
        execute: () => Promise.resolve(1),
      }),
    ).toThrow(/rateLimit.max must be an integer/);
    expect(() =>
      defineOperation({
        name: 'bad',
        concurrency: { max: 1.5 },
        execute: () => Promise.resolve(1),
      }),
    ).toThrow(/concurrency.max/);
    expect(() =>
      defineSchedule({ name: 'x', cron: 'not a cron', operation: plain, input: {} }),
    ).toThrow(/INVALID|invalid/);
    expect(() =>
      defineSchedule({
        name: 'x',
        cron: '* * * * *',
        timezone: 'Mars/Olympus',
        operation: plain,
        input: {},
      }),
    ).toThrow(/invalid/);
  });
});

describe.each(STORE_KINDS)('flow control on %s', (kind) => {
  let store: TestStore;
  let q: Queue;
  let ds: FlowDownstream;
  const cleanups: (() => Promise<unknown>)[] = [];

  async function open(ctx: TestContext): Promise<void> {
    if (kind === 'postgres') {
      const why = await pgUnavailableReason();
      if (why) ctx.skip(why);
    }
    store = await makeTestStore(kind);
    ds = await FlowDownstream.start();
    process.env.FLOW_DOWNSTREAM_URL = ds.url;
    q = await openQueue({ store: store.url, operations: [limited, perAccount, throttled, plain] });
  }

  beforeEach(() => {
    cleanups.length = 0;
  });
  afterEach(async () => {
    for (const c of cleanups.reverse()) await c();
    await q?.close();
    await ds?.close();
    await store?.drop();
  });

  async function worker(options: Parameters<Queue['worker']>[0]) {
    const w = q.worker({ ...FAST, ...options });
    w.on('error', () => undefined);
    await w.start();
    cleanups.push(() => w.stop());
    return w;
  }

  it('pause: no claim of a paused queue or operation; resume: the work runs; the pause is durable', async (ctx) => {
    await open(ctx);
    expect(await q.queues.pause('default', { actor: 'ops', reason: 'maintenance' })).toBe(true);
    expect(await q.queues.pause('default')).toBe(false);
    const jobs = await q.enqueueMany(
      plain,
      [0, 1, 2].map((n) => ({ input: { n }, key: `p-${n}` })),
    );
    // The worker also works an unpaused queue: once a job enqueued there after them has run,
    // it has claimed since, and passed the paused queue's jobs over.
    await worker({ operations: [plain], queues: ['default', 'side'] });
    const side = await q.enqueue(plain, { n: 99 }, { key: 'p-side', queue: 'side' });
    await until(
      'the unpaused queue runs',
      async () => (await q.job(side.id))!.job.state === 'SUCCEEDED',
    );
    expect([...ds.perRequestKey().keys()]).toEqual(['p-side']);
    // Durable: another queue object on the store sees it.
    const other = await openQueue({ store: store.url });
    cleanups.push(() => other.close());
    const listed = await other.queues.list();
    expect(listed.find((x) => x.name === 'default')?.paused).toMatchObject({
      actor: 'ops',
      reason: 'maintenance',
    });
    expect(await other.queues.resume('default')).toBe(true);
    await until('the paused jobs run', async () => {
      const states = await Promise.all(jobs.map(async (j) => (await q.job(j.id))!.job.state));
      return states.every((s) => s === 'SUCCEEDED');
    });
    // An operation paused: its jobs wait, others' run.
    await q.queues.pause('flow.plain', { operation: true });
    const held = await q.enqueue(plain, { n: 9 }, { key: 'p-9' });
    await worker({ operations: [perAccount] });
    const other2 = await q.enqueue(perAccount, { account: 'a', n: 1 }, { key: 'a-1' });
    await until(
      'the other operation runs',
      async () => (await q.job(other2.id))!.job.state === 'SUCCEEDED',
    );
    expect((await q.job(held.id))!.job.state).toBe('QUEUED');
    await q.queues.resume('flow.plain', { operation: true });
    await until(
      'the resumed operation runs',
      async () => (await q.job(held.id))!.job.state === 'SUCCEEDED',
    );
    expect([...ds.perRequestKey().values()].every((n) => n === 1)).toBe(true);
  });

  it('per-key concurrency 1: never two requests of one key at once; the other keys flow', async (ctx) => {
    await open(ctx);
    ds.holdMs = 30;
    const items = Array.from({ length: 60 }, (_, i) => ({
      input: { account: `acct-${i % 6}`, n: i },
      key: `c-${i}`,
    }));
    await q.enqueueMany(perAccount, items);
    await worker({ operations: [perAccount], concurrency: 8 });
    await worker({ operations: [perAccount], concurrency: 8 });
    await until('all 60 reach the downstream', () => ds.hits.length >= 60, 30_000);
    expect(ds.maxConcurrentPerKey).toBe(1);
    // Six keys, sixteen slots: several keys ran side by side.
    expect(ds.maxConcurrent).toBeGreaterThan(1);
    expect([...ds.perRequestKey().values()].every((n) => n === 1)).toBe(true);
    // The limited claim records its routine steps as the plain claim does: columns (id 0).
    const [first] = await q.jobs({ state: 'SUCCEEDED', limit: 1 });
    const d = (await q.job(first!.id))!;
    expect(d.events.map((e) => [e.kind, e.id])).toEqual([
      ['enqueued', 0],
      ['leased', 0],
      ['dispatched', 0],
      ['attempt-succeeded', 0],
    ]);
  });

  it('a rate limit holds starts to max per window across workers; waiting jobs are not attempts', async (ctx) => {
    await open(ctx);
    // flow.limited: FLOW_RATE_MAX (default 20) starts a second.
    await q.enqueueMany(
      limited,
      Array.from({ length: 50 }, (_, n) => ({ input: { n }, key: `r-${n}` })),
    );
    await worker({ operations: [limited], concurrency: 20 });
    await worker({ operations: [limited], concurrency: 20 });
    await until('all 50 reach the downstream', () => ds.hits.length >= 50, 20_000);
    const at = ds.hits.map((h) => h.at).sort((a, b) => a - b);
    // Every whole second from the first arrival: at most 20 (+1 for arrival jitter).
    for (const n of ds.perSecond(at[0]!, at[at.length - 1]! + 1_000))
      expect(n).toBeLessThanOrEqual(21);
    // 50 at 20 a second: the last starts at least 2 s after the first.
    expect(at[at.length - 1]! - at[0]!).toBeGreaterThanOrEqual(2_000 - 100);
    const jobs = await q.jobs({ operation: 'flow.limited', limit: 100 });
    for (const j of jobs) expect(j.attemptCount).toBe(1);
  });

  it('a 429 with Retry-After holds every worker off and marks no job failed', async (ctx) => {
    await open(ctx);
    ds.refuseUntil = Date.now() + 60_000;
    ds.retryAfterMs = 1_500;
    await worker({ operations: [throttled], concurrency: 5 });
    await worker({ operations: [throttled], concurrency: 5 });
    const first = await q.enqueue(throttled, { n: 0 }, { key: 't-0' });
    // Its refusal is journaled after the hold it asked for is committed.
    await until(
      'the first refusal is journaled',
      async () => (await q.job(first.id))!.attempts[0]?.finishedAt,
    );
    const firstRefusal = ds.hits.find((h) => h.refused)!.at;
    // The downstream accepts again soon; nothing may arrive during the hold it asked for.
    ds.refuseUntil = firstRefusal + 200;
    await q.enqueueMany(
      throttled,
      Array.from({ length: 9 }, (_, n) => ({ input: { n: n + 1 }, key: `t-${n + 1}` })),
    );
    await until('all 10 accepted', () => ds.hits.filter((h) => !h.refused).length >= 10, 20_000);
    const accepted = ds.hits.filter((h) => !h.refused);
    expect(ds.hits.filter((h) => h.refused)).toHaveLength(1);
    expect(Math.min(...accepted.map((h) => h.at))).toBeGreaterThanOrEqual(
      firstRefusal + 1_500 - 50,
    );
    // No job failed for it: every one succeeds.
    await until('every job SUCCEEDED', async () =>
      (await q.jobs({ operation: 'flow.throttled', limit: 100 })).every(
        (j) => j.state === 'SUCCEEDED',
      ),
    );
    const refused = (await q.job(first.id))!;
    expect(refused.attempts[0], JSON.stringify(refused.attempts[0])).toMatchObject({
      state: 'FAILED',
      reason: 'rate-limited',
    });
    expect([...ds.perRequestKey().values()].every((n) => n === 1)).toBe(true);
  });

  it('a schedule every second: each slot one job, however many workers tick; listed with its next run', async (ctx) => {
    await open(ctx);
    const tick = defineSchedule({
      name: 'every-second',
      cron: '* * * * * *',
      operation: plain,
      input: { n: 0 },
    });
    await worker({ operations: [plain], schedules: [tick] });
    await worker({ operations: [plain], schedules: [tick] });
    await worker({ operations: [plain], schedules: [tick] });
    await until('four slots run', () => ds.hits.length >= 4, 15_000);
    const listed = await q.schedules.list();
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({ name: 'every-second', operation: 'flow.plain' });
    expect(listed[0]!.nextRunAt).toBeGreaterThan(Date.now() - 1_000);
    const jobs = await q.jobs({ operation: 'flow.plain', limit: 100 });
    const keys = jobs.map((j) => j.requestKey);
    expect(new Set(keys).size).toBe(keys.length);
    for (const k of keys)
      expect(k).toMatch(/^schedule:every-second:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
    expect([...ds.perRequestKey().values()].every((n) => n === 1)).toBe(true);
  });
});
