/**
 * What only the SQLite store does: refusing a file it cannot make durable (WAL), a full disk as
 * a typed error that heals when space returns, and a batch re-run that never blocks the event
 * loop on another process's write lock.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import {
  RequestKeyConflict,
  StoreFull,
  StoreNotDurable,
  defineOperation,
  openQueue,
} from '../src/index.js';
import { SqliteStore } from '../src/store/sqlite/store.js';
import { newJobInsert } from './helpers/jobs.js';

const cleanups: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-sqlite-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const job = newJobInsert;

async function until(what: string, fn: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

describe('SQLite durability checks', () => {
  it('refuses a database that will not take WAL, saying why and what to do', async () => {
    // '' is SQLite's temporary on-disk database: it accepts `journal_mode = WAL` and stays in
    // `delete` mode, as a file on a file system without shared memory would.
    const store = new SqliteStore({ path: '' });
    const err = await store.init().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreNotDurable);
    expect(err).toMatchObject({ code: 'STORE_NOT_DURABLE' });
    expect((err as Error).message).toMatch(/journal_mode=delete.*local disk/s);
    await store.close();
  });

  it('a file store is in WAL mode once open', async () => {
    const path = join(tempDir(), 'reckon.db');
    const store = new SqliteStore({ path });
    await store.init();
    cleanups.push(() => store.close());
    const db = new Database(path, { readonly: true });
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
  });
});

describe('SQLite batch re-run (a caller of a shared commit threw)', () => {
  it('waits for another connection’s write lock without blocking timers, then answers each caller', async () => {
    const path = join(tempDir(), 'reckon.db');
    const store = new SqliteStore({ path });
    await store.init();
    cleanups.push(() => store.close());
    await store.jobInsertMany({ jobs: [job('k1')], actor: 't' });
    const other = new Database(path);
    cleanups.push(() => void other.close());

    // Two callers in one commit; the second conflicts, so the batch runs again, each caller in
    // its own savepoint. Between the two runs, another connection takes the write lock.
    const settled: string[] = [];
    const good = store.jobInsertMany({ jobs: [job('k2')], actor: 't' });
    const bad = store.jobInsertMany({ jobs: [job('k1', { fingerprint: 'other' })], actor: 't' });
    void good.then(() => settled.push('good'));
    bad.catch(() => settled.push('bad'));
    let locked = false;
    setImmediate(() => {
      other.exec('BEGIN IMMEDIATE');
      locked = true;
    });
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    cleanups.push(() => clearInterval(timer));
    await until('the other connection holds the lock', () => locked);
    // The event loop runs on (heartbeats would) while the lock is held elsewhere.
    await until('timers to tick while the lock is held', () => ticks >= 10);
    expect(settled).toEqual([]);
    other.exec('COMMIT');
    const [created] = await good;
    expect(created?.created).toBe(true);
    await expect(bad).rejects.toBeInstanceOf(RequestKeyConflict);
  });
});

/** A tmpfs of `size` at a new directory, unmounted at cleanup; null (with why) if mount fails. */
function smallDisk(size: string): { dir: string } | { skip: string } {
  const dir = tempDir();
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (err) {
    return { skip: `cannot mount a tmpfs here: ${(err as Error).message.split('\n')[0]}` };
  }
  cleanups.push(() => {
    execFileSync('umount', ['-l', dir]);
  });
  return { dir };
}

describe('a full disk', () => {
  it('is a typed StoreFull at enqueue; nothing acknowledged is lost and writes resume when space returns', async (ctx) => {
    const disk = smallDisk('4m');
    if ('skip' in disk) {
      // Never skipped in CI: there the mount must work.
      if (process.env.CI === 'true') throw new Error(disk.skip);
      ctx.skip(disk.skip);
      return;
    }
    const filler = join(disk.dir, 'filler');
    writeFileSync(filler, Buffer.alloc(3 * 1024 * 1024));
    const op = defineOperation({
      name: 'blob.store',
      execute: (input: { blob: string }, ctx) =>
        ctx.dispatch(() => Promise.resolve(input.blob.length)),
    });
    const q = await openQueue({ store: `sqlite:${join(disk.dir, 'reckon.db')}`, operations: [op] });
    cleanups.push(() => q.close());
    const acknowledged: string[] = [];
    let full: unknown;
    for (let i = 0; i < 500 && full === undefined; i++) {
      try {
        const j = await q.enqueue(op, { blob: `${i}`.padEnd(20_000, 'x') }, { key: `b${i}` });
        acknowledged.push(j.id);
      } catch (err) {
        full = err;
      }
    }
    expect(full).toBeInstanceOf(StoreFull);
    expect(full).toMatchObject({ code: 'STORE_FULL' });
    expect((full as Error).message).toMatch(/out of disk space.*Free space/s);
    expect(acknowledged.length).toBeGreaterThan(0);
    for (const id of acknowledged) expect((await q.job(id))?.job.state).toBe('QUEUED');

    rmSync(filler);
    const after = await q.enqueue(op, { blob: 'small' }, { key: 'after' });
    acknowledged.push(after.id);
    const w = q.worker({ operations: [op], pollIntervalMs: 20 });
    await w.start();
    cleanups.push(() => w.stop());
    let doneCount = 0;
    const deadline = Date.now() + 20_000;
    for (;;) {
      const states = await Promise.all(
        acknowledged.map(async (id) => (await q.job(id))?.job.state),
      );
      doneCount = states.filter((s) => s === 'SUCCEEDED').length;
      if (doneCount === acknowledged.length || Date.now() > deadline) break;
      await sleep(25);
    }
    expect(doneCount).toBe(acknowledged.length);
  }, 40_000);
});
