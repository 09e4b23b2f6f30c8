/**
 * Issue #28: a PostgreSQL journal filled faster than autovacuum analyzes it has no planner
 * statistics, and a search by operation was planned as a read and sort of all its jobs. Opening
 * the store analyzes the jobs table once when it has rows and no statistics. With statistics,
 * one operation's jobs are still read along their index, not by a walk of the primary key.
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
const newer = defineOperation({
  name: 'analyze.newer',
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

/** Entries read through each index of `jobs` (flushed stats), and the backends still open. */
async function indexReads(url: string): Promise<{ reads: Record<string, number>; others: number }> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query<{ name: string; n: string }>(
      `SELECT indexrelname AS name, idx_tup_read AS n FROM pg_stat_user_indexes
       WHERE schemaname = 'reckon' AND relname = 'jobs'`,
    );
    const others = await c.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    return {
      reads: Object.fromEntries(r.rows.map((x) => [x.name, Number(x.n)])),
      others: others.rows[0]!.n,
    };
  } finally {
    await c.end();
  }
}

/** The counters once every other backend has gone (a backend flushes its counts as it exits). */
async function settledReads(url: string, until: (r: Record<string, number>) => boolean) {
  for (;;) {
    const r = await indexReads(url);
    if (r.others === 0 && until(r.reads)) return r.reads;
  }
}

describe.skipIf(pgReason !== null)('PostgreSQL reads of one operation with statistics', () => {
  it('a list and a search by operation read its index, not the newer jobs above it', async () => {
    store = await tempPgStore();
    const url = store.url;
    const q = await openQueue({ store: url, operations: [op, newer] });
    try {
      // 20,000 jobs of the operation, then 20,000 newer ones of another: analyzed, the planner
      // expects half the jobs to match anywhere, and walking the primary key backwards would
      // read the 20,000 newer ones first.
      for (const o of [op, newer])
        for (let n = 0; n < 20_000; n += 5_000)
          await q.enqueueMany(
            o,
            Array.from({ length: 5_000 }, (_, i) => ({ input: { n: n + i } })),
          );
    } finally {
      await q.close();
    }
    await sql(url, 'ANALYZE reckon.jobs');
    const before = await settledReads(url, () => true);

    const reader = await openQueue({ store: url });
    try {
      const list = await reader.jobs({ operation: op.name, limit: 50 });
      expect(list.map((j) => j.operation)).toEqual(Array(50).fill(op.name));
      const page = await reader.search({ operation: op.name, limit: 50 });
      expect(page.jobs.map((j) => j.id)).toEqual(list.map((j) => j.id));
      expect(page.scanStopped).toBe(false);
    } finally {
      await reader.close();
    }
    const total = (r: Record<string, number>) => Object.values(r).reduce((a, n) => a + n, 0);
    const after = await settledReads(url, (r) => total(r) > total(before));
    // The window (20,000 of the operation) and the pages come from jobs_operation; the primary
    // key is read for a handful of entries at most, never the 20,000 newer jobs.
    expect((after['jobs_pkey'] ?? 0) - (before['jobs_pkey'] ?? 0)).toBeLessThan(1_000);
  }, 180_000);
});
