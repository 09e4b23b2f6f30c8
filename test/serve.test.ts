/**
 * `reckon serve` and `reckon work --metrics-port`: real processes, scraped over HTTP.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue } from '../src/index.js';
import { echo, uncertain } from './fixtures/cli-ops.js';
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

/** Starts `reckon <args>` and resolves with the URL it announces on stderr. */
function startServer(
  args: string[],
  pattern: RegExp,
): Promise<{ child: ChildProcess; url: string; stderr: () => string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let err = '';
  return new Promise((res, rej) => {
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d;
      const m = pattern.exec(err);
      if (m) res({ child, url: m[1]!, stderr: () => err });
    });
    child.once('exit', (code) => rej(new Error(`exited ${code}: ${err}`)));
  });
}

function store(): TestStore {
  const s = tempSqliteStore();
  stores.push(s);
  return s;
}

describe('reckon serve', () => {
  it('serves store-wide metrics, the JSON API, and takes review decisions only with its token', async () => {
    const s = store();
    const q = await openQueue({ store: s.url, operations: [echo, uncertain] });
    await q.enqueue(echo, { n: 1 });
    const doubtful = await q.enqueue(uncertain, {});
    const w = q.worker({ operations: [uncertain], pollIntervalMs: 10, reconcileIntervalMs: 20 });
    const review = new Promise((r) => w.once('review', r));
    await w.start();
    await review;
    await w.stop();
    await q.close();

    const { url } = await startServer(
      ['serve', '--store', s.url, '--port', '0', '--token', 's3cret', '--max-review', '0'],
      /at (http:\/\/[^/\s]+)\//,
    );
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/^reckon_queued_jobs\{queue="default"\} 1$/m);
    expect(metrics).toMatch(/^reckon_needs_review_jobs\{operation="test.uncertain"\} 1$/m);

    const status = (await (await fetch(`${url}/api/status`)).json()) as {
      healthy: boolean;
      checks: { name: string; ok: boolean }[];
    };
    expect(status.healthy).toBe(false);
    expect(status.checks).toEqual([expect.objectContaining({ name: 'review', ok: false })]);

    const listed = (await (await fetch(`${url}/api/review`)).json()) as {
      jobs: { job: { id: string } }[];
    };
    expect(listed.jobs.map((d) => d.job.id)).toEqual([doubtful.id]);
    const html = await (await fetch(`${url}/`)).text();
    expect(html).toContain('<title>Overview · reckon</title>');

    const body = JSON.stringify({ as: 'failed', actor: 'dana', note: 'not in the CRM' });
    const refused = await fetch(`${url}/api/review/${doubtful.id}/resolve`, {
      method: 'POST',
      body,
    });
    expect(refused.status).toBe(401);
    const accepted = await fetch(`${url}/api/review/${doubtful.id}/resolve`, {
      method: 'POST',
      body,
      headers: { authorization: 'Bearer s3cret' },
    });
    expect(accepted.status).toBe(200);
    expect(((await accepted.json()) as { job: { state: string } }).job.state).toBe('FAILED');
    const again = await fetch(`${url}/api/review/${doubtful.id}/resolve`, {
      method: 'POST',
      body,
      headers: { authorization: 'Bearer s3cret' },
    });
    expect(again.status).toBe(409);
    const detail = (await (await fetch(`${url}/api/jobs/${doubtful.id}`)).json()) as {
      events: { kind: string; actor: string }[];
    };
    // The body's actor is not believed: the decision records the token that made it.
    expect(detail.events.at(-1)).toMatchObject({
      kind: 'resolved',
      actor: 'operator:admin',
      detail: { as: 'failed', by: { principal: 'admin', role: 'admin', tokenId: 'serve-token' } },
    });
    expect((await fetch(`${url}/api/jobs/nope`)).status).toBe(404);
  });

  it('refuses review decisions over HTTP without a token (401)', async () => {
    const s = store();
    const q = await openQueue({ store: s.url });
    await q.close();
    const { url } = await startServer(
      ['serve', '--store', s.url, '--port', '0'],
      /at (http:\/\/[^/\s]+)\//,
    );
    const res = await fetch(`${url}/api/review/x/resolve`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(401);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  });
});

describe('reckon work --metrics-port', () => {
  it("exposes this worker's counters", async () => {
    const s = store();
    const q = await openQueue({ store: s.url, operations: [echo] });
    for (let i = 0; i < 3; i++) await q.enqueue(echo, { i });
    await q.close();
    const { url, child } = await startServer(
      [
        'work',
        '--store',
        s.url,
        '--operations',
        'test/fixtures/cli-ops.ts',
        '--metrics-port',
        '0',
        '--log-level',
        'silent',
      ],
      /metrics at (http:\/\/[^/\s]+)\/metrics/,
    );
    let text = '';
    for (const deadline = Date.now() + 15_000; Date.now() < deadline;) {
      text = await (await fetch(`${url}/metrics`)).text();
      if (
        /^reckon_attempts_finished_total\{operation="test.echo",state="SUCCEEDED"\} 3$/m.test(text)
      )
        break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(text).toMatch(
      /^reckon_attempts_finished_total\{operation="test.echo",state="SUCCEEDED"\} 3$/m,
    );
    expect(text).toMatch(
      /^reckon_queue_age_at_dispatch_seconds_count\{operation="test.echo",queue="default"\} 3$/m,
    );
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  });
});
