/**
 * Notifications (issue #28): `reckon serve --notify-url` tells a person when a job awaits
 * approval or needs review, delivered as a reckon job. A real `reckon serve` is SIGKILLed while a
 * delivery is in flight (the receiver holds its answer); after a restart every notification is
 * delivered once, or flagged for review when the killed one may have left: never twice, never
 * lost. The receiver counts requests per key.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue } from '../src/index.js';
import { NOTIFY_OPERATION } from '../src/server/notify.js';
import { holdingReceiver, startServe } from './helpers/serve.js';
import { tempSqliteStore } from './helpers/stores.js';
import { until } from './reliability/harness.js';

const cleanup: (() => unknown)[] = [];
const push = (undo: () => unknown) => void cleanup.push(undo);
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const refund = defineOperation({
  name: 'payments.refund',
  approval: (input: unknown) => `refund of ${(input as { amount: number }).amount}`,
  execute: (input: unknown, ctx) => ctx.dispatch(() => Promise.resolve(input)),
});

/** `reckon serve` delivering notifications to `hook`. */
function serve(storeUrl: string, hook: string) {
  const args = ['--store', storeUrl, '--public-url', 'https://ops.example'];
  args.push('--base-path', '/reckon', '--notify-lease-ms', '1500');
  return startServe(args, push, { RECKON_NOTIFY_URL: hook }).child;
}

describe('notifications of waiting jobs', () => {
  it('each delivered once across a server SIGKILLed mid-delivery, or flagged; none lost', async () => {
    const store = tempSqliteStore();
    cleanup.push(() => store.drop());
    const q = await openQueue({ store: store.url, operations: [refund] });
    cleanup.push(() => q.close());
    const jobs: { id: string }[] = [];
    for (let i = 1; i <= 3; i++) jobs.push(await q.enqueue(refund, { amount: i * 10 }));
    const hook = await holdingReceiver(push, '/hook', () => ({ ok: true }));
    const url = hook.url;

    const first = serve(store.url, url);
    await hook.firstRequest;
    first.kill('SIGKILL');
    await new Promise((r) => first.once('exit', r));
    const sentBeforeKill = new Map(hook.perKey);
    expect(sentBeforeKill.size).toBeGreaterThanOrEqual(1);

    hook.release();
    serve(store.url, url);
    // A job that starts waiting after the restart is found by the next scan.
    const late = await q.enqueue(refund, { amount: 99 });
    jobs.push(late);
    const keyOf = (id: string) => `${NOTIFY_OPERATION}:${id}:AWAITING_APPROVAL:0`;
    const notifyJob = async (id: string) =>
      (await q.jobs({ queue: NOTIFY_OPERATION, limit: 100 })).find(
        (j) => j.requestKey === keyOf(id),
      );
    await until(
      'every notification delivered or flagged',
      async () => {
        for (const j of jobs) {
          const n = await notifyJob(j.id);
          if (!n || (n.state !== 'SUCCEEDED' && n.state !== 'NEEDS_REVIEW')) return false;
        }
        return true;
      },
      90_000,
    );

    for (const j of jobs) {
      const n = (await notifyJob(j.id))!;
      const received = hook.perKey.get(keyOf(j.id)) ?? 0;
      // Never twice; delivered, or (when the killed server may have sent it) flagged for review.
      expect(received, j.id).toBeLessThanOrEqual(1);
      if (n.state === 'SUCCEEDED') expect(received, j.id).toBe(1);
      if (sentBeforeKill.has(keyOf(j.id))) expect(n.state, j.id).toBe('NEEDS_REVIEW');
    }
    expect(hook.perKey.get(keyOf(late.id))).toBe(1);
    // Only the waiting jobs were notified about: never a notification job in review.
    expect([...hook.perKey.keys()].sort()).toEqual(
      jobs
        .map((j) => keyOf(j.id))
        .filter((k) => hook.perKey.has(k))
        .sort(),
    );
    const body = hook.bodies.find((b) => b.jobId === late.id)!;
    expect(body).toEqual({
      jobId: late.id,
      event: 'awaiting_approval',
      operation: 'payments.refund',
      queue: 'default',
      reason: 'refund of 99',
      url: `https://ops.example/reckon/jobs/${late.id}`,
    });
  }, 150_000);
});
