/**
 * Operations benchmarks on SQLite (docs/operations.md has the numbers), each runnable on its own:
 *
 *   npx tsx bench/operations.ts backup [--jobs 1000000] [--workers 4] [--method vacuum-into|online|both]
 *   npx tsx bench/operations.ts prune  [--jobs 1000000] [--workers 4]
 *
 * backup: a store of --jobs QUEUED jobs, --workers worker processes processing them at full speed;
 *   the workers' throughput for 10 s, then during `reckon backup`'s copy (VACUUM INTO, and/or the
 *   online backup API with a deadline), and the copy's time, size and restarts.
 * prune: --jobs terminal histories (job, attempt, 4 events each) finished 10 days ago, written by
 *   SQL; the workers process a steady stream of new jobs; a probe claims one job at a time and
 *   times it. Claim latency p50/p99 for 15 s without a prune, then during the prune of every
 *   old history (500 a batch, the retention loop's defaults); then the file size before and after
 *   VACUUM.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { openQueue, type Queue } from '../src/index.js';
import { DEFAULT_RETENTION, pruneAll } from '../src/runtime/retention.js';
import { backupSqlite, type BackupMethod } from '../src/store/sqlite/backup.js';
import type { SqliteStore } from '../src/store/sqlite/sqlite-store.js';
import { opsNoop } from './ops-worker.js';

const args = process.argv.slice(2);
const which = args[0];
const flag = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : fallback;
};
const JOBS = Number(flag('jobs', '1000000'));
const WORKERS = Number(flag('workers', '4'));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

class Fleet {
  private readonly children: ChildProcess[] = [];
  private readonly done = new Map<ChildProcess, number>();

  async start(url: string, n: number): Promise<void> {
    const script = fileURLToPath(new URL('./ops-worker.ts', import.meta.url));
    for (let i = 0; i < n; i++) {
      const c = fork(script, [url, '10'], { execArgv: ['--import', 'tsx'] });
      this.children.push(c);
      this.done.set(c, 0);
      c.on('message', (m: { done?: number }) => {
        if (typeof m.done === 'number') this.done.set(c, m.done);
      });
      await new Promise<void>((r) => c.once('message', () => r()));
    }
  }

  get total(): number {
    return [...this.done.values()].reduce((a, b) => a + b, 0);
  }

  /** Jobs per second over `ms`. */
  async rate(ms: number): Promise<number> {
    const before = this.total;
    await sleep(ms);
    return ((this.total - before) * 1000) / ms;
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.children.map(
        (c) =>
          new Promise<void>((r) => {
            c.once('exit', () => r());
            c.send({ stop: true });
            setTimeout(() => c.kill('SIGKILL'), 15_000).unref();
          }),
      ),
    );
  }
}

async function enqueueMany(q: Queue, n: number, from = 0): Promise<void> {
  for (let start = 0; start < n; start += 10_000) {
    const items = Array.from({ length: Math.min(10_000, n - start) }, (_, k) => ({
      input: { n: from + start + k },
    }));
    await q.enqueueMany(opsNoop, items);
  }
}

async function backupBench(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-bench-backup-'));
  const path = join(dir, 'reckon.db');
  const url = `sqlite:${path}`;
  const methods: BackupMethod[] =
    flag('method', 'both') === 'both'
      ? ['vacuum-into', 'online']
      : [flag('method', '') as BackupMethod];
  try {
    const q = await openQueue({ store: url });
    let t = performance.now();
    await enqueueMany(q, JOBS);
    console.log(`filled ${JOBS} jobs in ${Math.round(performance.now() - t)} ms`);
    const fleet = new Fleet();
    await fleet.start(url, WORKERS);
    const baseline = await fleet.rate(10_000);
    console.log(`workers: ${baseline.toFixed(0)} jobs/s without a backup`);
    for (const method of methods) {
      const before = fleet.total;
      t = performance.now();
      const deadline = method === 'online' ? 120_000 : 3_600_000;
      const copy = join(dir, `copy-${method}.db`);
      let timer: NodeJS.Timeout | undefined;
      const result = await Promise.race([
        backupSqlite({ source: path, target: copy, method }),
        new Promise<null>((r) => (timer = setTimeout(() => r(null), deadline))),
      ]);
      clearTimeout(timer);
      const ms = performance.now() - t;
      const during = ((fleet.total - before) * 1000) / ms;
      if (result)
        console.log(
          `${method}: ${Math.round(ms)} ms, ${result.check.bytes} bytes, ${result.check.totalJobs} jobs, ` +
            `restarts ${result.restarts}; workers ${during.toFixed(0)} jobs/s during it`,
        );
      else console.log(`${method}: not finished after ${deadline} ms (restarts on every write)`);
      rmSync(copy, { force: true });
    }
    await fleet.stop();
    await q.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `n` SUCCEEDED histories finished 10 days ago: job, one attempt, four events each. */
function fillTerminal(path: string, n: number): void {
  const db = new Database(path);
  const t0 = Date.now() - 10 * 86_400_000;
  const chunk = 100_000;
  for (let from = 0; from < n; from += chunk) {
    const to = Math.min(n, from + chunk) - 1;
    db.transaction(() => {
      const c = `WITH RECURSIVE c(i) AS (SELECT ${from} UNION ALL SELECT i + 1 FROM c WHERE i < ${to})`;
      db.exec(`${c} INSERT INTO jobs (id, queue, operation, input_json, request_key, request_fingerprint,
        state, priority, run_at, created_at, updated_at, finished_at, attempt_count, max_attempts,
        backoff_json, timeout_ms, result_json)
        SELECT printf('old-%09d', i), 'default', 'bench.ops.noop', '{"n":' || i || '}',
          printf('old-key-%09d', i), 'fp', 'SUCCEEDED', 0, ${t0} + i, ${t0} + i, ${t0} + i, ${t0} + i,
          1, 3, '{"initialMs":1000,"factor":2,"maxMs":60000}', 30000, '1' FROM c`);
      db.exec(`${c} INSERT INTO attempts (job_id, attempt_no, request_key, request_fingerprint, state,
        owner_id, lease_token, leased_at, lease_expires_at, dispatched_at, finished_at, result_json)
        SELECT printf('old-%09d', i), 1, printf('old-key-%09d', i), 'fp', 'SUCCEEDED', 'w',
          'token', ${t0} + i, ${t0} + i + 30000, ${t0} + i, ${t0} + i, '1' FROM c`);
      db.exec(`${c}, k(kind, f, t) AS (VALUES ('enqueued', NULL, 'QUEUED'), ('leased', 'QUEUED', 'LEASED'),
          ('dispatched', 'LEASED', 'LEASED'), ('attempt-succeeded', 'LEASED', 'SUCCEEDED'))
        INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, at)
        SELECT printf('old-%09d', i), 1, 'fp', k.kind, k.f, k.t, 'w', ${t0} + i FROM c, k`);
    })();
  }
  db.close();
}

async function pruneBench(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-bench-prune-'));
  const path = join(dir, 'reckon.db');
  const url = `sqlite:${path}`;
  try {
    const q = await openQueue({ store: url });
    let t = performance.now();
    fillTerminal(path, JOBS);
    console.log(`filled ${JOBS} terminal histories in ${Math.round(performance.now() - t)} ms`);
    const fleet = new Fleet();
    await fleet.start(url, WORKERS);
    // A steady stream of new work (1,000 jobs/s) for the workers, and the claim probe.
    let feeding = true;
    let fed = 0;
    const feeder = (async () => {
      while (feeding) {
        await enqueueMany(q, 100, 10_000_000 + fed);
        fed += 100;
        await sleep(100);
      }
    })();
    const probe = { on: true, samples: [] as number[] };
    const probing = (async () => {
      const probeOp = { ...opsNoop, name: 'bench.ops.probe' } as typeof opsNoop;
      let n = 0;
      while (probe.on) {
        await q.enqueue(probeOp, { n: n++ }, { queue: 'probe' });
        const s = performance.now();
        await q.store.attemptClaimMany({
          ownerId: 'probe',
          queues: ['probe'],
          operations: ['bench.ops.probe'],
          limit: 1,
          leaseMs: 600_000,
        });
        probe.samples.push(performance.now() - s);
        await sleep(5);
      }
    })();
    await sleep(15_000);
    const without = probe.samples.splice(0);
    t = performance.now();
    const before = fleet.total;
    const totals = await pruneAll({
      store: q.store,
      states: ['SUCCEEDED'],
      olderThanMs: 7 * 86_400_000,
      batchSize: DEFAULT_RETENTION.batchSize,
      pauseMs: DEFAULT_RETENTION.pauseMs,
    });
    const pruneMs = performance.now() - t;
    const during = probe.samples.splice(0);
    const rate = ((fleet.total - before) * 1000) / pruneMs;
    probe.on = false;
    feeding = false;
    await Promise.all([probing, feeder]);
    await fleet.stop();
    console.log(
      `pruned ${totals.jobs.SUCCEEDED} histories (${totals.events} events) in ${Math.round(pruneMs)} ms, ` +
        `${totals.batches} batches; workers ${rate.toFixed(0)} jobs/s meanwhile`,
    );
    const fmt = (xs: number[]) =>
      `p50 ${percentile(xs, 50).toFixed(2)} ms, p99 ${percentile(xs, 99).toFixed(2)} ms (${xs.length} claims)`;
    console.log(`claim latency without prune: ${fmt(without)}`);
    console.log(`claim latency during prune:  ${fmt(during)}`);
    console.log(`p99 ratio: ${(percentile(during, 99) / percentile(without, 99)).toFixed(2)}x`);
    const size = () =>
      statSync(path).size + (statSync(`${path}-wal`, { throwIfNoEntry: false })?.size ?? 0);
    const beforeVacuum = size();
    t = performance.now();
    const v = (q.store as SqliteStore).vacuum();
    console.log(
      `VACUUM: ${v.bytesBefore} -> ${v.bytesAfter} bytes in ${Math.round(performance.now() - t)} ms (measured ${beforeVacuum})`,
    );
    await q.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (which === 'backup') await backupBench();
else if (which === 'prune') await pruneBench();
else {
  console.error('usage: npx tsx bench/operations.ts backup|prune [--jobs N] [--workers N]');
  process.exit(64);
}
