/**
 * Metrics driven by real scenarios, read from the scraped exposition (issue: observability).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createStore,
  defineOperation,
  defineSchedule,
  openQueue,
  type Queue,
} from '../src/index.js';
import { Metrics } from '../src/observe/metrics.js';
import { startMetricsServer } from '../src/server/metrics-server.js';
import { Hono } from 'hono';
import { request as httpRequest } from 'node:http';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  tempSqliteStore,
  type StoreKind,
} from './helpers/stores.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function setup(
  clock?: () => number,
  kind: StoreKind = 'sqlite',
): Promise<{ q: Queue; metrics: Metrics; scrape: () => Promise<string> }> {
  const file = kind === 'sqlite' ? tempSqliteStore() : await makeTestStore(kind);
  const store = await createStore(file.url, clock ? { clock } : {});
  await store.init();
  const metrics = new Metrics({ store, processMetrics: false });
  const q = await openQueue({ store, observer: metrics.observer });
  cleanups.push(async () => {
    await q.close();
    await file.drop();
  });
  return { q, metrics, scrape: () => metrics.text() };
}

function value(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

const fast = { pollIntervalMs: 10, reclaimIntervalMs: 30, reconcileIntervalMs: 30, leaseMs: 2_000 };

describe('metrics', () => {
  it('an UNKNOWN outcome raises its counter for that operation, and its reconciliation observes latency', async () => {
    const { q, scrape } = await setup();
    const hangUp = defineOperation({
      name: 'form.submit',
      execute: (_i: object, ctx) => ctx.dispatch(() => Promise.reject(new Error('socket hang up'))),
    });
    const other = defineOperation({ name: 'other.op', execute: () => Promise.resolve(null) });
    await q.enqueue(hangUp, {});
    const w = q.worker({ operations: [hangUp, other], ...fast });
    const review = new Promise((r) => w.once('review', r));
    await w.start();
    await review;
    await w.stop();
    const text = await scrape();
    expect(
      value(text, 'reckon_unknown_outcomes_total{operation="form.submit",source="worker"}'),
    ).toBe(1);
    expect(value(text, 'reckon_unknown_outcomes_total{operation="other.op",source="worker"}')).toBe(
      0,
    );
    expect(
      value(
        text,
        'reckon_reconciliation_latency_seconds_count{operation="form.submit",path="review",resolution="needs_review"}',
      ),
    ).toBe(1);
    expect(value(text, 'reckon_needs_review_jobs{operation="form.submit"}')).toBe(1);
  });

  it('a lookup that finds the effect counts a prevented duplicate and observes reconciliation latency', async () => {
    const { q, scrape } = await setup();
    const effects = new Set<string>();
    const pay = defineOperation({
      name: 'pay',
      timeoutMs: 50,
      reconcile: { graceMs: 10 },
      lookup: (key) =>
        Promise.resolve(
          effects.has(key)
            ? { found: true as const, outcome: 'succeeded' as const, result: { key } }
            : { found: false as const },
        ),
      execute: (_i: object, ctx) =>
        ctx.dispatch(() => {
          effects.add(ctx.requestKey);
          return Promise.reject(new Error('response lost'));
        }),
    });
    const job = await q.enqueue(pay, {});
    const w = q.worker({ operations: [pay], ...fast });
    const reconciled = new Promise((r) => w.once('reconciled', r));
    await w.start();
    await reconciled;
    await w.stop();
    expect((await q.job(job.id))!.job.state).toBe('SUCCEEDED');
    const text = await scrape();
    expect(
      value(text, 'reckon_duplicates_prevented_total{operation="pay",kind="lookup_found"}'),
    ).toBe(1);
    expect(
      value(
        text,
        'reckon_reconciliation_latency_seconds_count{operation="pay",path="lookup",resolution="succeeded"}',
      ),
    ).toBe(1);
    expect(
      value(
        text,
        'reckon_reconciliation_latency_seconds_sum{operation="pay",path="lookup",resolution="succeeded"}',
      ),
    ).toBeGreaterThan(0.05);
  });

  it('an enqueue deduplicated by request key counts a prevented duplicate', async () => {
    const { q, scrape } = await setup();
    const op = defineOperation({ name: 'mail', execute: () => Promise.resolve(null) });
    await q.enqueue(op, { to: 'a' }, { key: 'k' });
    await q.enqueue(op, { to: 'a' }, { key: 'k' });
    await q.enqueue(op, { to: 'a' }, { key: 'k' });
    const text = await scrape();
    expect(
      value(text, 'reckon_duplicates_prevented_total{operation="mail",kind="enqueue_dedup"}'),
    ).toBe(2);
    expect(value(text, 'reckon_enqueued_total{operation="mail",queue="default"}')).toBe(1);
  });

  it('a lease expiry counts, and the queue-age gauge grows while no worker runs', async () => {
    let now = Date.parse('2026-12-01T10:00:00Z');
    const { q, scrape } = await setup(() => now);
    const op = defineOperation({ name: 'slow', execute: () => Promise.resolve(null) });
    await q.enqueue(op, {}, { key: 'waiting' });
    await q.enqueue(op, {}, { key: 'claimed' });
    expect(value(await scrape(), 'reckon_oldest_queued_age_seconds{queue="default"}')).toBe(0);
    now += 90_000;
    expect(value(await scrape(), 'reckon_oldest_queued_age_seconds{queue="default"}')).toBe(90);
    // A worker that claims and then vanishes: its lease expires.
    await q.store.attemptClaimMany({
      ownerId: 'ghost',
      queues: ['default'],
      operations: ['slow'],
      limit: 1,
      leaseMs: 1_000,
    });
    now += 5_000;
    expect(value(await scrape(), 'reckon_expired_leases')).toBe(1);
    await q.reclaimer({ clockSkewToleranceMs: 0 }).runOnce();
    const text = await scrape();
    expect(value(text, 'reckon_lease_expirations_total{operation="slow",dispatched="false"}')).toBe(
      1,
    );
    expect(value(text, 'reckon_expired_leases')).toBe(0);
    expect(value(text, 'reckon_oldest_queued_age_seconds{queue="default"}')).toBeGreaterThanOrEqual(
      95,
    );
  });

  it('flow control: jobs held at a limit, their wait, pauses and schedule slots (promtool accepts)', async (ctx) => {
    const { q, scrape } = await setup();
    const once = defineOperation({
      name: 'flow.once-a-minute',
      rateLimit: { max: 1, perMs: 60_000 },
      execute: (_i: object, c) => c.dispatch(() => Promise.resolve(1)),
    });
    const tick = defineOperation({
      name: 'flow.tick',
      execute: (_i: object, c) => c.dispatch(() => Promise.resolve(1)),
    });
    await q.enqueueMany(
      once,
      [0, 1, 2].map((n) => ({ input: {}, key: `once-${n}` })),
    );
    await q.queues.pause('emails', { reason: 'provider outage' });
    await q.queues.pause('flow.tick', { operation: true });
    await q.queues.resume('flow.tick', { operation: true });
    const w = q.worker({
      operations: [once, tick],
      schedules: [
        defineSchedule({ name: 'every-second', cron: '* * * * * *', operation: tick, input: {} }),
      ],
      ...fast,
    });
    await w.start();
    cleanups.push(() => w.stop());
    const hasSlot = (t: string) =>
      value(t, 'reckon_schedule_slots_total{schedule="every-second",outcome="enqueued"}') >= 1;
    let text = '';
    for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
      text = await scrape();
      if (
        hasSlot(text) &&
        value(text, 'reckon_flow_wait_seconds_count{operation="flow.once-a-minute"}') === 1
      )
        break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(hasSlot(text)).toBe(true);
    expect(
      value(text, 'reckon_schedule_lag_seconds_count{schedule="every-second"}'),
    ).toBeGreaterThanOrEqual(1);
    // One started; the other two wait for the next minute's slot.
    expect(value(text, 'reckon_flow_wait_seconds_count{operation="flow.once-a-minute"}')).toBe(1);
    expect(
      value(text, 'reckon_flow_held_total{operation="flow.once-a-minute",limit="rate"}'),
    ).toBeGreaterThanOrEqual(2);
    expect(value(text, 'reckon_paused{kind="queue",name="emails"}')).toBe(1);
    expect(text).not.toMatch(/reckon_paused\{kind="operation"/);
    expect(text).toMatch(/^# HELP reckon_flow_held_total \S/m);
    const promtool = spawnSync('promtool', ['--version']);
    if (promtool.error) {
      if (process.env.CI === 'true')
        throw new Error('promtool is required in CI (Debian package prometheus)');
      ctx.skip('promtool not installed (Debian package prometheus)');
    }
    execFileSync('promtool', ['check', 'metrics'], { input: text });
  });

  it('serves /metrics over HTTP in an exposition that promtool accepts', async (ctx) => {
    const { q } = await setup();
    const metrics = new Metrics({ store: q.store });
    const op = defineOperation({
      name: 'ok',
      execute: (_i: object, c) => c.dispatch(() => Promise.resolve(1)),
    });
    await q.enqueue(op, {});
    const server = await startMetricsServer({ metrics, port: 0 });
    cleanups.push(() => server.close());
    const res = await fetch(`${server.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/text\/plain/);
    const text = await res.text();
    expect(text).toMatch(/^reckon_queued_jobs\{queue="default"\} 1$/m);
    expect(text).toMatch(/^reckon_process_cpu_seconds_total /m);
    const promtool = spawnSync('promtool', ['--version']);
    if (promtool.error) {
      if (process.env.CI === 'true')
        throw new Error('promtool is required in CI (Debian package prometheus)');
      ctx.skip('promtool not installed (Debian package prometheus)');
    }
    execFileSync('promtool', ['check', 'metrics'], { input: text });
  });
});

describe('the metrics endpoint (reckon work --metrics-port)', () => {
  it('checks the Host, answers GET and HEAD only, and serves the routes it is given', async () => {
    const { q } = await setup();
    const metrics = new Metrics({ store: q.store });
    const extra = new Hono().get('/readyz', (c) => c.json({ ready: true }));
    const server = await startMetricsServer({
      metrics,
      port: 0,
      allowedHosts: ['metrics.internal'],
      routes: [extra],
    });
    cleanups.push(() => server.close());
    const get = (path: string, host: string, method = 'GET') =>
      new Promise<{ status: number; type: string; body: string }>((resolve, reject) => {
        const req = httpRequest(`${server.url}${path}`, { method, headers: { host } }, (res) => {
          let body = '';
          res.setEncoding('utf8').on('data', (d: string) => (body += d));
          res.on('end', () =>
            resolve({ status: res.statusCode!, type: res.headers['content-type'] ?? '', body }),
          );
        });
        req.once('error', reject).end();
      });
    const here = new URL(server.url).host;
    expect((await get('/metrics', here)).status).toBe(200);
    expect((await get('/metrics', 'metrics.internal:9464')).status).toBe(200);
    expect((await get('/healthz', 'localhost', 'HEAD')).status).toBe(200);
    // A page whose name resolves to 127.0.0.1 (DNS rebinding): refused on every route.
    for (const path of ['/metrics', '/healthz', '/readyz']) {
      const refused = await get(path, 'attacker.example');
      expect(refused.status).toBe(421);
      expect(refused.type).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(refused.body)).toMatchObject({ code: 'HOST_NOT_ALLOWED' });
    }
    expect(await get('/readyz', here)).toMatchObject({ status: 200, body: '{"ready":true}' });
    expect((await get('/metrics', here, 'POST')).status).toBe(405);
    expect((await get('/nothing', here)).status).toBe(404);
  });
});

describe.each(STORE_KINDS)('group commit metrics on %s', (kind) => {
  it('shared commits are timed and counted by kind of write, with the calls each answered', async (ctx) => {
    if (kind === 'postgres') {
      const why = await pgUnavailableReason();
      if (why) ctx.skip(why);
    }
    const { q, scrape } = await setup(undefined, kind);
    const op = defineOperation({
      name: 'mail',
      execute: (_i: object, ctx) => ctx.dispatch(() => Promise.resolve(null)),
    });
    // 40 enqueues at once: fewer commits than calls, and every call counted once.
    await Promise.all(Array.from({ length: 40 }, (_, n) => q.enqueue(op, { n })));
    let text = await scrape();
    const enqueueWrite = kind === 'sqlite' ? 'shared' : 'enqueue';
    const labels = `{store="${kind}",write="${enqueueWrite}"}`;
    expect(value(text, `reckon_store_commit_callers_sum${labels}`)).toBe(40);
    const commits = value(text, `reckon_store_commit_seconds_count${labels}`);
    expect(commits).toBeGreaterThanOrEqual(1);
    expect(commits).toBeLessThan(40);
    expect(value(text, `reckon_store_commit_seconds_sum${labels}`)).toBeGreaterThan(0);

    const w = q.worker({ operations: [op], concurrency: 8, ...fast });
    let done = 0;
    const all = new Promise<void>((r) => w.on('succeeded', () => ++done === 40 && r()));
    await w.start();
    await all;
    await w.stop();
    text = await scrape();
    if (kind === 'sqlite') {
      // A turn of claims alone commits without an fsync (write="claim"); the rest shares the
      // synced commits: the 40 enqueues, 40 markers and 40 outcomes, and claims besides.
      const callers = (write: string) =>
        value(text, `reckon_store_commit_callers_sum{store="sqlite",write="${write}"}`);
      expect(callers('shared') + callers('claim')).toBeGreaterThan(40 + 80);
    } else {
      expect(
        value(text, 'reckon_store_commit_callers_sum{store="postgres",write="dispatch"}'),
      ).toBe(40);
      expect(value(text, 'reckon_store_commit_callers_sum{store="postgres",write="finish"}')).toBe(
        40,
      );
      expect(
        value(text, 'reckon_store_commit_seconds_count{store="postgres",write="claim"}'),
      ).toBeGreaterThan(0);
    }
  });
});

describe('alert rules in the docs', () => {
  it('pass promtool check rules', (ctx) => {
    const promtool = spawnSync('promtool', ['--version']);
    if (promtool.error) {
      if (process.env.CI === 'true')
        throw new Error('promtool is required in CI (Debian package prometheus)');
      ctx.skip('promtool not installed (Debian package prometheus)');
    }
    const out = execFileSync('promtool', ['check', 'rules', 'docs/alerts.yml'], {
      encoding: 'utf8',
    });
    expect(out).toMatch(/SUCCESS: 6 rules found/);
  });
});
