/**
 * `npm install reckon` without any optional peer: the agent frameworks and `@opentelemetry/api`
 * are optional, so the package and its CLI must load and run jobs without them, and
 * `reckon mcp` must say what to install. The child processes run the built package with the
 * optional peers made unresolvable.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const HIDE = ['--import', './test/fixtures/no-optional-peers.js'];
const OPS = 'test/fixtures/plain-ops.js';

function node(args: string[]) {
  return spawnSync(process.execPath, [...HIDE, ...args], { encoding: 'utf8', timeout: 30_000 });
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('reckon without its optional peers installed', () => {
  it('the hiding works: the frameworks and the OpenTelemetry API are not found', () => {
    for (const pkg of ['ai', '@opentelemetry/api']) {
      const r = node(['--input-type=module', '-e', `await import('${pkg}')`]);
      expect(r.status).not.toBe(0);
      expect(r.stderr).toContain(`Cannot find package '${pkg}'`);
    }
  });

  it('imports reckon and runs a job', () => {
    const r = node([
      '--input-type=module',
      '-e',
      `import { openQueue, defineOperation } from 'reckon';
       const op = defineOperation({ name: 'x', execute: async (_i, ctx) => ctx.dispatch(async () => 1) });
       const q = await openQueue({ store: 'sqlite::memory:', operations: [op] });
       const w = q.worker({ operations: [op] }); await w.start();
       const out = await q.call(op, {}, { key: 'k', timeoutMs: 10000 });
       await w.stop(); await q.close();
       console.log(out.state);`,
    ]);
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('SUCCEEDED');
  });

  it('runs the CLI: a worker works a job reckon call enqueued; reckon mcp names the package', async () => {
    expect(node(['dist/cli/main.js', '--help']).status).toBe(0);
    const dir = mkdtempSync(join(tmpdir(), 'reckon-peers-'));
    dirs.push(dir);
    const store = ['--store', `sqlite:${join(dir, 'r.db')}`];
    expect(node(['dist/cli/main.js', 'init', ...store]).status).toBe(0);
    const worker = spawn(
      process.execPath,
      [...HIDE, 'dist/cli/main.js', 'work', '--operations', OPS, ...store],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let workerErr = '';
    worker.stderr.on('data', (c: Buffer) => (workerErr += c.toString()));
    const exited = new Promise<number | null>((done) => worker.on('exit', (code) => done(code)));
    const call = node([
      'dist/cli/main.js',
      'call',
      'plain.echo',
      '{"say":"hi"}',
      '--operations',
      OPS,
      '--key',
      'peers-1',
      '--wait',
      '25s',
      '--json',
      ...store,
    ]);
    worker.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(workerErr).not.toContain('Cannot find package');
    expect(call.stderr).not.toContain('Cannot find package');
    expect(call.status).toBe(0);
    expect(JSON.stringify(JSON.parse(call.stdout))).toContain('"echoed":"hi"');

    const r = node([
      'dist/cli/main.js',
      'mcp',
      '--operations',
      'examples/chaos/operations.js',
      '--store',
      'sqlite::memory:',
    ]);
    expect(r.status).toBe(64);
    expect(r.stderr).toContain('npm install @modelcontextprotocol/sdk');
  }, 60_000);
});
