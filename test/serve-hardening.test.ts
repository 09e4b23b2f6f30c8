/**
 * `reckon serve` against a browser's reach (issue #21 item 7): DNS rebinding (a page whose own
 * name resolves to 127.0.0.1) is refused by the Host check; `/metrics` needs the token with
 * `--protect-reads`; `--help` steers the token to the environment. Real processes, real HTTP.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue } from '../src/index.js';
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

async function serve(args: string[], env: Record<string, string> = {}): Promise<URL> {
  const s = tempSqliteStore();
  stores.push(s);
  await openQueue({ store: s.url }).then((q) => q.close());
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', MAIN, 'serve', '--store', s.url, '--port', '0', ...args],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } },
  );
  children.add(child);
  return new Promise((res, rej) => {
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d;
      const m = /at (http:\/\/[^/\s]+)\//.exec(err);
      if (m) res(new URL(m[1]!));
    });
    child.once('exit', (code) => rej(new Error(`exited ${code}: ${err}`)));
  });
}

/** A GET with the Host header a browser would send for `host`. */
function get(
  base: URL,
  path: string,
  host: string,
  token?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((res, rej) => {
    const req = request(
      {
        host: base.hostname,
        port: base.port,
        path,
        headers: { host, ...(token ? { authorization: `Bearer ${token}` } : {}) },
      },
      (r) => {
        let body = '';
        r.setEncoding('utf8').on('data', (d: string) => (body += d));
        r.on('end', () => res({ status: r.statusCode!, body }));
      },
    );
    req.once('error', rej);
    req.end();
  });
}

describe('reckon serve: Host check', () => {
  it('refuses a Host that is not the bound address, localhost or allowed: DNS rebinding reads nothing', async () => {
    const url = await serve([]);
    for (const path of ['/api/jobs', '/api/status', '/metrics', '/']) {
      const r = await get(url, path, `attacker.example:${url.port}`);
      expect(r.status, path).toBe(421);
      const problem = JSON.parse(r.body) as { code: string; detail: string; status: number };
      expect(problem.code).toBe('HOST_NOT_ALLOWED');
      expect(problem.status).toBe(421);
      expect(problem.detail).toContain('--allowed-hosts');
    }
    for (const host of [`localhost:${url.port}`, `127.0.0.1:${url.port}`, 'LOCALHOST'])
      expect((await get(url, '/api/jobs', host)).status, host).toBe(200);
  });

  it('--allowed-hosts and RECKON_SERVE_ALLOWED_HOSTS add names', async () => {
    const byFlag = await serve(['--allowed-hosts', 'reckon.internal,ops.example']);
    expect((await get(byFlag, '/api/jobs', `reckon.internal:${byFlag.port}`)).status).toBe(200);
    expect((await get(byFlag, '/metrics', 'ops.example')).status).toBe(200);
    expect((await get(byFlag, '/api/jobs', 'attacker.example')).status).toBe(421);
    const byEnv = await serve([], { RECKON_SERVE_ALLOWED_HOSTS: 'reckon.internal' });
    expect((await get(byEnv, '/api/jobs', 'reckon.internal')).status).toBe(200);
    expect((await get(byEnv, '/api/jobs', 'attacker.example')).status).toBe(421);
  });
});

describe('reckon serve: --protect-reads and the token', () => {
  it('/metrics needs the token when reads are protected', async () => {
    const url = await serve(['--protect-reads'], { RECKON_SERVE_TOKEN: 'r3ad' });
    const host = `127.0.0.1:${url.port}`;
    const open = await get(url, '/metrics', host);
    expect(open.status).toBe(401);
    expect((JSON.parse(open.body) as { code: string }).code).toBe('UNAUTHORIZED');
    expect((await get(url, '/metrics', host, 'wrong')).status).toBe(401);
    const authorized = await get(url, '/metrics', host, 'r3ad');
    expect(authorized.status).toBe(200);
    expect(authorized.body).toContain('reckon_');
    expect((await get(url, '/healthz', host)).status).toBe(200);
  });

  it('--help says to give the token in the environment: --token shows in ps', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, 'serve', '--help'], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(r.stdout).toMatch(/RECKON_SERVE_TOKEN/);
    expect(r.stdout.replace(/\s+/g, ' ')).toMatch(/prefer.*RECKON_SERVE_TOKEN.*ps/i);
    expect(r.stdout).toContain('--allowed-hosts');
  });
});
