/**
 * Awaiting outcomes (`q.call`, `q.waitFor`) on both stores: a caller killed mid-wait and called
 * again gets the first job's outcome with one effect at the downstream; pending states reject
 * with `OutcomePending` and their evidence; lost notifications cost only latency; on PostgreSQL,
 * a thousand waiters share one listener connection.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import {
  JobNotFound,
  OutcomePending,
  QueueClosed,
  RequestKeyConflict,
  defineOperation,
  openQueue,
  type Queue,
  type Store,
} from '../src/index.js';
import { Metrics } from '../src/observe/metrics.js';
import { Downstream, startDownstream } from '../src/testkit/downstream.js';
import { effectOp } from './fixtures/call-ops.js';
import {
  pgUnavailableReason,
  tempPgStore,
  tempSqliteStore,
  type TestStore,
} from './helpers/stores.js';
import { until } from './reliability/harness.js';
import { OUTCOME_LISTENER_APP } from '../src/store/postgres/outcome-notify.js';

const pgReason = await pgUnavailableReason();

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function storeOf(kind: 'sqlite' | 'postgres'): Promise<TestStore> {
  const t = kind === 'sqlite' ? tempSqliteStore() : await tempPgStore();
  cleanup.push(() => t.drop());
  return t;
}

async function queueOn(
  store: string | Store,
  options: { outcomePollMs?: number } = {},
): Promise<Queue> {
  const q = await openQueue({ store, outcomePollMs: options.outcomePollMs ?? 200 });
  cleanup.push(() => q.close());
  return q;
}

async function downstream(d?: Downstream): Promise<Downstream> {
  const ds = d ? await d.start() : await startDownstream();
  cleanup.push(() => ds.close());
  return ds;
}

/** Starts the caller fixture; resolves with the process and its stdout lines so far. */
function caller(env: Record<string, string>): { c: ChildProcess; lines: string[] } {
  const c = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/call-child.ts'], {
    env: { ...process.env, ...env, TSX_TSCONFIG_PATH: 'tsconfig.json' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  cleanup.push(() => c.kill('SIGKILL'));
  const lines: string[] = [];
  let buf = '';
  c.stdout.on('data', (d: Buffer) => {
    buf += d.toString('utf8');
    const parts = buf.split('\n');
    buf = parts.pop()!;
    lines.push(...parts);
  });
  return { c, lines };
}

const unserved = defineOperation<{ n: number }, null>({
  name: 'call.unserved',
  execute: () => Promise.resolve(null),
});

const kinds = [
  ['sqlite', null],
  ['postgres', pgReason],
] as const;

describe.each(kinds)('q.call and q.waitFor on %s', (kind, skipReason) => {
  it.skipIf(skipReason !== null)(
    "a caller killed mid-wait and called again: one effect, the first job's result",
    async () => {
      const t = await storeOf(kind);
      const ds = await downstream();
      const worker = await queueOn(t.url);
      const w = worker.worker({
        operations: [effectOp(ds.url)],
        concurrency: 2,
        pollIntervalMs: 50,
      });
      await w.start();
      cleanup.push(() => w.stop());

      const env = { STORE_URL: t.url, DOWNSTREAM_URL: ds.url, KEY: 'order-1:email' };
      const first = caller(env);
      // The job exists and its request has left the worker: the caller dies before the answer.
      const exited = new Promise((r) => first.c.once('exit', r));
      ds.onRequest = () => first.c.kill('SIGKILL');
      await exited;
      expect(first.lines.some((l) => l.startsWith('{'))).toBe(false);
      ds.onRequest = undefined;

      const second = caller(env);
      const line = await until(
        "the second caller's outcome",
        () => second.lines.find((l) => l.startsWith('{')),
        30_000,
      );
      const outcome = JSON.parse(line) as { state: string; result: unknown; jobId: string };
      expect(outcome.state).toBe('SUCCEEDED');
      const jobs = await worker.jobs();
      expect(jobs).toHaveLength(1);
      expect(outcome.jobId).toBe(jobs[0]!.id);
      expect(outcome.result).toEqual(jobs[0]!.result);
      expect(ds.stats.effects).toBe(1);
      expect(ds.stats.requests).toBe(1);
    },
    60_000,
  );

  it.skipIf(skipReason !== null)('an outcome already reached answers at once', async () => {
    const t = await storeOf(kind);
    const ds = await downstream();
    const q = await queueOn(t.url);
    const op = effectOp(ds.url);
    const w = q.worker({ operations: [op], concurrency: 1, pollIntervalMs: 50 });
    await w.start();
    cleanup.push(() => w.stop());
    const first = await q.call(op, { n: 1 }, { key: 'k-1', timeoutMs: 20_000 });
    expect(first.state).toBe('SUCCEEDED');
    await w.stop();
    // No worker now, and the waits are long: only an immediate answer passes.
    const t0 = performance.now();
    const again = await q.call(op, { n: 1 }, { key: 'k-1', timeoutMs: 20_000 });
    const known = await q.waitFor(first.jobId, { timeoutMs: 20_000 });
    expect(performance.now() - t0).toBeLessThan(1_000);
    expect(again).toEqual(first);
    expect(known).toEqual(first);
    expect(ds.stats.effects).toBe(1);
    // Another request under the same key is refused, not attached.
    await expect(q.call(op, { n: 2 }, { key: 'k-1' })).rejects.toBeInstanceOf(RequestKeyConflict);
  });

  it.skipIf(skipReason !== null)('FAILED and CANCELLED outcomes resolve', async () => {
    const t = await storeOf(kind);
    const ds = await downstream(new Downstream({ behaviour: () => ({ action: 'fail' }) }));
    const q = await queueOn(t.url);
    const op = effectOp(ds.url);
    const w = q.worker({ operations: [op], concurrency: 1, pollIntervalMs: 50 });
    await w.start();
    cleanup.push(() => w.stop());
    const failed = await q.call(op, { n: 1 }, { key: 'refused', timeoutMs: 20_000 });
    expect(failed.state).toBe('FAILED');
    expect(failed.state === 'FAILED' && failed.error.message).toBe('refused');

    const job = await q.enqueue(unserved, { n: 1 });
    const waiting = q.waitFor(job.id, { timeoutMs: 20_000 });
    await q.cancel(job.id, { reason: 'the user changed their mind' });
    const cancelled = await waiting;
    expect(cancelled).toMatchObject({ state: 'CANCELLED', jobId: job.id });
    expect(cancelled.state === 'CANCELLED' && cancelled.error.message).toBe(
      'the user changed their mind',
    );
  });

  it.skipIf(skipReason !== null)('a QUEUED job past the wait: OutcomePending QUEUED', async () => {
    const t = await storeOf(kind);
    const q = await queueOn(t.url);
    const err = await q.call(unserved, { n: 1 }, { key: 'nobody-works', timeoutMs: 300 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OutcomePending);
    const p = err as OutcomePending;
    expect(p.code).toBe('OUTCOME_PENDING');
    expect(p.state).toBe('QUEUED');
    expect(p.reason).toBe('timeout');
    expect(p.evidence.attempt).toBeNull();
    expect(p.evidence.events.map((e) => e.kind)).toContain('enqueued');
    expect(p.message).toMatch(/nothing was sent yet/);
    // timeoutMs 0 answers from the current state.
    await expect(q.waitFor(p.jobId, { timeoutMs: 0 })).rejects.toMatchObject({ state: 'QUEUED' });
  });

  it.skipIf(skipReason !== null)('an abort signal ends the wait with OutcomePending', async () => {
    const t = await storeOf(kind);
    const q = await queueOn(t.url);
    const ac = new AbortController();
    const waiting = q.call(unserved, { n: 1 }, { key: 'aborted', signal: ac.signal });
    const job = await until('the job', async () => (await q.jobs())[0]);
    ac.abort(new Error('the user left'));
    const err = (await waiting.then(
      () => undefined,
      (e: unknown) => e,
    )) as OutcomePending;
    expect(err).toBeInstanceOf(OutcomePending);
    expect(err).toMatchObject({ jobId: job.id, state: 'QUEUED', reason: 'aborted' });
    expect((err.cause as Error).message).toBe('the user left');
    // An aborted caller starts nothing.
    await expect(q.call(unserved, { n: 2 }, { key: 'never', signal: ac.signal })).rejects.toThrow(
      'the user left',
    );
    expect(await q.jobs()).toHaveLength(1);
  });

  it.skipIf(skipReason !== null)(
    'a job that ends UNKNOWN or NEEDS_REVIEW within the wait: OutcomePending with its evidence',
    async () => {
      const t = await storeOf(kind);
      const ds = await downstream(new Downstream({ behaviour: () => ({ action: 'error' }) }));
      const q = await queueOn(t.url);
      // With a lookup the attempt waits UNKNOWN for reconciliation; without one a person must look.
      const reconcilable = effectOp(ds.url, { lookup: true });
      const reviewOnly = effectOp(ds.url);
      const w = q.worker({
        operations: [reconcilable, reviewOnly],
        concurrency: 2,
        pollIntervalMs: 50,
      });
      await w.start();
      cleanup.push(() => w.stop());
      const [unknown, review] = (await Promise.all(
        [reconcilable, reviewOnly].map((op) =>
          q.call(op, { n: 1 }, { key: `maybe-sent:${op.name}`, timeoutMs: 1_500 }).then(
            () => undefined,
            (e: unknown) => e,
          ),
        ),
      )) as OutcomePending[];
      // UNKNOWN waits out the timeout (reconciliation may settle it); NEEDS_REVIEW answers at
      // once, since only a person can move it.
      for (const [err, state, reason] of [
        [unknown!, 'UNKNOWN', 'timeout'],
        [review!, 'NEEDS_REVIEW', 'needs-review'],
      ] as const) {
        expect(err).toBeInstanceOf(OutcomePending);
        expect(err.state).toBe(state);
        expect(err.reason).toBe(reason);
        expect(err.evidence.attempt).toMatchObject({ attemptNo: 1, state: 'UNKNOWN' });
        expect(err.evidence.attempt!.dispatchedAt).toEqual(expect.any(Number));
        expect(err.evidence.events.at(-1)).toMatchObject({ toState: state });
        expect(err.message).toMatch(/may have reached the downstream.*Do not retry/s);
      }
      expect(review!.message).toMatch(/a person is reviewing/);
      expect(ds.stats.requests).toBe(2);
    },
  );

  it.skipIf(skipReason !== null)(
    'awaiting approval: OutcomePending, then the decision wakes the waiter',
    async () => {
      const t = await storeOf(kind);
      const ds = await downstream();
      const base = effectOp(ds.url);
      const gated = defineOperation({ ...base.spec, name: 'call.gated', approval: true });
      const q = await queueOn(t.url, { outcomePollMs: 60_000 });
      const w = q.worker({ operations: [gated], concurrency: 1, pollIntervalMs: 50 });
      await w.start();
      cleanup.push(() => w.stop());
      const err = (await q.call(gated, { n: 1 }, { key: 'ask-first', timeoutMs: 300 }).then(
        () => undefined,
        (e: unknown) => e,
      )) as OutcomePending;
      expect(err).toBeInstanceOf(OutcomePending);
      expect(err.state).toBe('AWAITING_APPROVAL');
      expect(err.evidence.attempt).toBeNull();
      expect(err.message).toMatch(/approve.*nothing was sent yet/s);
      // Approved while a caller waits (polling off): it runs once, and the caller hears of it.
      const waiting = q.call(gated, { n: 1 }, { key: 'ask-first', timeoutMs: 30_000 });
      await until(
        'the caller waits',
        () => (q as unknown as { outcomes: { size: number } }).outcomes.size,
      );
      await q.approvals.decide(err.jobId, { approve: true, actor: 'dana' });
      await expect(waiting).resolves.toMatchObject({ state: 'SUCCEEDED', jobId: err.jobId });
      // Denied: CANCELLED, with the decision as the error; nothing reached the downstream.
      const denied = await q.enqueue(gated, { n: 2 }, { key: 'ask-again' });
      const waitingDenied = q.waitFor(denied.id, { timeoutMs: 30_000 });
      await until(
        'the caller waits',
        () => (q as unknown as { outcomes: { size: number } }).outcomes.size,
      );
      await q.approvals.decide(denied.id, { approve: false, actor: 'dana', note: 'not this one' });
      await expect(waitingDenied).resolves.toMatchObject({ state: 'CANCELLED', jobId: denied.id });
      expect(ds.stats.requests).toBe(1);
    },
    60_000,
  );

  it.skipIf(skipReason !== null)('reckon_call_waiters counts the waits', async () => {
    const t = await storeOf(kind);
    const metrics = new Metrics({ processMetrics: false });
    const q = await openQueue({ store: t.url, observer: metrics.observer });
    cleanup.push(() => q.close());
    const gauge = async () =>
      Number(/^reckon_call_waiters (\S+)$/m.exec(await metrics.registry.metrics())?.[1]);
    const job = await q.enqueue(unserved, { n: 1 });
    const waits = [1, 2, 3].map(() => q.waitFor(job.id, { timeoutMs: 60_000 }));
    await until('three waiters', async () => (await gauge()) === 3);
    await q.cancel(job.id);
    await Promise.all(waits);
    expect(await gauge()).toBe(0);
  });

  it.skipIf(skipReason !== null)('validation, JobNotFound and QueueClosed', async () => {
    const t = await storeOf(kind);
    const q = await openQueue({ store: t.url });
    await expect(q.waitFor('no-such-job', { timeoutMs: 1_000 })).rejects.toBeInstanceOf(
      JobNotFound,
    );
    for (const bad of [-1, 1.5, Number.NaN, '10' as unknown as number, 2 ** 31])
      await expect(q.waitFor('x', { timeoutMs: bad })).rejects.toMatchObject({
        code: 'INVALID_INPUT',
      });
    await expect(q.waitFor('x', { signal: {} as unknown as AbortSignal })).rejects.toMatchObject({
      code: 'INVALID_INPUT',
    });
    const job = await q.enqueue(unserved, { n: 1 });
    const waiting = q.waitFor(job.id, { timeoutMs: 60_000 });
    await until('the waiter', () => (q as unknown as { outcomes: { size: number } }).outcomes.size);
    const rejected = expect(waiting).rejects.toBeInstanceOf(QueueClosed);
    await q.close();
    await rejected;
  });

  it.skipIf(skipReason !== null)(
    'notifications wake the waiters: of this queue and of another connection, polling off',
    async () => {
      const t = await storeOf(kind);
      const ds = await downstream();
      const op = effectOp(ds.url);
      // Polling once a minute: only a notification answers within the test's time.
      const q = await queueOn(t.url, { outcomePollMs: 60_000 });
      const other = await queueOn(t.url, { outcomePollMs: 60_000 });
      const local = q.worker({ operations: [op], concurrency: 1, pollIntervalMs: 50 });
      await local.start();
      cleanup.push(() => local.stop());
      const t0 = performance.now();
      // Worked by this queue's worker (SQLite: the same connection; its own writes).
      const mine = await q.call(op, { n: 1 }, { key: 'notified-1', timeoutMs: 30_000 });
      expect(mine.state).toBe('SUCCEEDED');
      await local.stop();
      // Worked by another store connection (SQLite: as another process would).
      const remote = other.worker({ operations: [op], concurrency: 1, pollIntervalMs: 50 });
      await remote.start();
      cleanup.push(() => remote.stop());
      const theirs = await q.call(op, { n: 2 }, { key: 'notified-2', timeoutMs: 30_000 });
      expect(theirs.state).toBe('SUCCEEDED');
      // Many at once: every one of them is watched and woken, not only the first.
      const many = await Promise.all(
        Array.from({ length: 20 }, (_, n) =>
          q.call(op, { n }, { key: `notified-many-${n}`, timeoutMs: 30_000 }),
        ),
      );
      expect(many.every((o) => o.state === 'SUCCEEDED')).toBe(true);
      expect(performance.now() - t0).toBeLessThan(20_000);
      if (kind === 'postgres') {
        const c = new pg.Client({ connectionString: t.url });
        await c.connect();
        await c.end();
      }
    },
    60_000,
  );

  it.skipIf(skipReason !== null)(
    'without notifications the waiters still resolve, by polling',
    async () => {
      const t = await storeOf(kind);
      const ds = await downstream();
      const inner = await queueOn(t.url);
      // The same store, without its subscription: every notification is lost.
      const deaf = new Proxy(inner.store, {
        get(target, prop) {
          if (prop === 'jobChangeSubscribe') return undefined;
          const v = Reflect.get(target, prop, target) as unknown;
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        },
      });
      const { Queue } = await import('../src/runtime/queue.js');
      const q = new Queue(deaf, { outcomePollMs: 100 });
      const op = effectOp(ds.url);
      const job = await q.enqueue(op, { n: 1 }, { key: 'polled' });
      const waiting = q.waitFor(job.id, { timeoutMs: 20_000 });
      const w = inner.worker({ operations: [op], concurrency: 1, pollIntervalMs: 50 });
      await w.start();
      cleanup.push(() => w.stop());
      await expect(waiting).resolves.toMatchObject({ state: 'SUCCEEDED', jobId: job.id });
    },
  );
});

describe.skipIf(pgReason !== null)('q.call on postgres: one listener', () => {
  const quick = defineOperation<{ n: number }, { n: number }>({
    name: 'call.quick',
    execute: (input, ctx) => ctx.dispatch(() => Promise.resolve({ n: input.n * 2 })),
  });

  async function connections(admin: pg.Client, db: string): Promise<number> {
    const r = await admin.query<{ n: string }>(
      `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
      [db, OUTCOME_LISTENER_APP],
    );
    return Number(r.rows[0]!.n);
  }

  it('1,000 concurrent calls share one listener connection, and all resolve', async () => {
    const t = await storeOf('postgres');
    const db = new URL(t.url).pathname.slice(1);
    const admin = new pg.Client({ connectionString: t.url });
    await admin.connect();
    cleanup.push(() => admin.end());
    const q = await queueOn(t.url);
    const calls = Array.from({ length: 1_000 }, (_, n) =>
      q.call(quick, { n }, { key: `many:${n}`, timeoutMs: 60_000 }),
    );
    await until(
      'every job enqueued',
      async () => (await q.jobs({ limit: 2_000 })).length === 1_000,
    );
    expect(await connections(admin, db)).toBe(1);
    const w = q.worker({ operations: [quick], concurrency: 50, pollIntervalMs: 50 });
    await w.start();
    cleanup.push(() => w.stop());
    const outcomes = await Promise.all(calls);
    outcomes.forEach((o, n) =>
      expect(o).toMatchObject({ state: 'SUCCEEDED', result: { n: n * 2 } }),
    );
    expect(await connections(admin, db)).toBe(1);
    await q.close();
    await until('the listener closed', async () => (await connections(admin, db)) === 0);
  }, 60_000);

  it('only watched jobs call the outcome trigger; a waiter still wakes by its notification', async () => {
    const t = await storeOf('postgres');
    const db = new URL(t.url).pathname.slice(1);
    const admin = new pg.Client({ connectionString: t.url });
    await admin.connect();
    cleanup.push(() => admin.end());
    // Function calls are counted by every backend that connects from now on.
    await admin.query(`ALTER DATABASE ${pg.escapeIdentifier(db)} SET track_functions = 'pl'`);
    const calls = async () => {
      // A backend reports its counts when it exits: wait for the queue's to be gone.
      await until('the queue closed its connections', async () => {
        const r = await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
          [db],
        );
        return r.rows[0]!.n === 0;
      });
      await admin.query('SELECT pg_stat_clear_snapshot()');
      const r = await admin.query<{ funcname: string; calls: number }>(
        `SELECT funcname, calls::int FROM pg_stat_user_functions WHERE schemaname = 'reckon' ORDER BY 1`,
      );
      return r.rows;
    };
    // 50 jobs nobody waits for: enqueued, claimed, marked, finished, no function called.
    const q1 = await queueOn(t.url);
    await q1.enqueueMany(
      quick,
      Array.from({ length: 50 }, (_, n) => ({ input: { n }, key: `unwatched:${n}` })),
    );
    const w1 = q1.worker({ operations: [quick], concurrency: 10, pollIntervalMs: 20 });
    await w1.start();
    await until('the unwatched jobs done', async () => {
      const done = await q1.jobs({ state: 'SUCCEEDED', limit: 100 });
      return done.length === 50;
    });
    await w1.stop();
    await q1.close();
    expect(await calls()).toEqual([]);
    // A call: its job is watched, and its waiter wakes by the notification (no polling).
    const q2 = await queueOn(t.url, { outcomePollMs: 600_000 });
    const w2 = q2.worker({ operations: [quick], concurrency: 1, pollIntervalMs: 20 });
    const answer = q2.call(quick, { n: 21 }, { key: 'watched', timeoutMs: 30_000 });
    await until('the job watched', async () => {
      const r = await admin.query<{ watched: boolean }>(
        `SELECT watched FROM reckon.jobs WHERE request_key = 'watched'`,
      );
      return r.rows[0]?.watched === true;
    });
    await w2.start();
    await expect(answer).resolves.toMatchObject({ state: 'SUCCEEDED', result: { n: 42 } });
    await w2.stop();
    await q2.close();
    expect(await calls()).toEqual([{ funcname: 'jobs_notify_watched', calls: 1 }]);
  });

  it('notifications dropped (no trigger): waiters resolve by polling', async () => {
    const t = await storeOf('postgres');
    const q = await queueOn(t.url, { outcomePollMs: 100 });
    const admin = new pg.Client({ connectionString: t.url });
    await admin.connect();
    cleanup.push(() => admin.end());
    await admin.query('DROP TRIGGER jobs_outcome ON reckon.jobs');
    const waits = Array.from({ length: 20 }, (_, n) =>
      q.call(quick, { n }, { key: `dropped:${n}`, timeoutMs: 30_000 }),
    );
    const w = q.worker({ operations: [quick], concurrency: 5, pollIntervalMs: 50 });
    await w.start();
    cleanup.push(() => w.stop());
    const outcomes = await Promise.all(waits);
    expect(outcomes.every((o) => o.state === 'SUCCEEDED')).toBe(true);
  });
});
