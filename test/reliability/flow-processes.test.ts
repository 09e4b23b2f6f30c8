/**
 * Flow control across worker processes (issue #30), on both stores: limits held in the store,
 * not in any process, so four processes (one of them SIGKILLed and restarted) keep one limit.
 *
 * The two 60-second runs (the rate, the schedule) run both stores at once to keep CI time down
 * (RECKON_FLOW_SECONDS shortens them for a quick local look). Rates are judged in windows of the
 * downstream's own clock, from the arrival time it records per request.
 */
import { fileURLToPath } from 'node:url';
import type { TestContext } from 'vitest';
import { describe, expect, it } from 'vitest';
import { FlowDownstream } from '../helpers/flow-downstream.js';
import { STORE_KINDS } from '../helpers/stores.js';
import { limited, perAccount, plain, throttled } from '../fixtures/flow-ops.js';
import { Rig, until } from './harness.js';

const OPS_MODULE = fileURLToPath(new URL('../fixtures/flow-ops.ts', import.meta.url));
const RUN_S = Number(process.env.RECKON_FLOW_SECONDS ?? 60);
/** Seconds of arrivals before the measured run: every process has dispatched (warm). */
const WARM_S = 2;

async function rigWithDownstream(ctx: TestContext, kind: (typeof STORE_KINDS)[number]) {
  const rig = await Rig.open(ctx, kind);
  const ds = await FlowDownstream.start();
  ctx.onTestFinished(() => ds.close());
  const env = { FLOW_DOWNSTREAM_URL: ds.url };
  const child = (more: Record<string, string> = {}, queues = ['default']) =>
    rig.child(
      {
        operationsModule: OPS_MODULE,
        concurrency: 4,
        leaseMs: 10_000,
        // The product's polling and recovery intervals, not the crash tests' fast ones: four
        // processes polling every 25 ms would spend the CPU the limits are judged with.
        pollIntervalMs: 100,
        reclaimIntervalMs: 1_000,
        reconcileIntervalMs: 1_000,
        queues,
        ...(process.env.FLOW_LOG ? { logLevel: 'warn' as const } : {}),
      },
      { ...env, ...more },
    );
  return { rig, ds, child };
}

/** No request key reached the downstream twice. */
function expectEachOnce(ds: FlowDownstream, e = expect): void {
  const twice = [...ds.perRequestKey()].filter(([, n]) => n > 1);
  e(twice).toEqual([]);
}

/** Every attempt's lease time of an operation (in a queue), in order: the starts granted. */
async function startsOf(rig: Rig, operation: string, queue?: string): Promise<number[]> {
  const jobs = await rig.q.jobs({ operation, limit: 10_000, ...(queue ? { queue } : {}) });
  const details = await Promise.all(jobs.map((j) => rig.job(j.id)));
  return details.flatMap((d) => d.attempts.map((a) => a.leasedAt)).sort((a, b) => a - b);
}

describe('flow control across processes: a 60-second rate, both stores at once', () => {
  it.for(STORE_KINDS)(
    '%s: 4 processes, 20 starts a second, one SIGKILLed and restarted: never over 20 a second, the rate held (20 ± 1 under RECKON_FLOW_STRICT)',
    { concurrent: true, timeout: 240_000 + RUN_S * 1_000 },
    async (kind, ctx) => {
      const e = ctx.expect;
      const { rig, ds, child } = await rigWithDownstream(ctx, kind);
      // More than the run can take, so the limit (never a lack of work) sets the pace.
      await rig.q.enqueueMany(
        limited,
        Array.from({ length: 20 * (WARM_S + RUN_S + 8) }, (_, n) => ({
          input: { n },
          key: `r-${n}`,
        })),
      );
      const only = { FLOW_OPS: 'flow.limited' };
      const children = [child(only), child(only), child(only), child(only)];
      for (const c of children) e(await c.ready).toBe(true);
      await until('the first arrivals', () => ds.hits.length > 0, 30_000);
      const from = ds.hits[0]!.at + WARM_S * 1_000;
      const to = from + RUN_S * 1_000;
      await until('a third of the run', () => Date.now() > from + (to - from) / 3, to);
      await children[1]!.kill();
      const again = child(only);
      e(await again.ready).toBe(true);
      await until('an arrival after the run', () => ds.hits.at(-1)!.at >= to, 60_000 + to - from);
      const perSecond = ds.perSecond(from, to);
      // The store granted at most 20 starts in any 1000 ms (its own clock): 21 span a second.
      const starts = await startsOf(rig, 'flow.limited');
      const startsPerSecond = perSecondOf(starts, from, to);
      const seen = `per second: ${perSecond.join(' ')}; starts (lease times): ${startsPerSecond.join(' ')}`;
      void ctx.annotate(seen);
      const crowded = starts.filter((t, i) => i >= 20 && t - starts[i - 20]! < 1_000);
      e(crowded, seen).toEqual([]);
      // The downstream's view of the ceiling: over the run, no more than the limit allows (plus
      // a second's worth of starts from before the run that arrive in it).
      const arrived = perSecond.reduce((a, b) => a + b, 0);
      e(arrived, seen).toBeLessThanOrEqual(20 * perSecond.length + 20);
      // And in every second at most 21 (+1 for where a start's arrival falls) on a host that
      // dispatches promptly (RECKON_FLOW_STRICT=1). On a loaded two-core host the store's starts
      // hold 20 in every second while a second of arrivals can hold a few more: claims of one
      // second whose dispatch marker and request the CPU and the disk held back a few hundred ms
      // arrive in the next. That is the worker's dispatch delay, which no limit in the store can
      // shape; the starts above are the limit (docs/performance-log.md, issue #30).
      const strict = process.env.RECKON_FLOW_STRICT === '1';
      if (strict) e(Math.max(...perSecond), seen).toBeLessThanOrEqual(21);
      // The rate held over the whole run, through the SIGKILL and restart: a late claim catches
      // up the slots it missed (up to a quarter window), so a busy host keeps 20 ± 1
      // (RECKON_FLOW_STRICT=1). A host loaded far past its cores (load 15 on two) starves the
      // worker processes for longer than the catch-up covers: 18.5 is the floor there.
      const mean = arrived / perSecond.length;
      e(mean, seen).toBeGreaterThanOrEqual(strict ? 19 : 18.5);
      // Every second at 19 or more where the host gives the workers the CPU to keep up (a
      // two-core box shared with other suites starves all of them at once for a few hundred ms).
      // On such a host the floor is the store's starts: a stalled dispatch moves a second's
      // arrivals into the next (seen in CI: 11 then 27 arrivals, 20 and 20 starts).
      e(Math.min(...(strict ? perSecond : startsPerSecond)), seen).toBeGreaterThanOrEqual(
        strict ? 19 : 12,
      );
      expectEachOnce(ds, e);
    },
  );
});

describe('flow control across processes: a 60-second schedule, both stores at once', () => {
  it.for(STORE_KINDS)(
    '%s: a schedule every second, 3 processes, one SIGKILLed at random: every slot enqueued exactly once',
    { concurrent: true, timeout: 240_000 + RUN_S * 1_000 },
    async (kind, ctx) => {
      const e = ctx.expect;
      const { rig, ds, child } = await rigWithDownstream(ctx, kind);
      const env = { FLOW_SCHEDULE: '1' };
      const children = [child(env), child(env), child(env)];
      for (const c of children) e(await c.ready).toBe(true);
      await until('the first slot', () => ds.hits.length >= 1, 30_000);
      const from = ds.hits[0]!.at;
      const killAt = from + 2_000 + Math.floor(Math.random() * (RUN_S - 4) * 1_000);
      await until('the moment to kill', () => Date.now() >= killAt, RUN_S * 1_000);
      const victim = Math.floor(Math.random() * 3);
      void ctx.annotate(`killed child ${victim} at +${killAt - from} ms`);
      await children[victim]!.kill();
      await until('the run’s last slot', () => ds.hits.at(-1)!.at >= from + RUN_S * 1_000, to60());
      const jobs = await rig.q.jobs({ operation: 'flow.plain', limit: 10_000 });
      const slots = jobs
        .map((j) => /^schedule:tick:(.+)$/.exec(j.requestKey)?.[1])
        .filter((s): s is string => s !== undefined)
        .map((s) => Date.parse(s))
        .sort((a, b) => a - b);
      e(slots.length).toBeGreaterThanOrEqual(RUN_S);
      e(new Set(slots).size).toBe(slots.length);
      // No gap: one job for every second from the first slot to the last.
      const gaps = slots.filter((t, i) => i > 0 && t - slots[i - 1]! !== 1_000);
      e(gaps).toEqual([]);
      expectEachOnce(ds, e);
    },
  );
});

/** How many of the times fall in each whole second from `from` to `to`. */
function perSecondOf(times: number[], from: number, to: number): number[] {
  const out: number[] = [];
  for (let s = from; s + 1_000 <= to; s += 1_000)
    out.push(times.filter((t) => t >= s && t < s + 1_000).length);
  return out;
}

/** How long to wait for the last of a run's arrivals. */
function to60(): number {
  return 60_000 + RUN_S * 1_000;
}

describe.each(STORE_KINDS)('flow control across processes on %s', (kind) => {
  it('per-key concurrency 1, 4 processes, 50 keys: never two requests of one key at once; other keys flow', async (ctx) => {
    const { rig, ds, child } = await rigWithDownstream(ctx, kind);
    ds.holdMs = 40;
    await rig.q.enqueueMany(
      perAccount,
      Array.from({ length: 300 }, (_, n) => ({
        input: { account: `acct-${n % 50}`, n },
        key: `c-${n}`,
      })),
    );
    const children = [child(), child(), child(), child()];
    for (const c of children) expect(await c.ready).toBe(true);
    await until('300 requests', () => ds.hits.length >= 300, 100_000);
    expect(ds.maxConcurrentPerKey).toBe(1);
    // 16 slots over 50 keys: other keys are served side by side (a starved machine runs fewer).
    expect(ds.maxConcurrent).toBeGreaterThanOrEqual(4);
    expectEachOnce(ds);
    await until(
      'every job SUCCEEDED',
      async () =>
        (await rig.q.jobs({ operation: 'flow.per-account', limit: 1_000 })).every(
          (j) => j.state === 'SUCCEEDED',
        ),
      30_000,
    );
  }, 240_000);

  it('a 429 with Retry-After across 4 processes: every worker holds off, no job marked failed', async (ctx) => {
    const { rig, ds, child } = await rigWithDownstream(ctx, kind);
    ds.holdMs = 20;
    ds.retryAfterMs = 2_000;
    let enqueued = 0;
    const enqueue = (n: number) =>
      rig.q.enqueueMany(
        throttled,
        Array.from({ length: n }, () => ({ input: { n: enqueued }, key: `t-${enqueued++}` })),
      );
    const children = [child(), child(), child(), child()];
    for (const c of children) expect(await c.ready).toBe(true);
    // Work is fed until every process has served some: on a loaded host a process can be ready
    // seconds after the others, and 300 jobs enqueued up front were all run before it claimed.
    await enqueue(100);
    await until(
      'work from every process',
      async () => {
        if (new Set(ds.hits.map((h) => h.pid)).size >= 4) return true;
        if (enqueued - ds.hits.length < 50) await enqueue(50);
        return false;
      },
      60_000,
    );
    // Work for the hold and after it.
    await enqueue(200);
    ds.refuseUntil = Date.now() + 1_000;
    await until('the first refusal', () => ds.hits.some((h) => h.refused), 30_000);
    await until(
      'every job SUCCEEDED',
      async () =>
        (await rig.q.jobs({ operation: 'flow.throttled', limit: 1_000 })).every(
          (j) => j.state === 'SUCCEEDED',
        ),
      120_000,
    );
    const firstRefusal = ds.hits.find((h) => h.refused)!.at;
    const refused = ds.hits.filter((h) => h.refused);
    void ctx.annotate(
      `${refused.length} refused, from ${new Set(refused.map((h) => h.pid)).size} processes`,
    );
    // Only what was already on its way when the hold committed was refused: at most one per
    // slot (4 processes × 4), not a stream of retries from the processes not told.
    expect(refused.length).toBeLessThanOrEqual(16);
    // No process claimed during the 2 s the downstream asked for: the first refused attempt is
    // journaled once its hold is committed, and no attempt was leased from then until the hold
    // ended (those leased before it were on their way, and are among the refused).
    const jobs = await rig.q.jobs({ operation: 'flow.throttled', limit: 1_000 });
    const attempts = (await Promise.all(jobs.map((j) => rig.job(j.id)))).flatMap((d) => d.attempts);
    const held = attempts
      .filter((a) => a.reason === 'rate-limited')
      .sort((a, b) => a.finishedAt! - b.finishedAt!)[0]!;
    const leasedDuringHold = attempts.filter(
      (a) => a.leasedAt > held.finishedAt! && a.leasedAt < firstRefusal + 2_000 - 50,
    );
    expect(leasedDuringHold).toEqual([]);
    // Then every process went on.
    const after = ds.hits.filter((h) => !h.refused && h.at >= firstRefusal + 2_000 - 50);
    expect(new Set(after.map((h) => h.pid)).size).toBeGreaterThanOrEqual(2);
    expectEachOnce(ds);
    expect(jobs.filter((j) => j.state !== 'SUCCEEDED')).toEqual([]);
  }, 240_000);

  it('pause while 4 processes run: no claim after the pause commits, through a restart of every process; resume: work continues, through another', async (ctx) => {
    const { rig, ds, child } = await rigWithDownstream(ctx, kind);
    ds.holdMs = 20;
    await rig.q.enqueueMany(
      plain,
      Array.from({ length: 400 }, (_, n) => ({ input: { n }, key: `p-${n}` })),
    );
    let children = [child(), child(), child(), child()];
    for (const c of children) expect(await c.ready).toBe(true);
    await until('work is flowing', () => ds.hits.length >= 40, 30_000);
    await rig.q.queues.pause('default', { actor: 'test' });
    const pausedAt = await rig.q.store.clockNow();
    const hitsAtPause = ds.hits.length;
    // Every process killed and started again: the pause is in the store.
    await Promise.all(children.map((c) => c.kill()));
    const both = () => child({}, ['default', 'other']);
    children = [both(), both(), both(), both()];
    for (const c of children) expect(await c.ready).toBe(true);
    // Each new process claims: it takes jobs of a queue not paused, never the paused one's.
    const pids = new Set(children.map((c) => String(c.process.pid)));
    let n = 0;
    await until(
      'every new process served the other queue',
      async () => {
        const served = new Set(
          ds.hits.filter((h) => h.requestKey.startsWith('o-')).map((h) => h.pid),
        );
        if ([...pids].every((p) => served.has(p))) return true;
        await rig.q.enqueue(plain, { n }, { key: `o-${n++}`, queue: 'other' });
        return false;
      },
      60_000,
    );
    const leasedAfter = async () =>
      (await startsOf(rig, 'flow.plain', 'default')).filter((at) => at > pausedAt);
    expect(await leasedAfter()).toEqual([]);
    // Only what was claimed before the pause reached the downstream since.
    const sincePause = ds.hits.slice(hitsAtPause).filter((h) => h.requestKey.startsWith('p-'));
    expect(sincePause.length).toBeLessThanOrEqual(16);
    await rig.q.queues.resume('default', { actor: 'test' });
    const hitsAtResume = ds.hits.length;
    await until('work flows again', () => ds.hits.length >= hitsAtResume + 20, 60_000);
    // The resume is in the store too: a fresh set of processes keeps going.
    await Promise.all(children.map((c) => c.kill()));
    children = [both(), both(), both(), both()];
    for (const c of children) expect(await c.ready).toBe(true);
    await until(
      'every job settled',
      async () =>
        (await rig.q.jobs({ operation: 'flow.plain', limit: 1_000 })).every((j) =>
          ['SUCCEEDED', 'NEEDS_REVIEW'].includes(j.state),
        ),
      150_000,
    );
    expect((await leasedAfter()).length).toBeGreaterThan(0);
    expectEachOnce(ds);
  }, 240_000);
});
