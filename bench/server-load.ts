/**
 * A load test of `reckon serve` from another process on loopback (issue #28): the store filled
 * with N jobs (default 1,000,000), then for each scenario C concurrent clients for D seconds:
 * the job list, the list filtered by state and operation, a page further down (cursor), a job
 * by id, the console's jobs page and its search (a request key, text in the input, state and
 * operation, text matching nothing: the search's whole window), and approvals (each request approves a different AWAITING_APPROVAL job). Prints
 * throughput and latency percentiles per scenario. Run by hand, not by the test suite:
 *
 *   npm run build && npx tsx bench/server-load.ts --store sqlite:/tmp/load.db [--jobs 1000000]
 *       [--seconds 10] [--concurrency 8] [--approvals 20000] [--json]
 *
 * A store that already holds the jobs (same --store, from an earlier run) is not filled again.
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { defineOperation, openQueue } from '../src/index.js';

const ROOT = resolve(import.meta.dirname, '..');
const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i]!;
  if (a.startsWith('--'))
    args.set(a.slice(2), process.argv[i + 1]?.startsWith('--') ? '1' : (process.argv[++i] ?? '1'));
}
const STORE = args.get('store') ?? 'sqlite:/tmp/reckon-server-load.db';
const JOBS = Number(args.get('jobs') ?? 1_000_000);
const SECONDS = Number(args.get('seconds') ?? 10);
const CONCURRENCY = Number(args.get('concurrency') ?? 8);
const APPROVALS = Number(args.get('approvals') ?? 20_000);
const TOKEN = 'rk_load_test_admin_token';

const ops = ['mail.send', 'payments.charge', 'crm.update', 'browser.submit'].map((name) =>
  defineOperation({ name, execute: (i: unknown, ctx) => ctx.dispatch(() => Promise.resolve(i)) }),
);
const refund = defineOperation({
  name: 'payments.refund',
  approval: true,
  approvalTimeoutMs: null,
  execute: (i: unknown, ctx) => ctx.dispatch(() => Promise.resolve(i)),
});

async function fill(): Promise<{ someId: string; approvalIds: string[] }> {
  const q = await openQueue({ store: STORE, operations: [...ops, refund] });
  try {
    const have = (await q.store.statsGet()).queues.reduce(
      (n, s) => n + Object.values(s.counts).reduce((a, b) => a + b, 0),
      0,
    );
    const started = performance.now();
    for (let n = have; n < JOBS;) {
      const batch = Math.min(10_000, JOBS - n);
      const op = ops[((n / 10_000) % ops.length) | 0]!;
      await q.enqueueMany(
        op,
        Array.from({ length: batch }, (_, i) => ({
          input: { to: `user${n + i}@example.com`, order: n + i, note: 'load test' },
          key: `load:${n + i}`,
        })),
      );
      n += batch;
      if (n % 100_000 === 0)
        process.stderr.write(
          `filled ${n} jobs (${((performance.now() - started) / 1000).toFixed(0)} s)\n`,
        );
    }
    // No ANALYZE here: on PostgreSQL the first process that opens a journal with rows and no
    // planner statistics (the server below, unless autovacuum came first) analyzes it.
    let approvals = await q.approvals.list({ limit: 10_000 });
    if (approvals.length < Math.min(APPROVALS, 10_000)) {
      for (let n = 0; n < APPROVALS; n += 1_000)
        await q.enqueueMany(
          refund,
          Array.from({ length: Math.min(1_000, APPROVALS - n) }, (_, i) => ({
            input: { n: n + i },
          })),
        );
      approvals = await q.approvals.list({ limit: 10_000 });
    }
    const [one] = await q.jobs({ limit: 1 });
    return { someId: one!.id, approvalIds: approvals.map((a) => a.id) };
  } finally {
    await q.close();
  }
}

function serve(): Promise<{ url: string; stop: () => void }> {
  const child = spawn(
    process.execPath,
    [
      join(ROOT, 'dist', 'cli', 'main.js'),
      'serve',
      '--store',
      STORE,
      '--port',
      '0',
      '--rate-limit-max',
      String(2 ** 31),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, RECKON_SERVE_TOKEN: TOKEN } },
  );
  let err = '';
  return new Promise((res, rej) => {
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d;
      const m = /at (http:\/\/[^/\s]+)\//.exec(err);
      if (m) res({ url: m[1]!, stop: () => child.kill('SIGTERM') });
    });
    child.once('exit', (code) => rej(new Error(`serve exited ${code}: ${err}`)));
  });
}

interface Result {
  scenario: string;
  requests: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  errors: number;
}

async function run(
  scenario: string,
  request: (i: number) => Promise<Response>,
  limit = Infinity,
): Promise<Result> {
  const latencies: number[] = [];
  let errors = 0;
  let next = 0;
  const end = performance.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < end && next < limit) {
        const i = next++;
        const t = performance.now();
        const res = await request(i);
        await res.arrayBuffer();
        latencies.push(performance.now() - t);
        if (!res.ok) errors++;
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  const q = (p: number) =>
    latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0;
  const took = Math.min(SECONDS, (performance.now() - end) / 1000 + SECONDS);
  return {
    scenario,
    requests: latencies.length,
    perSecond: Math.round(latencies.length / took),
    p50Ms: +q(0.5).toFixed(2),
    p99Ms: +q(0.99).toFixed(2),
    maxMs: +(latencies.at(-1) ?? 0).toFixed(2),
    errors,
  };
}

async function main(): Promise<void> {
  const { someId, approvalIds } = await fill();
  if (args.has('fill-only')) return;
  const server = await serve();
  const auth = { authorization: `Bearer ${TOKEN}` };
  const get = (path: string) => fetch(server.url + path, { headers: auth });
  try {
    // A page further down the list: the cursor after the 500 newest jobs.
    const page = (await (await get('/api/jobs?limit=500')).json()) as { nextBefore: string };
    const cursor = page.nextBefore;
    const results = [
      await run('list newest 50', () => get('/api/jobs?limit=50')),
      await run('list by state QUEUED', () => get('/api/jobs?state=QUEUED&limit=50')),
      await run('list by operation', () => get('/api/jobs?operation=payments.charge&limit=50')),
      await run('list page (cursor)', () => get(`/api/jobs?limit=50&before=${cursor}`)),
      await run('api search: request key', () =>
        get(`/api/jobs?q=${encodeURIComponent(`load:${(Math.random() * JOBS) | 0}`)}`),
      ),
      await run('api search: no match (window)', () => get('/api/jobs?q=no-such-text')),
      await run('job by id', () => get(`/api/jobs/${someId}`)),
      await run('console jobs page', () => get('/jobs')),
      await run('search: request key', () =>
        get(`/jobs?q=${encodeURIComponent(`load:${(Math.random() * JOBS) | 0}`)}`),
      ),
      await run('search: text in input', () => get(`/jobs?q=user${(Math.random() * 9) | 0}`)),
      await run('search: state and operation', () =>
        get('/jobs?state=QUEUED&operation=crm.update'),
      ),
      await run('search: no match (window)', () => get('/jobs?q=no-such-text')),
      await run(
        'approve',
        (i) =>
          fetch(`${server.url}/api/approvals/${approvalIds[i]}`, {
            method: 'POST',
            headers: { ...auth, 'content-type': 'application/json' },
            body: JSON.stringify({ approve: true, note: 'load test' }),
          }),
        approvalIds.length,
      ),
    ];
    if (args.has('json'))
      process.stdout.write(
        JSON.stringify({ store: STORE, jobs: JOBS, concurrency: CONCURRENCY, results }, null, 2) +
          '\n',
      );
    else {
      console.log(`store ${STORE}, ${JOBS} jobs, ${CONCURRENCY} clients, ${SECONDS} s each`);
      console.table(results);
    }
  } finally {
    server.stop();
  }
}

await main();
