/**
 * Issue #33 item 9: `reckon mcp` creates a SQLite store that does not exist yet (an agent host
 * starts it from its configuration, where nobody runs `reckon init`), while `work` and `serve`
 * refuse a missing one (a typo there would work an empty store forever) and say how to create
 * it; `reckon work --metrics-port` checks the Host header as `reckon serve` does.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI_MAIN, reckon } from './helpers/cli.js';

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-cli-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Starts a long-running command; resolves with what stderr announced (`pattern`'s group 1). */
async function startUntil(args: string[], pattern: RegExp): Promise<string> {
  const child = spawn(process.execPath, ['--import', 'tsx', CLI_MAIN, ...args], {
    env: { ...process.env, RECKON_STORE: undefined, RECKON_SERVE_ALLOWED_HOSTS: undefined },
  });
  const exited = new Promise((r) => child.once('exit', r));
  cleanup.push(async () => {
    child.kill('SIGTERM');
    await exited;
  });
  let stderr = '';
  return new Promise((resolve, reject) => {
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
      const m = pattern.exec(stderr);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`exited ${code}: ${stderr}`)));
  });
}

function get(url: string, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { host } }, (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('CLI store and Host checks', () => {
  it('reckon mcp creates a missing SQLite store; work and serve refuse it, naming reckon init', async () => {
    const dir = tempDir();
    const path = join(dir, 'agent.db');
    const url = await startUntil(
      [
        'mcp',
        '--operations',
        'test/fixtures/cli-ops.ts',
        '--store',
        `sqlite:${path}`,
        '--http',
        '0',
        '--work',
      ],
      /MCP server at (\S+)/,
    );
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    expect(existsSync(path)).toBe(true);
    for (const cmd of [
      ['work', '--operations', 'test/fixtures/cli-ops.ts'],
      ['serve', '--port', '0'],
    ]) {
      const r = await reckon([...cmd, '--store', `sqlite:${join(dir, 'typo.db')}`]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/reckon init --store sqlite:.*typo\.db.*\[STORE_NOT_FOUND\]/);
      expect(existsSync(join(dir, 'typo.db'))).toBe(false);
    }
  }, 120_000);

  it('reckon work --metrics-port refuses a Host header that names another server', async () => {
    const dir = tempDir();
    const store = `sqlite:${join(dir, 'reckon.db')}`;
    expect((await reckon(['init', '--store', store])).code).toBe(0);
    const base = await startUntil(
      ['work', '--operations', 'test/fixtures/cli-ops.ts', '--store', store, '--metrics-port', '0'],
      /metrics at (\S+)\/metrics/,
    );
    expect(await get(`${base}/metrics`, 'localhost')).toBe(200);
    expect(await get(`${base}/metrics`, new URL(base).host)).toBe(200);
    // A page at attacker.example whose name resolves to 127.0.0.1 (DNS rebinding).
    expect(await get(`${base}/metrics`, 'attacker.example')).toBe(421);
  }, 120_000);
});
