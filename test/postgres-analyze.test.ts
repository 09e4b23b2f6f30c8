/**
 * Issue #28: a PostgreSQL journal filled faster than autovacuum analyzes it has no planner
 * statistics, and a list by operation was planned as a read and sort of all its jobs. Opening
 * the store analyzes the jobs table once when it has rows and no statistics.
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue } from '../src/index.js';
import { pgUnavailableReason, tempPgStore, type TestStore } from './helpers/stores.js';

const pgReason = await pgUnavailableReason();

const op = defineOperation({
  name: 'analyze.op',
  execute: (input: unknown, ctx) => ctx.dispatch(() => Promise.resolve(input)),
});

let store: TestStore | undefined;
afterEach(async () => {
  await store?.drop();
  store = undefined;
});

async function sql(url: string, text: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(text);
  } finally {
    await c.end();
  }
}

/** Columns of `jobs` with planner statistics, and when the table was last analyzed by hand. */
async function statistics(url: string): Promise<{ columns: number; analyzedAt: Date | null }> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const cols = await c.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stats WHERE schemaname = 'reckon' AND tablename = 'jobs'`,
    );
    const t = await c.query<{ at: Date | null }>(
      `SELECT last_analyze AS at FROM pg_stat_user_tables WHERE schemaname = 'reckon' AND relname = 'jobs'`,
    );
    return { columns: cols.rows[0]!.n, analyzedAt: t.rows[0]?.at ?? null };
  } finally {
    await c.end();
  }
}

describe.skipIf(pgReason !== null)('PostgreSQL planner statistics on open', () => {
  it('a journal with rows and no statistics is analyzed when a store opens it, once', async () => {
    store = await tempPgStore();
    const url = store.url;
    const q = await openQueue({ store: url, operations: [op] });
    try {
      // An empty journal is not analyzed (nothing to learn); 10,000 jobs at once, as a bulk
      // enqueue makes them, leave the table without statistics until something analyzes it.
      expect((await statistics(url)).columns).toBe(0);
      // As before autovacuum's first pass: it stays out of this table for the test.
      await sql(url, 'ALTER TABLE reckon.jobs SET (autovacuum_enabled = false)');
      for (let n = 0; n < 10_000; n += 2_500)
        await q.enqueueMany(
          op,
          Array.from({ length: 2_500 }, (_, i) => ({ input: { n: n + i } })),
        );
    } finally {
      await q.close();
    }
    expect(await statistics(url)).toEqual({ columns: 0, analyzedAt: null });

    const again = await openQueue({ store: url, operations: [op] });
    await again.close();
    const first = await statistics(url);
    expect(first.columns).toBeGreaterThan(0);
    expect(first.analyzedAt).not.toBeNull();

    // The statistics exist now: a later open does not analyze again.
    const third = await openQueue({ store: url, operations: [op] });
    await third.close();
    expect((await statistics(url)).analyzedAt).toEqual(first.analyzedAt);
  }, 120_000);
});
