/**
 * `reckon work` as an always-on service: /healthz and /readyz on its metrics port, and a graceful
 * stop on SIGTERM (what systemd sends) with a job in flight: the job finishes under its lease,
 * the process exits 0, and the downstream saw the request once.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { defineOperation, openQueue } from '../src/index.js';
import { tempSqliteStore, type TestStore } from './helpers/stores.js';

const CLI = 'dist/cli/main.js';
/** Long enough that SIGTERM surely lands while the request is in flight. */
const ANSWER_AFTER_MS = 3_000;

/** The enqueuing side of test/fixtures/service-ops.js (the worker child runs that one). */
const slowPost = defineOperation({
  name: 'service.slow-post',
  timeoutMs: 30_000,
  execute: () => Promise.reject(new Error('runs in the worker child only')),
});

let store: TestStore;
let downstream: Server;
let received: Map<string, number>;
let url: string;

beforeEach(async () => {
  store = tempSqliteStore();
  received = new Map();
  downstream = createServer((req, res) => {
    const key = String(req.headers['x-request-key']);
    received.set(key, (received.get(key) ?? 0) + 1);
    setTimeout(() => res.end(JSON.stringify({ ok: true, key })), ANSWER_AFTER_MS);
  });
  await new Promise<void>((r) => downstream.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(downstream.address() as AddressInfo).port}`;
});

afterEach(async () => {
  downstream.closeAllConnections();
  await new Promise((r) => downstream.close(r));
  await store.drop();
});

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function status(u: string): Promise<{ code: number; body: unknown }> {
  try {
    const r = await fetch(u);
    const body: unknown = await r.json().catch(() => null);
    return { code: r.status, body };
  } catch {
    return { code: 0, body: null };
  }
}

it('serves /healthz and /readyz, and on SIGTERM finishes the job in flight and exits 0', async () => {
  const q = await openQueue({ store: store.url, operations: [slowPost] });
  const child = spawn(
    process.execPath,
    [CLI, 'work', '--operations', 'test/fixtures/service-ops.js', '--store', store.url].concat([
      '--metrics-port',
      '0',
      '--lease-ms',
      '1000',
      '--log-level',
      'warn',
      '--json',
    ]),
    { env: { ...process.env, DOWNSTREAM_URL: url }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  try {
    const base = await until('the metrics address', () =>
      Promise.resolve(/metrics at (http:\/\/\S+)\/metrics/.exec(stderr)?.[1]),
    );
    expect((await status(`${base}/healthz`)).code).toBe(200);
    const ready = await until('ready', async () => {
      const s = await status(`${base}/readyz`);
      return s.code === 200 ? s : undefined;
    });
    expect(ready.body).toEqual({ ready: true, phase: 'ready' });

    const job = await q.enqueue(slowPost, {}, { key: 'in-flight' });
    await until('the request at the downstream', () =>
      Promise.resolve(received.get('in-flight') ? true : undefined),
    );
    child.kill('SIGTERM');
    // Draining: alive, but no longer taking jobs.
    const draining = await until('not ready', async () => {
      const s = await status(`${base}/readyz`);
      return s.code === 503 ? s : undefined;
    });
    expect(draining.body).toEqual({ ready: false, phase: 'stopping' });
    expect((await status(`${base}/healthz`)).code).toBe(200);

    const [code, signal] = await exited;
    expect({ code, signal }, stderr).toEqual({ code: 0, signal: null });
    expect(JSON.parse(stdout)).toMatchObject({ stoppedBy: 'SIGTERM', succeeded: 1, unknown: 0 });
    const detail = (await q.job(job.id))!;
    expect(detail.job.state).toBe('SUCCEEDED');
    expect(detail.attempts).toHaveLength(1);
    expect(received.get('in-flight')).toBe(1);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await q.close();
  }
}, 60_000);
