/**
 * Cross-process wake-ups of the SQLite store (src/store/sqlite/notify.ts), with real processes.
 * Subscriptions here check `data_version` once an hour, so only the socket can wake them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue } from '../src/index.js';
import { SqliteStore } from '../src/store/sqlite/store.js';
import { wakeDirectory } from '../src/store/sqlite/notify.js';

const HOUR = 3_600_000;
const op = defineOperation({ name: 'wake.noop', execute: () => Promise.resolve(null) });

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function tempDb(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-wake-test-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'wake.db');
}

async function subscriber(path: string): Promise<{ woken: () => number }> {
  const store = new SqliteStore({ path, workCheckIntervalMs: HOUR });
  await store.init();
  let n = 0;
  const sub = await store.workSubscribe({ queues: ['default'], onWork: () => void n++ });
  cleanup.push(async () => {
    await sub.close();
    await store.close();
  });
  return { woken: () => n };
}

/** Starts a fixture under tsx and waits for its first line. */
async function child(fixture: string, env: Record<string, string>): Promise<ChildProcess> {
  const c = spawn(process.execPath, ['--import', 'tsx', `test/fixtures/${fixture}`], {
    env: { ...process.env, ...env, TSX_TSCONFIG_PATH: 'tsconfig.json' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  cleanup.push(() => {
    c.kill('SIGKILL');
  });
  await new Promise<void>((ready, fail) => {
    c.stdout.once('data', () => ready());
    c.once('exit', (code) => fail(new Error(`${fixture} exited (${code}) before it was ready`)));
  });
  return c;
}

async function until(check: () => boolean, ms = 5_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!check() && Date.now() < deadline) await sleep(5);
  return check();
}

describe('SQLite cross-process wake-ups', () => {
  it('a process that enqueues wakes a subscriber in another process through its socket', async () => {
    const path = tempDb();
    const sub = await subscriber(path);
    await child('enqueue-loop.ts', { STORE_URL: `sqlite:${path}` });
    expect(await until(() => sub.woken() > 0)).toBe(true);
  });

  it('wakes for due work only, and a subscription of another file never', async () => {
    const path = tempDb();
    const sub = await subscriber(path);
    const elsewhere = await subscriber(tempDb());
    const q = await openQueue({ store: `sqlite:${path}`, operations: [op] });
    cleanup.push(() => q.close());
    // Due work calls this process's subscribers and publishes to the other processes' sockets
    // in one step (the store's onNewWork): a local subscriber shows at once whether a write
    // published, where a wait for a byte that should not come would be a guess.
    let published = 0;
    const own = await q.store.workSubscribe!({
      queues: ['default'],
      onWork: () => void published++,
    });
    cleanup.push(() => own.close());
    await q.store.statsGet();
    expect(published).toBe(0);
    expect(sub.woken()).toBe(0);
    await q.enqueue(op, { n: 1 }, { key: 'due' });
    expect(published).toBeGreaterThan(0);
    expect(await until(() => sub.woken() > 0)).toBe(true);
    expect(elsewhere.woken()).toBe(0);
  });

  it('removes the socket a killed subscriber left, and a closed one removes its own', async () => {
    const path = tempDb();
    const dir = wakeDirectory(path)!;
    const killed = await child('subscribe.ts', { STORE_PATH: path });
    const [left] = readdirSync(dir);
    expect(left).toMatch(new RegExp(`^${killed.pid}-.*\\.sock$`));
    killed.kill('SIGKILL');
    await new Promise((exited) => killed.once('exit', exited));
    expect(existsSync(join(dir, left!))).toBe(true);

    const q = await openQueue({ store: `sqlite:${path}`, operations: [op] });
    await q.enqueue(op, { n: 1 }, { key: 'after-kill' });
    expect(await until(() => !existsSync(join(dir, left!)))).toBe(true);
    await q.close();

    const store = new SqliteStore({ path, workCheckIntervalMs: HOUR });
    await store.init();
    const sub = await store.workSubscribe({ queues: ['default'], onWork: () => undefined });
    expect(readdirSync(dir)).toHaveLength(1);
    await sub.close();
    await store.close();
    // The last subscriber out removes the directory too: none pile up in the temp directory.
    expect(existsSync(dir)).toBe(false);
  });
});
