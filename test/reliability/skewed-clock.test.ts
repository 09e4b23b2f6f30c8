/**
 * Invariant 2 on PostgreSQL's clock: at most one live lease per job, judged by the database,
 * whatever the workers' own clocks say. Two fleets share the store, one whose clock runs an hour
 * ahead (to it, every lease has long expired) and one an hour behind; each runs the reclaimer.
 * Every job runs once, never two attempts at a time, and no lease is reclaimed.
 */
import { describe, expect, it } from 'vitest';
import { systemClock, type Clock } from '../../src/core/clock.js';
import { defineOperation, openQueue, type Queue } from '../../src/index.js';
import { pgUnavailableReason, tempPgStore } from '../helpers/stores.js';
import { until } from './harness.js';

const pgReason = await pgUnavailableReason();
const HOUR_MS = 3_600_000;

function skewed(offsetMs: number): Clock {
  return { ...systemClock, now: () => Date.now() + offsetMs };
}

describe.skipIf(pgReason !== null)('workers with skewed clocks on PostgreSQL', () => {
  it('never hold a second live lease: the database judges leases', async (ctx) => {
    const store = await tempPgStore();
    ctx.onTestFinished(() => store.drop());
    const running = new Map<string, number>();
    const sends = new Map<string, number>();
    let overlap = 0;
    const op = defineOperation<{ n: number }, { n: number }>({
      name: 'test.skewed',
      timeoutMs: 10_000,
      execute: (input, c) =>
        c.dispatch(async () => {
          const now = (running.get(c.requestKey) ?? 0) + 1;
          running.set(c.requestKey, now);
          if (now > 1) overlap++;
          sends.set(c.requestKey, (sends.get(c.requestKey) ?? 0) + 1);
          await new Promise((r) => setTimeout(r, 300));
          running.set(c.requestKey, running.get(c.requestKey)! - 1);
          return input;
        }),
    });
    const queues: Queue[] = [];
    for (const offset of [HOUR_MS, -HOUR_MS]) {
      const q = await openQueue({ store: store.url, operations: [op], clock: skewed(offset) });
      ctx.onTestFinished(() => q.close());
      queues.push(q);
      const w = q.worker({
        operations: [op],
        concurrency: 4,
        leaseMs: 3_000,
        clockSkewToleranceMs: 100,
        reclaimIntervalMs: 50,
        pollIntervalMs: 20,
      });
      await w.start();
      ctx.onTestFinished(() => w.stop());
    }
    const jobs = await queues[0]!.enqueueMany(
      op,
      Array.from({ length: 24 }, (_, n) => ({ input: { n }, key: `skew-${n}` })),
    );
    await until(
      'every job to succeed',
      async () => {
        const all = await queues[1]!.jobs({ limit: 100 });
        return all.length === 24 && all.every((j) => j.state === 'SUCCEEDED');
      },
      60_000,
    );
    expect(overlap).toBe(0);
    expect([...sends.values()]).toEqual(Array.from({ length: 24 }, () => 1));
    for (const job of jobs) {
      const d = (await queues[0]!.job(job.id))!;
      expect(d.attempts.map((a) => a.state)).toEqual(['SUCCEEDED']);
      expect(d.events.map((e) => e.kind)).not.toContain('attempt-unknown');
    }
  }, 90_000);
});
