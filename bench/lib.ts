/**
 * Shared pieces of the benchmark: loopback-only connection settings, fresh databases,
 * timing and statistics. The bench never targets anything but 127.0.0.1.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const PG_HOST = '127.0.0.1';
export const PG_PORT = Number(process.env.BENCH_PG_PORT ?? 5432);
export const PG_USER = process.env.BENCH_PG_USER ?? 'postgres';
export const REDIS_HOST = '127.0.0.1';
export const REDIS_PORT = Number(process.env.BENCH_REDIS_PORT ?? 6379);

/**
 * Milliseconds on the host's monotonic clock (CLOCK_MONOTONIC on Linux), comparable across
 * processes on one host and never stepped. It was `performance.timeOrigin + performance.now()`,
 * which carries each process's wall clock as it was when the process started: in a run of
 * 2026-12-04 every cross-process pickup of one round read 10.95 s, p50 and p99 alike, the
 * producer's and the worker process's clocks disagreeing by that much (most likely a step of
 * the VM's clock between their starts).
 */
export function hostMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export function pgUrl(database: string): string {
  return `postgres://${PG_USER}@${PG_HOST}:${PG_PORT}/${database}`;
}

/** Creates a fresh, uniquely named database and returns its name. */
export async function createDatabase(prefix: string): Promise<string> {
  const name = `bench_${prefix}_${randomBytes(4).toString('hex')}`.replace(/[^a-z0-9_]/g, '_');
  const c = new pg.Client({ connectionString: pgUrl('postgres') });
  await c.connect();
  try {
    await c.query(`CREATE DATABASE ${name}`);
  } finally {
    await c.end();
  }
  return name;
}

/** Drops a database once its clients have gone; forces it after a few seconds. */
export async function dropDatabase(name: string): Promise<void> {
  const c = new pg.Client({ connectionString: pgUrl('postgres') });
  await c.connect();
  try {
    const deadline = Date.now() + 5_000;
    for (;;) {
      const r = await c.query<{ n: string }>(
        'SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1',
        [name],
      );
      if (Number(r.rows[0]!.n) === 0 || Date.now() > deadline) break;
      await sleep(50);
    }
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await c.end();
  }
}

/**
 * A peer that leaves a pooled connection open past its own stop() gets it terminated by the
 * forced DROP; its pool may then emit an unhandled 'error' (57P01). That is teardown noise,
 * not a result: log it and go on. Anything else still crashes the bench.
 */
export function tolerateTeardownTermination(): void {
  process.on('uncaughtException', (err: Error & { code?: string }) => {
    if (err.code === '57P01') {
      process.stderr.write(`bench: ignored a peer's terminated connection at teardown\n`);
      return;
    }
    console.error(err);
    process.exit(1);
  });
}

/**
 * Drops databases an interrupted earlier run left behind: `bench_` databases nobody is connected
 * to. One in use belongs to a bench running now (another checkout on this host) and is left alone.
 */
export async function dropLeftoverDatabases(): Promise<void> {
  const c = new pg.Client({ connectionString: pgUrl('postgres') });
  await c.connect();
  try {
    const r = await c.query<{ datname: string }>(
      `SELECT d.datname FROM pg_database d
       WHERE d.datname LIKE 'bench\\_%'
         AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)`,
    );
    for (const row of r.rows) await c.query(`DROP DATABASE IF EXISTS ${row.datname}`);
  } finally {
    await c.end();
  }
}

/** A column of a table, for copying rows in bulk. */
interface Column {
  name: string;
  /** Identity, generated or serial: the database fills it in. */
  filled: boolean;
}

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

async function tableColumns(c: pg.ClientBase, schema: string, table: string): Promise<Column[]> {
  const r = await c.query<{ column_name: string; filled: boolean }>(
    `SELECT column_name,
       (is_identity = 'YES' OR is_generated = 'ALWAYS' OR coalesce(column_default, '') LIKE 'nextval(%') AS filled
     FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2
     ORDER BY ordinal_position`,
    [schema, table],
  );
  if (r.rows.length === 0) throw new Error(`bench: no table ${schema}.${table}`);
  return r.rows.map((row) => ({ name: row.column_name, filled: row.filled }));
}

/**
 * The column list and SELECT list that copy a template row (alias `alias`) into `schema.table`:
 * every column the database does not fill in itself, from the template unless `overrides` gives
 * an SQL expression for it. Read from the catalog, so a column added by a later migration is
 * copied too.
 */
export async function copyLists(
  c: pg.ClientBase,
  schema: string,
  table: string,
  alias: string,
  overrides: Record<string, string>,
): Promise<{ columns: string; values: string }> {
  const cols = (await tableColumns(c, schema, table)).filter(
    (col) => !col.filled || overrides[col.name] !== undefined,
  );
  for (const k of Object.keys(overrides))
    if (!cols.some((col) => col.name === k)) throw new Error(`bench: ${table} has no column ${k}`);
  return {
    columns: cols.map((col) => quoteIdent(col.name)).join(', '),
    values: cols.map((col) => overrides[col.name] ?? `${alias}.${quoteIdent(col.name)}`).join(', '),
  };
}

/** Runs `fn(lo, hi)` over [from, to] in chunks of `chunk`. */
export async function inChunks(
  from: number,
  to: number,
  chunk: number,
  fn: (lo: number, hi: number) => Promise<void>,
): Promise<void> {
  for (let lo = from; lo <= to; lo += chunk) await fn(lo, Math.min(to, lo + chunk - 1));
}

export function median(xs: number[]): number {
  return percentile(xs, 50);
}

export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const rank = (p / 100) * (s.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return s[lo]! + (s[hi]! - s[lo]!) * (rank - lo);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `check` until it returns true; fails after `timeoutMs`. */
export async function waitUntil(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
  everyMs = 5,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`bench: timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Runs `n` calls of `fn` with at most `inFlight` at once. */
export async function inFlight(
  n: number,
  width: number,
  fn: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < n) await fn(next++);
  };
  await Promise.all(Array.from({ length: Math.min(width, n) }, lane));
}

/**
 * PostgreSQL's cumulative counters of one database (pg_stat_database): transactions committed
 * (read-only ones included, such as pollers') and rows inserted, updated and deleted. A backend
 * sends its counts to them at most once a second and when it exits: read them a second after
 * the writers went idle or away.
 */
export async function pgWriteCounters(database: string): Promise<Record<string, number>> {
  const c = new pg.Client({ connectionString: pgUrl('postgres') });
  await c.connect();
  try {
    const r = await c.query<{ commits: string; rows: string }>(
      `SELECT xact_commit AS commits, tup_inserted + tup_updated + tup_deleted AS rows
       FROM pg_stat_database WHERE datname = $1`,
      [database],
    );
    const row = r.rows[0];
    return { commits: Number(row?.commits ?? 0), rowWrites: Number(row?.rows ?? 0) };
  } finally {
    await c.end();
  }
}
