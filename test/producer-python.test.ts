/**
 * A producer in another language (issue #28): a Python 3 script using only its standard library
 * enqueues with a key and calls over the JSON API of a real `reckon serve`; it is SIGKILLed while
 * it waits; run again with the same key it gets the same job's outcome. The downstream counts
 * the requests it received per key: one.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue } from '../src/index.js';
import { charge } from './fixtures/http-ops.js';
import { holdingReceiver, startServe } from './helpers/serve.js';
import { tempSqliteStore } from './helpers/stores.js';
import { until } from './reliability/harness.js';

const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'src', 'cli', 'main.ts');
const PRODUCER = join(ROOT, 'test', 'fixtures', 'producer.py');
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function track(child: ChildProcess): ChildProcess {
  cleanup.push(() => child.kill('SIGKILL'));
  return child;
}

function reckonJson(args: string[]): unknown {
  const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, ...args, '--json'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`reckon ${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

function serve(storeUrl: string): Promise<string> {
  const args = ['--store', storeUrl, '--operations', 'test/fixtures/http-ops.ts'];
  return startServe(args, (undo) => void cleanup.push(undo)).url;
}

interface Line {
  step: 'enqueue' | 'call';
  status: number;
  body: Record<string, unknown>;
}

function producer(base: string, token: string, key: string, waitMs: number) {
  const child = track(
    spawn('python3', [PRODUCER, base, 'py.charge', key, '{"amount": 42}', String(waitMs)], {
      env: { ...process.env, RECKON_TOKEN: token },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  const lines: Line[] = [];
  let out = '';
  let err = '';
  const seen: ((l: Line) => void)[] = [];
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    const parts = out.split('\n');
    out = parts.pop()!;
    for (const p of parts) {
      const line = JSON.parse(p) as Line;
      lines.push(line);
      for (const f of seen) f(line);
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return {
    child,
    lines,
    exited,
    stderr: () => err,
    next: () => new Promise<Line>((r) => seen.push(r)),
  };
}

describe('a producer in Python, standard library only', () => {
  it('enqueues with a key, calls, is killed mid-wait, calls again: the same job, one effect', async () => {
    const store = tempSqliteStore();
    cleanup.push(() => store.drop());
    const down = await holdingReceiver(
      (undo) => void cleanup.push(undo),
      '/charge',
      (charged, key) => ({ charged, key }),
    );
    process.env.DOWNSTREAM_URL = down.url;
    const q = await openQueue({ store: store.url, operations: [charge] });
    cleanup.push(() => q.close());
    const { token } = reckonJson([
      'tokens',
      'create',
      'agent-py',
      '--role',
      'producer',
      '--store',
      store.url,
    ]) as { token: string };
    const base = await serve(store.url);
    const worker = q.worker({ operations: [charge], pollIntervalMs: 20 });
    await worker.start();

    const first = producer(base, token, 'order-7:charge', 60_000);
    const enqueued = await first.next();
    expect(enqueued.status, first.stderr()).toBe(201);
    const jobId = (enqueued.body.job as { id: string }).id;
    // The request reached the downstream, whose answer is held: the producer is mid-wait.
    await until('the downstream to receive the charge', () => down.perKey.size === 1, 60_000);
    first.child.kill('SIGKILL');
    await first.exited;
    expect(first.lines.map((l) => l.step)).toEqual(['enqueue']);

    down.release();
    const second = producer(base, token, 'order-7:charge', 60_000);
    expect(await second.exited, second.stderr()).toBe(0);
    const [again, call] = second.lines;
    expect(again).toMatchObject({ status: 200, body: { deduplicated: true, job: { id: jobId } } });
    expect(call).toMatchObject({
      step: 'call',
      status: 200,
      body: {
        state: 'SUCCEEDED',
        jobId,
        result: { charged: { amount: 42 }, key: 'order-7:charge' },
      },
    });
    expect([...down.perKey]).toEqual([['order-7:charge', 1]]);
    await worker.stop();
  }, 120_000);
});
