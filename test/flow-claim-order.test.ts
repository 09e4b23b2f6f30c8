/**
 * The limited claim's order in time (issue #30): the window a claim judges is the window of the
 * leases it stamps, and a hold (a downstream's Retry-After) lands between two claims' decisions,
 * never between a decision and its leases. On PostgreSQL a claim is several statements; a
 * connection holding the attempts table stalls one between its decision and its lease.
 */
import pg from 'pg';
import type { TestContext } from 'vitest';
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue, type Queue } from '../src/index.js';
import type { FlowLimit } from '../src/core/flow.js';
import type { ClaimedAttempt } from '../src/store/store.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type TestStore,
} from './helpers/stores.js';
import { until } from './reliability/harness.js';

const noop = (input: { n: number }) => Promise.resolve(input.n);
const twoASecond = defineOperation({
  name: 'order.two',
  rateLimit: { max: 2, perMs: 1_000 },
  execute: noop,
});
const busy = defineOperation({
  name: 'order.busy',
  rateLimit: { max: 5, perMs: 200 },
  execute: noop,
});
const held = defineOperation({
  name: 'order.held',
  rateLimit: { max: 100, perMs: 1_000 },
  execute: noop,
});

let store: TestStore | undefined;
let q: Queue | undefined;
const clients: pg.Client[] = [];

afterEach(async () => {
  for (const c of clients.splice(0)) await c.end().catch(() => undefined);
  await q?.close();
  await store?.drop();
  q = undefined;
  store = undefined;
});

async function open(ctx: TestContext, kind: (typeof STORE_KINDS)[number]): Promise<Queue> {
  if (kind === 'postgres') {
    const why = await pgUnavailableReason();
    if (why) ctx.skip(why);
  }
  store = await makeTestStore(kind);
  q = await openQueue({ store: store.url, operations: [twoASecond, busy, held] });
  return q;
}

async function client(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: store!.url });
  await c.connect();
  clients.push(c);
  return c;
}

function claimOnce(queue: Queue, limit: FlowLimit, ownerId = 'test'): Promise<ClaimedAttempt[]> {
  return queue.store
    .attemptClaimLimited({
      ownerId,
      queues: ['default'],
      limits: [limit],
      limit: 1,
      leaseMs: 60_000,
    })
    .then((r) => r.claimed);
}

/** Lease times of every attempt of an operation, in order, as the journal has them. */
async function leaseTimes(queue: Queue, operation: string): Promise<number[]> {
  const jobs = await queue.jobs({ operation, limit: 1_000 });
  const details = await Promise.all(jobs.map((j) => queue.job(j.id)));
  return details.flatMap((d) => d!.attempts.map((a) => a.leasedAt)).sort((a, b) => a - b);
}

/** Some backend of this database waits on a lock of this kind ('relation', 'advisory'). */
async function waitingOn(admin: pg.Client, lock: string): Promise<boolean> {
  const r = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = $1`,
    [lock],
  );
  return r.rows[0]!.n > 0;
}

/** Starts closer than the limit allows: the (max+1)th start within perMs of the first. */
function crowded(starts: number[], rate: { max: number; perMs: number }): number[] {
  return starts.filter((t, i) => i >= rate.max && t - starts[i - rate.max]! < rate.perMs);
}

describe.each(STORE_KINDS)('the limited claim in time on %s', (kind) => {
  it('8 claimers at once, 5 starts per 200 ms: the journal never has 6 leases within 200 ms', async (ctx) => {
    const queue = await open(ctx, kind);
    await queue.enqueueMany(
      busy,
      Array.from({ length: 40 }, (_, n) => ({ input: { n }, key: `b-${n}` })),
    );
    let claimed = 0;
    await Promise.all(
      Array.from({ length: 8 }, (_, w) =>
        until(
          'every job claimed',
          async () => {
            const got = await claimOnce(queue, busy.flow!, `w${w}`);
            claimed += got.length;
            return claimed >= 40;
          },
          30_000,
        ),
      ),
    );
    const starts = await leaseTimes(queue, busy.name);
    expect(starts).toHaveLength(40);
    expect(crowded(starts, { max: 5, perMs: 200 })).toEqual([]);
  });
});

describe('the limited claim in time on postgres, stalled between its decision and its lease', () => {
  it('a lease is stamped with its decision’s time: a stalled claim does not let a third start in a window of two', async (ctx) => {
    const queue = await open(ctx, 'postgres');
    await queue.enqueueMany(
      twoASecond,
      Array.from({ length: 3 }, (_, n) => ({ input: { n }, key: `t-${n}` })),
    );
    const admin = await client();
    const blocker = await client();
    await blocker.query('BEGIN');
    await blocker.query('LOCK TABLE reckon.attempts IN SHARE MODE');
    const before = await queue.store.clockNow();
    const first = claimOnce(queue, twoASecond.flow!);
    await until('the claim waits to write its lease', () => waitingOn(admin, 'relation'));
    // More than the interval between two starts (500 ms) on the store's clock.
    await until(
      '600 ms on the store’s clock',
      async () => (await queue.store.clockNow()) > before + 600,
    );
    await blocker.query('COMMIT');
    expect(await first).toHaveLength(1);
    let more = 0;
    await until('the other two claimed, as the limit lets them', async () => {
      const got = await claimOnce(queue, twoASecond.flow!);
      more += got.length;
      return more >= 2;
    });
    const starts = await leaseTimes(queue, twoASecond.name);
    expect(starts).toHaveLength(3);
    expect(starts[0]).toBeLessThan(before + 600);
    expect(crowded(starts, { max: 2, perMs: 1_000 })).toEqual([]);
  });

  it('a hold committed while a claim is between its decision and its lease: the lease is the decision’s, before the hold', async (ctx) => {
    const queue = await open(ctx, 'postgres');
    await queue.enqueueMany(
      held,
      Array.from({ length: 2 }, (_, n) => ({ input: { n }, key: `h-${n}` })),
    );
    const admin = await client();
    const blocker = await client();
    await blocker.query('BEGIN');
    await blocker.query('LOCK TABLE reckon.attempts IN SHARE MODE');
    const first = claimOnce(queue, held.flow!);
    await until('the claim waits to write its lease', () => waitingOn(admin, 'relation'));
    let holdDone = false;
    const hold = queue.store
      .flowBackoff({ operation: held.name, rateKey: '', delayMs: 60_000 })
      .then(() => (holdDone = true));
    // The hold either waits for the key the claim is judging, or (a hold the claims do not
    // order with) commits at once.
    await until(
      'the hold committed or waiting for the key',
      async () => holdDone || (await waitingOn(admin, 'advisory')),
    );
    const committedBy = holdDone ? await queue.store.clockNow() : undefined;
    await blocker.query('COMMIT');
    const [lease] = await first;
    await hold;
    const holdCommittedBy = committedBy ?? (await queue.store.clockNow());
    // The claim decided before the hold: its lease is stamped then, before the hold committed.
    expect(lease!.attempt.leasedAt).toBeLessThan(holdCommittedBy);
    // Every claim after the hold reads it: nothing starts for its minute.
    const r = await queue.store.attemptClaimLimited({
      ownerId: 'test',
      queues: ['default'],
      limits: [held.flow!],
      limit: 1,
      leaseMs: 60_000,
    });
    expect(r.claimed).toEqual([]);
    expect(await leaseTimes(queue, held.name)).toEqual([lease!.attempt.leasedAt]);
  });
});
