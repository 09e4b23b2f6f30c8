/**
 * Notifications (issue #28): `reckon serve --notify-url` tells a person when a job awaits
 * approval or needs review, delivered as a reckon job. A real `reckon serve` is SIGKILLed while a
 * delivery is in flight (the receiver holds its answer); after a restart every notification is
 * delivered once, or flagged for review when the killed one may have left: never twice, never
 * lost. The receiver counts requests per key.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue } from '../src/index.js';
import { NOTIFY_OPERATION } from '../src/server/notify.js';
import { tempSqliteStore } from './helpers/stores.js';

const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'src', 'cli', 'main.ts');
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const refund = defineOperation({
  name: 'payments.refund',
  approval: (input: unknown) => `refund of ${(input as { amount: number }).amount}`,
  execute: (input: unknown, ctx) => ctx.dispatch(() => Promise.resolve(input)),
});

function receiver() {
  const perKey = new Map<string, number>();
  const bodies: Record<string, unknown>[] = [];
  let holding = true;
  const held: ServerResponse[] = [];
  let onRequest = () => {};
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const key = String(req.headers['idempotency-key']);
    perKey.set(key, (perKey.get(key) ?? 0) + 1);
    let text = '';
    req.setEncoding('utf8').on('data', (d: string) => (text += d));
    req.on('end', () => {
      bodies.push(JSON.parse(text) as Record<string, unknown>);
      if (holding) held.push(res);
      else res.writeHead(200).end('ok');
      onRequest();
    });
  });
  cleanup.push(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(r));
  });
  return {
    perKey,
    bodies,
    release: () => (holding = false),
    firstRequest: new Promise<void>((r) => (onRequest = r)),
    listen: () =>
      new Promise<string>((r) =>
        server.listen(0, '127.0.0.1', () =>
          r(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`),
        ),
      ),
  };
}

function serve(storeUrl: string, hook: string): ChildProcess {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      MAIN,
      'serve',
      '--store',
      storeUrl,
      '--port',
      '0',
      '--public-url',
      'https://ops.example',
      '--base-path',
      '/reckon',
      '--notify-lease-ms',
      '1500',
    ],
    {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, RECKON_NOTIFY_URL: hook },
    },
  );
  cleanup.push(() => child.kill('SIGKILL'));
  return child;
}

async function until(what: string, ok: () => Promise<boolean> | boolean, ms = 90_000) {
  for (const deadline = Date.now() + ms; !(await ok());) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('notifications of waiting jobs', () => {
  it('each delivered once across a server SIGKILLed mid-delivery, or flagged; none lost', async () => {
    const store = tempSqliteStore();
    cleanup.push(() => store.drop());
    const q = await openQueue({ store: store.url, operations: [refund] });
    cleanup.push(() => q.close());
    const jobs: { id: string }[] = [];
    for (let i = 1; i <= 3; i++) jobs.push(await q.enqueue(refund, { amount: i * 10 }));
    const hook = receiver();
    const url = await hook.listen();

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
    await until('every notification delivered or flagged', async () => {
      for (const j of jobs) {
        const n = await notifyJob(j.id);
        if (!n || (n.state !== 'SUCCEEDED' && n.state !== 'NEEDS_REVIEW')) return false;
      }
      return true;
    });

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
