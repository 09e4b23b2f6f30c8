/**
 * `npx tsx bench/trace.ts [--store postgres|sqlite] [--jobs N] [--concurrency C] [--src DIR]
 * [--top K]`, or `npm run bench -- --trace` for both stores: what a job writes. SQLite: pages written to
 * the WAL per commit and per job, commits per job, and this process's CPU per job, per phase (a
 * reader holds its snapshot through the run, so the WAL only grows: its growth is the frames
 * written). PostgreSQL: what a job writes read from the WAL itself (pg_walinspect): per phase
 * (enqueue, then processing: claim, marker, outcome), the WAL records and bytes per job that
 * touch this run's database (records without a block, such as commits, counted when their
 * transaction wrote here), the rows (inserted, updated, HOT, deleted, locked) and index entries
 * per job, and the records by resource manager, record type and relation. The server is shared,
 * so only records of this run's database are counted. `--src` runs another checkout's reckon
 * (its `src` directory), for a base/new comparison.
 */
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createDatabase, dropDatabase, pgUrl } from './lib.js';

interface WalRow {
  xid: string;
  resource_manager: string;
  record_type: string;
  record_length: number;
  block_ref: string | null;
  description: string | null;
}

/**
 * Rows and index entries written, from the WAL records' types: heap inserts (a multi-insert
 * counts its tuples), updates (HOT or not), deletes and row locks; B-tree leaf insertions
 * (posting-list ones included) are index entries.
 */
function rowsOf(rs: WalRow[]) {
  const c = { inserts: 0, updates: 0, hot: 0, deletes: 0, locks: 0, indexEntries: 0 };
  for (const r of rs) {
    const t = r.record_type.replace(/\+INIT$/, '');
    if (r.resource_manager === 'Heap2' && t === 'MULTI_INSERT')
      c.inserts += Number(/ntuples: (\d+)/.exec(r.description ?? '')?.[1] ?? 1);
    if (r.resource_manager !== 'Heap' && r.resource_manager !== 'Btree') continue;
    if (t === 'INSERT') c.inserts++;
    else if (t === 'UPDATE') c.updates++;
    else if (t === 'HOT_UPDATE') {
      c.updates++;
      c.hot++;
    } else if (t === 'DELETE') c.deletes++;
    else if (t === 'LOCK') c.locks++;
    else if (t === 'INSERT_LEAF' || t === 'INSERT_POST') c.indexEntries++;
  }
  return c;
}

function argOf(name: string, fallback: string): string {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1]! : fallback;
}

const jobs = Number(argOf('--jobs', '2000'));
const concurrency = Number(argOf('--concurrency', '50'));
const src = argOf('--src', new URL('../src', import.meta.url).pathname);
/** How many kinds of WAL record to list per phase, largest first. */
const top = Number(argOf('--top', '14'));

const reckon = (await import(`${src}/index.ts`)) as typeof import('../src/index.js');
const op = reckon.defineOperation({
  name: 'trace.noop',
  execute: (_input: { n: number }, ctx) => ctx.dispatch(() => Promise.resolve(null)),
});

/** Enqueues `jobs` in batches of 1,000, then works them off at `concurrency`. */
async function runJobs(q: Awaited<ReturnType<typeof reckon.openQueue>>, between: () => unknown) {
  for (let i = 0; i < jobs; i += 1000)
    await q.enqueueMany(
      op,
      Array.from({ length: Math.min(1000, jobs - i) }, (_, k) => ({ input: { n: i + k } })),
    );
  await between();
  let done = 0;
  const w = q.worker({ operations: [op], concurrency, pollIntervalMs: 20 });
  w.on('succeeded', () => void done++);
  await w.start();
  while (done < jobs) await new Promise((r) => setTimeout(r, 20));
  await w.stop();
}

async function traceSqlite(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-trace-'));
  const path = join(dir, 'trace.db');
  try {
    const q = await reckon.openQueue({ store: `sqlite:${path}`, operations: [op] });
    const reader = new Database(path, { readonly: true });
    reader.exec('BEGIN');
    reader.prepare('SELECT count(*) FROM jobs').get();
    const frame = (reader.pragma('page_size', { simple: true }) as number) + 24;
    const commits = new Map<string, number>();
    q.store.onCommit?.((c) => commits.set(c.write, (commits.get(c.write) ?? 0) + 1));
    const mark = () => ({
      frames: statSync(`${path}-wal`).size / frame,
      commits: [...commits.values()].reduce((a, b) => a + b, 0),
      cpu: process.cpuUsage(),
      byWrite: new Map(commits),
    });
    const show = (name: string, a: ReturnType<typeof mark>, b: ReturnType<typeof mark>) => {
      const frames = b.frames - a.frames;
      const n = b.commits - a.commits;
      const cpuUs = b.cpu.user - a.cpu.user + b.cpu.system - a.cpu.system;
      const kinds = [...b.byWrite].map(([k, v]) => `${k} ${v - (a.byWrite.get(k) ?? 0)}`);
      console.log(
        `\n${name}: ${(frames / jobs).toFixed(2)} pages a job, ${(frames / Math.max(n, 1)).toFixed(1)} pages a commit, ` +
          `${(n / jobs).toFixed(3)} commits a job (${kinds.join(', ')}), ` +
          `${(cpuUs / jobs).toFixed(0)} µs CPU a job`,
      );
    };
    const m0 = mark();
    let m1 = m0;
    await runJobs(q, () => (m1 = mark()));
    const m2 = mark();
    await q.close();
    reader.exec('COMMIT');
    reader.close();
    console.log(`${jobs} jobs at concurrency ${concurrency} on SQLite, reckon from ${src}`);
    show('enqueue', m0, m1);
    show('processing (claim, marker, outcome)', m1, m2);
    show('total', m0, m2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (argOf('--store', 'postgres') === 'sqlite') {
  await traceSqlite();
  process.exit(0);
}

const db = await createDatabase('reckon_trace');
const admin = new pg.Client({ connectionString: pgUrl(db) });
await admin.connect();
try {
  await admin.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
  const oid = (
    await admin.query<{ oid: string }>(`SELECT oid FROM pg_database WHERE datname = $1`, [db])
  ).rows[0]!.oid;
  const lsn = async () =>
    (await admin.query<{ l: string }>('SELECT pg_current_wal_insert_lsn() AS l')).rows[0]!.l;
  const q = await reckon.openQueue({ store: pgUrl(db), operations: [op] });
  const names = async () =>
    new Map(
      (
        await admin.query<{ f: string; n: string }>(
          `SELECT relfilenode::text AS f, relname AS n FROM pg_class WHERE relfilenode <> 0`,
        )
      ).rows.map((r) => [r.f, r.n]),
    );
  const phase = async (name: string, from: string, to: string) => {
    const rows = (
      await admin.query<WalRow>(
        `SELECT xid::text, resource_manager, record_type, record_length, block_ref, description
         FROM pg_get_wal_records_info($1, $2)`,
        [from, to],
      )
    ).rows;
    const mine = (r: WalRow) => r.block_ref?.includes(`/${oid}/`) === true;
    const xids = new Set(rows.filter(mine).map((r) => r.xid));
    const counted = rows.filter((r) => mine(r) || (r.xid !== '0' && xids.has(r.xid)));
    const rel = await names();
    const byKind = new Map<string, { n: number; bytes: number }>();
    for (const r of counted) {
      const m = /rel \d+\/\d+\/(\d+)/.exec(r.block_ref ?? '');
      const k = `${r.resource_manager}/${r.record_type}${m ? ` ${rel.get(m[1]!) ?? m[1]}` : ''}`;
      const e = byKind.get(k) ?? { n: 0, bytes: 0 };
      e.n++;
      e.bytes += r.record_length;
      byKind.set(k, e);
    }
    const bytes = counted.reduce((s, r) => s + r.record_length, 0);
    console.log(
      `\n${name}: ${(counted.length / jobs).toFixed(2)} WAL records and ${(bytes / jobs / 1024).toFixed(2)} KB a job`,
    );
    const w = rowsOf(counted);
    const per = (x: number) => (x / jobs).toFixed(2);
    console.log(
      `  rows a job ${per(w.inserts + w.updates + w.deletes)} (${per(w.inserts)} inserted, ` +
        `${per(w.updates)} updated of which ${per(w.hot)} HOT, ${per(w.deletes)} deleted), ` +
        `${per(w.locks)} row locks, ${per(w.indexEntries)} index entries`,
    );
    for (const [k, e] of [...byKind].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, top))
      console.log(
        `  ${k.padEnd(48)} ${(e.n / jobs).toFixed(2).padStart(6)} /job ${(e.bytes / jobs).toFixed(0).padStart(6)} B/job`,
      );
  };
  // The server is shared: without a slot, others' writes can recycle the segments to read.
  const slot = `reckon_trace_${process.pid}`;
  await admin.query('SELECT pg_create_physical_replication_slot($1, true)', [slot]);
  const l0 = await lsn();
  let l1 = l0;
  await runJobs(q, async () => (l1 = await lsn()));
  const l2 = await lsn();
  await q.close();
  // Claims commit without waiting for their flush, and pg_walinspect reads only flushed WAL:
  // wait for the WAL writer to flush up to l2 (a transaction that wrote nothing, such as
  // txid_current(), commits without a flush).
  while (
    !(
      await admin.query<{ ok: boolean }>('SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn AS ok', [
        l2,
      ])
    ).rows[0]!.ok
  )
    await new Promise((r) => setTimeout(r, 50));
  console.log(`${jobs} jobs at concurrency ${concurrency}, reckon from ${src}`);
  await phase('enqueue', l0, l1);
  await phase('processing (claim, marker, outcome)', l1, l2);
  await phase('total', l0, l2);
  await admin.query('SELECT pg_drop_replication_slot($1)', [slot]);
} finally {
  await admin.end();
  await dropDatabase(db);
}
