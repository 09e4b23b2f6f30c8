/**
 * Bad input at the boundary (invariant 10, issue #21 item 6): a fingerprint function that
 * throws, input nested past the depth limit, an unbounded stdin or input file for `reckon
 * enqueue`, and a body that is not an object for `reckon serve`. Each is a typed error, and
 * nothing is written.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInput, defineOperation, openQueue } from '../src/index.js';
import { JSON_DEPTH_MAX, canonicalJson } from '../src/core/json.js';
import { LIMITS } from '../src/runtime/settings.js';
import { tempSqliteStore, type TestStore } from './helpers/stores.js';

const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'src', 'cli', 'main.ts');
const children = new Set<ChildProcess>();
const stores: TestStore[] = [];

afterEach(async () => {
  for (const c of children) c.kill('SIGKILL');
  children.clear();
  for (const s of stores.splice(0)) await s.drop();
});

function store(): TestStore {
  const s = tempSqliteStore();
  stores.push(s);
  return s;
}

function nested(depth: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = { a: [v] };
  return v;
}

function reckon(
  args: string[],
  feed?: (child: ChildProcess) => void,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  child.stdin.on('error', () => undefined);
  if (feed) feed(child);
  else child.stdin.end();
  return new Promise((res) => child.once('close', (code) => res({ code, stdout, stderr })));
}

describe('enqueue refuses bad input with a typed error and writes nothing', () => {
  it('a fingerprint function that throws: InvalidInput naming the operation (enqueue and enqueueMany)', async (ctx) => {
    const q = await openQueue({ store: store().url });
    ctx.onTestFinished(() => q.close());
    const op = defineOperation({
      name: 'test.bad-fingerprint',
      fingerprint: (input: { customer?: { id: string } }) => input.customer!.id,
      execute: (_i: { customer?: { id: string } }, c) => c.dispatch(() => Promise.resolve(null)),
    });
    const one = q.enqueue(op, {});
    await expect(one).rejects.toBeInstanceOf(InvalidInput);
    await expect(one).rejects.toThrow(/test\.bad-fingerprint.*fingerprint/);
    const many = q.enqueueMany(op, [{ input: { customer: { id: 'c1' } } }, { input: {} }]);
    await expect(many).rejects.toBeInstanceOf(InvalidInput);
    await expect(many).rejects.toThrow(/jobs\[1\].*test\.bad-fingerprint/);
    expect(await q.jobs()).toHaveLength(0);
  });

  it(`input nested 5,000 levels deep: InvalidInput naming the depth limit (${JSON_DEPTH_MAX}), never a RangeError`, async (ctx) => {
    const q = await openQueue({ store: store().url });
    ctx.onTestFinished(() => q.close());
    const op = defineOperation({
      name: 'test.deep',
      execute: (_i: unknown, c) => c.dispatch(() => Promise.resolve(null)),
    });
    const deep = nested(5_000);
    const err = await q.enqueue(op, deep).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInput);
    expect((err as Error).message).toMatch(new RegExp(`nested deeper than ${JSON_DEPTH_MAX}`));
    const withFingerprint = defineOperation({
      name: 'test.deep-fingerprint',
      fingerprint: () => deep,
      execute: (_i: unknown, c) => c.dispatch(() => Promise.resolve(null)),
    });
    await expect(q.enqueue(withFingerprint, {})).rejects.toBeInstanceOf(InvalidInput);
    expect(() => canonicalJson(deep)).toThrow(InvalidInput);
    // Just past the limit it is refused; at the limit it is accepted.
    await expect(q.enqueue(op, nested(JSON_DEPTH_MAX / 2 + 1))).rejects.toThrow(/nested deeper/);
    await q.enqueue(op, nested(JSON_DEPTH_MAX / 2));
    expect(await q.jobs()).toHaveLength(1);
  });
});

describe('reckon enqueue reads at most the payload limit', () => {
  const OPS = 'test/fixtures/cli-ops.ts';
  it('an endless --input-file is refused after limit + 1 bytes, with the usage exit code', async () => {
    const s = store();
    await openQueue({ store: s.url }).then((q) => q.close());
    const run = await reckon([
      'enqueue',
      'test.echo',
      '--operations',
      OPS,
      '--store',
      s.url,
      '--input-file',
      '/dev/zero',
    ]);
    expect(run.code, run.stderr).toBe(64);
    expect(run.stderr).toContain(`over ${LIMITS.payloadBytesMax} bytes`);
    expect(run.stderr).toContain('[INPUT_TOO_LARGE]');
  });

  it('stdin that does not end is refused once it passes the limit', async () => {
    const s = store();
    await openQueue({ store: s.url }).then((q) => q.close());
    const run = await reckon(
      ['enqueue', 'test.echo', '-', '--operations', OPS, '--store', s.url],
      (child) => {
        // More than the limit, and never closed: only a bounded read can answer.
        child.stdin!.write(`{"pad":"${'x'.repeat(LIMITS.payloadBytesMax + 10)}`);
      },
    );
    expect(run.code, run.stderr).toBe(64);
    expect(run.stderr).toContain('[INPUT_TOO_LARGE]');
    const q = await openQueue({ store: s.url });
    expect(await q.jobs()).toHaveLength(0);
    await q.close();
  });
});

describe('reckon serve refuses a body that is not an object', () => {
  it('POST null, an array or a number: 400 with a typed error body, not 500', async () => {
    const s = store();
    await openQueue({ store: s.url }).then((q) => q.close());
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', MAIN, 'serve', '--store', s.url, '--port', '0', '--token', 't0k'],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.add(child);
    const url = await new Promise<string>((res, rej) => {
      let err = '';
      child.stderr.setEncoding('utf8').on('data', (d: string) => {
        err += d;
        const m = /at (http:\/\/[^/\s]+)\//.exec(err);
        if (m) res(m[1]!);
      });
      child.once('exit', (code) => rej(new Error(`exited ${code}: ${err}`)));
    });
    const routes = ['/api/review/some-id/resolve', '/api/approvals/some-id'];
    for (const [route, body] of routes.flatMap((r) =>
      ['null', '[]', '42', '"x"'].map((b) => [r, b]),
    )) {
      const res = await fetch(`${url}${route}`, {
        method: 'POST',
        headers: { authorization: 'Bearer t0k', 'content-type': 'application/json' },
        body,
      });
      expect(res.status, `${route} ${body}`).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/application\/problem\+json/);
      const problem = (await res.json()) as { code: string; detail: string; status: number };
      expect(problem.status, `${route} ${body}`).toBe(400);
      expect(problem.code, `${route} ${body}: ${problem.detail}`).toMatch(/^[A-Z_]+$/);
      expect(problem.detail.length).toBeGreaterThan(0);
    }
  });
});
