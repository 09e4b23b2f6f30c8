/**
 * The claim of an operation limited by concurrency alone (issue #30). On PostgreSQL it is one
 * statement: it locks its candidates' keys, then counts the keys' leases through `flow_leased`,
 * whose query takes a snapshot of its own after those locks. These tests hold the limit under
 * many claimers at once with a max above 1, show the count is fresh where the statement's own
 * snapshot is not, and that the statement and the transaction-shaped claim (rate limits) exclude
 * each other on a key.
 */
import pg from 'pg';
import type { TestContext } from 'vitest';
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue, type Queue } from '../src/index.js';
import { flowLockName } from '../src/store/postgres/flow.js';
import { FLOW_LOCK_NAMESPACE } from '../src/store/postgres/statements-flow.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type StoreKind,
  type TestStore,
} from './helpers/stores.js';
import { until } from './reliability/harness.js';

/** Jobs running now per account, and the most seen at once, as the handlers count them. */
const running = new Map<string, number>();
let most = new Map<string, number>();
let done = 0;

const twoPerAccount = defineOperation({
  name: 'conc.two',
  concurrency: { max: 2, key: (input: { account: string }) => input.account },
  execute: async (input: { account: string; ms: number }) => {
    const n = (running.get(input.account) ?? 0) + 1;
    running.set(input.account, n);
    most.set(input.account, Math.max(most.get(input.account) ?? 0, n));
    await new Promise((r) => setTimeout(r, input.ms));
    // Counted down before the outcome is written: a claim can take the key's slot only after
    // that write commits, so two at once here means two leases at once in the store.
    running.set(input.account, running.get(input.account)! - 1);
    done++;
    return input.ms;
  },
});
const onePerAccount = defineOperation({
  name: 'conc.one',
  concurrency: { max: 1, key: (input: { account: string }) => input.account },
  execute: (input: { account: string }) => Promise.resolve(input.account),
});

let store: TestStore | undefined;
let q: Queue | undefined;
const clients: pg.Client[] = [];
const stops: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
  for (const c of clients.splice(0)) await c.end().catch(() => undefined);
  await q?.close();
  await store?.drop();
  q = undefined;
  store = undefined;
  running.clear();
  most = new Map();
  done = 0;
});

async function open(ctx: TestContext, kind: StoreKind): Promise<Queue> {
  if (kind === 'postgres') {
    const why = await pgUnavailableReason();
    if (why) ctx.skip(why);
  }
  store = await makeTestStore(kind);
  q = await openQueue({ store: store.url, operations: [twoPerAccount, onePerAccount] });
  return q;
}

async function client(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: store!.url });
  await c.connect();
  clients.push(c);
  return c;
}

function claim(queue: Queue, limit: number, ownerId = 'test') {
  return queue.store.attemptClaimLimited({
    ownerId,
    queues: ['default'],
    limits: [onePerAccount.flow!],
    limit,
    leaseMs: 60_000,
  });
}

describe.each(STORE_KINDS)('the concurrency claim on %s', (kind) => {
  it('4 workers of 8 slots, 5 accounts, 2 at a time per account: never 3, and 2 are reached', async (ctx) => {
    const queue = await open(ctx, kind);
    const accounts = ['a', 'b', 'c', 'd', 'e'];
    await queue.enqueueMany(
      twoPerAccount,
      Array.from({ length: 150 }, (_, n) => ({
        input: { account: accounts[n % accounts.length]!, ms: 2 + (n % 7) * 3 },
        key: `two-${n}`,
      })),
    );
    for (let w = 0; w < 4; w++) {
      const worker = queue.worker({
        operations: [twoPerAccount],
        concurrency: 8,
        pollIntervalMs: 10,
      });
      worker.on('error', () => undefined);
      await worker.start();
      stops.push(() => worker.stop());
    }
    await until('all 150 ran', () => done >= 150, 60_000);
    expect(Math.max(...most.values())).toBe(2);
    for (const a of accounts) expect(most.get(a)).toBe(2);
  });

  it('a key with three due jobs and room for one: one leased, two told held', async (ctx) => {
    const queue = await open(ctx, kind);
    await queue.enqueueMany(
      onePerAccount,
      ['x', 'x', 'x', 'y'].map((account, n) => ({ input: { account }, key: `held-${n}` })),
    );
    const r = await claim(queue, 10);
    expect(r.claimed.map((c) => (c.job.input as { account: string }).account).sort()).toEqual([
      'x',
      'y',
    ]);
    expect(r.held).toEqual([{ operation: onePerAccount.name, rate: 0, concurrency: 2 }]);
    // Both keys are at their limit now: the next claim leaves them out before judging.
    expect((await claim(queue, 10)).claimed).toEqual([]);
  });
});

describe('the concurrency claim on postgres, under its locks', () => {
  it('flow_leased counts in a snapshot of its own: a lease committed after the statement began is seen', async (ctx) => {
    const queue = await open(ctx, 'postgres');
    const [job] = await queue.enqueueMany(onePerAccount, [{ input: { account: 'k' }, key: 'f-1' }]);
    const leaser = await client();
    const reader = await client();
    const admin = await client();
    // The leaser holds a lock the reader's statement waits for after taking its snapshot.
    await leaser.query('BEGIN');
    await leaser.query('SELECT pg_advisory_xact_lock(4242)');
    await leaser.query(`UPDATE reckon.jobs SET state = 'LEASED' WHERE id = $1`, [job!.id]);
    const read = reader.query<{ seen: string; fresh: string | null }>(
      `WITH seen AS MATERIALIZED (
         SELECT count(*) AS n FROM reckon.jobs WHERE state = 'LEASED' AND concurrency_key = 'k'),
       waited AS MATERIALIZED (SELECT pg_advisory_xact_lock(4242) FROM seen)
       SELECT (SELECT n FROM seen) AS seen,
         (SELECT b.n FROM reckon.flow_leased($1, ARRAY['k']) b, waited) AS fresh`,
      [onePerAccount.name],
    );
    await until('the reader waits for the lock', async () => {
      const r = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event = 'advisory'`,
      );
      return r.rows[0]!.n > 0;
    });
    await leaser.query('COMMIT');
    const { rows } = await read;
    expect(Number(rows[0]!.seen)).toBe(0);
    expect(Number(rows[0]!.fresh)).toBe(1);
  });

  it('a key whose lock a transaction-shaped claim holds is skipped, not waited for; then claimed', async (ctx) => {
    const queue = await open(ctx, 'postgres');
    await queue.enqueueMany(onePerAccount, [
      { input: { account: 'busy "key" \\ é\n' }, key: 'l-1' },
      { input: { account: 'free' }, key: 'l-2' },
    ]);
    const holder = await client();
    await holder.query('BEGIN');
    // The lock a claim of the other shape (flow.ts) takes for this key of this operation.
    await holder.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [
      FLOW_LOCK_NAMESPACE,
      flowLockName('reckon', 'c', onePerAccount.name, 'busy "key" \\ é\n'),
    ]);
    const first = await claim(queue, 10);
    expect(first.claimed.map((c) => (c.job.input as { account: string }).account)).toEqual([
      'free',
    ]);
    await holder.query('COMMIT');
    const second = await claim(queue, 10);
    expect(second.claimed.map((c) => (c.job.input as { account: string }).account)).toEqual([
      'busy "key" \\ é\n',
    ]);
  });
});
