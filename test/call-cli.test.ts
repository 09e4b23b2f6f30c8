/**
 * `reckon call` as a real process on a SQLite store, a worker in the test process: the exit code
 * says how the wait ended (0 SUCCEEDED, 3 FAILED, 4 CANCELLED, 5 no outcome yet).
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue, type Queue } from '../src/index.js';
import { echo, refused, uncertain, unserved } from './fixtures/call-cli-ops.js';
import { tempSqliteStore, type TestStore } from './helpers/stores.js';

const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'src', 'cli', 'main.ts');
const OPS = 'test/fixtures/call-cli-ops.ts';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function reckon(store: TestStore, args: string[]): Promise<Run> {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, RECKON_STORE: store.url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  cleanup.push(() => child.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((res, rej) => {
    child.once('error', rej);
    child.once('close', (code) => res({ code, stdout, stderr }));
  });
}

async function setUp(): Promise<{ store: TestStore; q: Queue }> {
  const store = tempSqliteStore();
  cleanup.push(() => store.drop());
  const q = await openQueue({ store: store.url, operations: [echo, refused, uncertain, unserved] });
  cleanup.push(() => q.close());
  const w = q.worker({ operations: [echo, refused, uncertain], pollIntervalMs: 50 });
  await w.start();
  cleanup.push(() => w.stop());
  return { store, q };
}

describe('reckon call', () => {
  it('exit 0 with the result, the same job again by key or --job; exit 3 for FAILED', async () => {
    const { store } = await setUp();
    const args = ['call', 'cli.echo', '{"to":"a@b.c"}', '--operations', OPS, '--key', 'k1'];
    const first = await reckon(store, [...args, '--json']);
    expect(first.code, first.stderr).toBe(0);
    const out = JSON.parse(first.stdout) as { state: string; jobId: string; result: unknown };
    expect(out).toMatchObject({ state: 'SUCCEEDED', result: { echoed: { to: 'a@b.c' } } });
    const again = await reckon(store, args);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({ echoed: { to: 'a@b.c' } });
    expect(again.stderr).toContain(`SUCCEEDED: job ${out.jobId}`);
    const byId = await reckon(store, ['call', '--job', out.jobId, '--wait', '5s', '--json']);
    expect(JSON.parse(byId.stdout)).toEqual(out);

    const failed = await reckon(store, ['call', 'cli.refused', '{}', '--operations', OPS]);
    expect(failed.code).toBe(3);
    expect(failed.stderr).toMatch(/^FAILED: job .*card declined/);
  }, 60_000);

  it('exit 4 for CANCELLED, exit 5 for no outcome yet, JobNotFound exit 1', async () => {
    const { store, q } = await setUp();
    const job = await q.enqueue(unserved, { n: 1 });
    const waiting = reckon(store, ['call', '--job', job.id, '--wait', '30s']);
    // Cancelled while it waits, or before it starts: CANCELLED either way.
    await q.cancel(job.id, { reason: 'no longer needed' });
    const cancelled = await waiting;
    expect(cancelled.code).toBe(4);
    expect(cancelled.stderr).toContain('CANCELLED');

    const queued = await reckon(store, [
      'call',
      'cli.unserved',
      '{}',
      '--operations',
      OPS,
      '--wait',
      '200ms',
      '--json',
    ]);
    expect(queued.code).toBe(5);
    const e = (JSON.parse(queued.stdout) as { error: { code: string; details: { state: string } } })
      .error;
    expect(e.code).toBe('OUTCOME_PENDING');
    expect(e.details.state).toBe('QUEUED');

    const review = await reckon(store, [
      'call',
      'cli.uncertain',
      '{}',
      '--operations',
      OPS,
      '--wait',
      '2s',
    ]);
    expect(review.code).toBe(5);
    expect(review.stderr).toMatch(/NEEDS_REVIEW.*Do not retry.*\[OUTCOME_PENDING\]/s);

    const missing = await reckon(store, ['call', '--job', 'nope', '--wait', '1s']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('[JOB_NOT_FOUND]');
    const usage = await reckon(store, ['call', '--wait', 'soon']);
    expect(usage.code).toBe(64);
  }, 60_000);
});
