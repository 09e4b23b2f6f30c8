/**
 * Hand-offs (PostgreSQL): an idle worker of the enqueuing queue object is leased the fresh job
 * in the enqueue's own commit, so the job starts one round trip sooner, with no wake-up and no
 * claim. The journal reads as if the worker had claimed it; a hand-off never overtakes a due job
 * that a claim would take first, never takes a delayed job, never fills a busy worker, and never
 * happens inside a transaction of the caller's.
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue, type Queue } from '../src/index.js';
import type { Worker } from '../src/runtime/worker.js';
import { createStore } from '../src/store/open.js';
import { countingClaims } from './helpers/counting.js';
import { pgUnavailableReason, tempPgStore } from './helpers/stores.js';
import { until } from './reliability/harness.js';

const pgReason = await pgUnavailableReason();
const MINUTE = 60_000;

const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const ran: number[] = [];
let gate: Promise<void> = Promise.resolve();
const op = defineOperation<{ n: number }, null>({
  name: 'handoff.effect',
  execute: async (input, ctx) => {
    await gate;
    return ctx.dispatch(() => {
      ran.push(input.n);
      return Promise.resolve(null);
    });
  },
});
/** Served by nobody here: a job of it waits in the queue for as long as the test likes. */
const unserved = defineOperation<{ n: number }, null>({
  name: 'handoff.unserved',
  execute: () => Promise.resolve(null),
});

describe.skipIf(pgReason !== null)('hand-offs on postgres', () => {
  async function setUp(
    concurrency = 2,
    pollIntervalMs = MINUTE,
  ): Promise<{
    q: Queue;
    w: Worker;
    claims: () => number;
    url: string;
  }> {
    ran.length = 0;
    gate = Promise.resolve();
    const t = await tempPgStore();
    cleanup.push(() => t.drop());
    const s = await createStore(t.url);
    await s.init();
    cleanup.push(() => s.close());
    const { store, claims, claimsDone } = countingClaims(s);
    const q = await openQueue({ store, operations: [op, unserved] });
    // Polling once a minute (by default): only a wake-up or a hand-off starts a job in time.
    const w = q.worker({ operations: [op], concurrency, prefetch: 0, pollIntervalMs });
    await w.start();
    cleanup.push(() => w.stop());
    // The worker's first claim found the queue empty: from now on it is idle.
    await until('the first claim', () => claimsDone() >= 1);
    return { q, w, claims, url: t.url };
  }

  it('an idle worker takes the fresh job in the enqueue commit: no claim, the journal as for a claim', async () => {
    const { q, w, claims } = await setUp();
    const before = claims();
    for (let n = 0; n < 10; n++) {
      const job = await q.enqueue(op, { n });
      // Answered after the commit that enqueued and leased it.
      expect(job).toMatchObject({ state: 'LEASED', attemptCount: 1, deduplicated: false });
      const detail = await until('the job to succeed', async () => {
        const d = await q.job(job.id);
        return d?.job.state === 'SUCCEEDED' && d;
      });
      expect(detail.attempts).toHaveLength(1);
      expect(detail.attempts[0]).toMatchObject({ ownerId: w.ownerId, state: 'SUCCEEDED' });
      expect(detail.attempts[0]!.dispatchedAt).not.toBeNull();
      const kinds = detail.events.map((e) => e.kind);
      expect(kinds.slice(0, 3)).toEqual(['enqueued', 'leased', 'dispatched']);
      expect(detail.events[1]).toMatchObject({
        attemptNo: 1,
        fromState: 'QUEUED',
        toState: 'LEASED',
        actor: w.ownerId,
      });
    }
    expect(ran).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(claims() - before).toBe(0);
  });

  it('never overtakes a due job that ranks at least as high; a higher priority is handed', async () => {
    // One slot: a declined offer held it while the job's wake-up came, and must give it back.
    const { q } = await setUp(1);
    // Waiting in the same queue at priority 5 (the worker does not serve it, so it stays).
    await q.enqueue(unserved, { n: 0 }, { priority: 5 });
    const succeeded = (id: string) =>
      until('the job to succeed', async () => (await q.job(id))?.job.state === 'SUCCEEDED');
    // Each is woken and claimed as usual, one after the other.
    const lower = await q.enqueue(op, { n: 1 }, { priority: 4 });
    expect(lower.state).toBe('QUEUED');
    await succeeded(lower.id);
    const equal = await q.enqueue(op, { n: 2 }, { priority: 5 });
    expect(equal.state).toBe('QUEUED');
    await succeeded(equal.id);
    const higher = await q.enqueue(op, { n: 3 }, { priority: 6 });
    expect(higher.state).toBe('LEASED');
    await succeeded(higher.id);
    expect(ran).toEqual([1, 2, 3]);
  });

  it('a delayed job, a busy worker and a transaction of the caller: no hand-off, the job runs', async () => {
    // A delayed job is found by the poll.
    const { q, url } = await setUp(1, 50);
    const delayed = await q.enqueue(op, { n: 1 }, { delayMs: 200 });
    expect(delayed.state).toBe('QUEUED');
    await until(
      'the delayed job',
      async () => (await q.job(delayed.id))?.job.state === 'SUCCEEDED',
    );

    let open!: () => void;
    gate = new Promise<void>((r) => (open = r));
    const first = await q.enqueue(op, { n: 2 });
    expect(first.state).toBe('LEASED');
    // Its one slot is taken until the gate opens.
    const second = await q.enqueue(op, { n: 3 });
    expect(second.state).toBe('QUEUED');
    open();

    const app = new pg.Client({ connectionString: url });
    await app.connect();
    cleanup.push(() => app.end());
    await until('an idle worker', async () => (await q.job(second.id))?.job.state === 'SUCCEEDED');
    await app.query('BEGIN');
    const outbox = await q.enqueue(op, { n: 4 }, { transaction: app });
    await app.query('COMMIT');
    expect(outbox.state).toBe('QUEUED');
    await until('the outbox job', async () => (await q.job(outbox.id))?.job.state === 'SUCCEEDED');
    expect(ran).toEqual([1, 2, 3, 4]);
  });

  it('stop() waits for a hand-off whose enqueue is in flight, and runs the job it was handed', async () => {
    const { q, w } = await setUp();
    const enqueued = q.enqueue(op, { n: 1 });
    const stopped = w.stop();
    const job = await enqueued;
    await stopped;
    const detail = await q.job(job.id);
    expect(job.state).toBe('LEASED');
    expect(detail?.job.state).toBe('SUCCEEDED');
    expect(ran).toEqual([1]);
  });
});
