/**
 * The host's physical limits, measured at the start of every bench run (a few seconds): what
 * one fsync costs on the disk the SQLite files live on, how many single-row durable commits
 * SQLite and PostgreSQL make per second, and the loopback round trip. The reference
 * figures came with such a line; the same workloads ran about three times slower on one of our
 * hosts than on another, and these numbers say whether a run's host is a slow one before its
 * ratios are read.
 */
import Database from 'better-sqlite3';
import { closeSync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createDatabase, dropDatabase, median, pgUrl } from './lib.js';

export interface HostLimits {
  /** One 4 KiB write and fdatasync, in the directory the SQLite bench files use (µs, median). */
  fsyncUs: number;
  /** Single-row INSERT transactions per second, SQLite WAL with synchronous = FULL. */
  sqliteCommitsPerSec: number;
  /** Rows per second inserted in transactions of 1,000 (same file and settings). */
  sqliteBatchRowsPerSec: number;
  /** Single-row INSERTs per second on one PostgreSQL connection (each its own durable commit). */
  pgCommitsPerSec?: number;
  /** `SELECT 1` round trip on an idle loopback connection (ms, median). */
  pgRoundTripMs?: number;
}

export interface HostSizes {
  /** fsyncs timed, and as many round trips. */
  samples: number;
  commits: number;
  batches: number;
}

export const HOST_SIZES: HostSizes = { samples: 300, commits: 1_000, batches: 20 };

function perSec(n: number, ms: number): number {
  return Math.round(n / (ms / 1000));
}

function measureFsync(dir: string, n: number): number {
  const fd = openSync(join(dir, 'fsync.bin'), 'w');
  try {
    const page = Buffer.alloc(4096, 7);
    const us: number[] = [];
    for (let i = 0; i < n; i++) {
      writeSync(fd, page, 0, page.length, 0);
      const t = performance.now();
      fdatasyncSync(fd);
      us.push((performance.now() - t) * 1000);
    }
    return Math.round(median(us));
  } finally {
    closeSync(fd);
  }
}

function measureSqlite(
  dir: string,
  z: HostSizes,
): Pick<HostLimits, 'sqliteCommitsPerSec' | 'sqliteBatchRowsPerSec'> {
  const db = new Database(join(dir, 'host.db'));
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)');
    const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
    const one = db.transaction((v: string) => insert.run(v));
    let t = performance.now();
    for (let i = 0; i < z.commits; i++) one(`row ${i}`);
    const sqliteCommitsPerSec = perSec(z.commits, performance.now() - t);
    const many = db.transaction((k: number) => {
      for (let i = 0; i < 1_000; i++) insert.run(`batch ${k} row ${i}`);
    });
    t = performance.now();
    for (let k = 0; k < z.batches; k++) many(k);
    const sqliteBatchRowsPerSec = perSec(z.batches * 1_000, performance.now() - t);
    return { sqliteCommitsPerSec, sqliteBatchRowsPerSec };
  } finally {
    db.close();
  }
}

async function measurePostgres(
  z: HostSizes,
): Promise<Pick<HostLimits, 'pgCommitsPerSec' | 'pgRoundTripMs'>> {
  const name = await createDatabase('host');
  try {
    const c = new pg.Client({ connectionString: pgUrl(name) });
    await c.connect();
    try {
      await c.query('CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text)');
      const insert = { name: 'host_insert', text: 'INSERT INTO t (v) VALUES ($1)' };
      let t = performance.now();
      for (let i = 0; i < z.commits; i++) await c.query({ ...insert, values: [`row ${i}`] });
      const pgCommitsPerSec = perSec(z.commits, performance.now() - t);
      const rtt: number[] = [];
      for (let i = 0; i < z.samples; i++) {
        t = performance.now();
        await c.query('SELECT 1');
        rtt.push(performance.now() - t);
      }
      return { pgCommitsPerSec, pgRoundTripMs: median(rtt) };
    } finally {
      await c.end();
    }
  } finally {
    await dropDatabase(name);
  }
}

export async function measureHost(z: HostSizes = HOST_SIZES): Promise<HostLimits> {
  // The directory the reckon-sqlite bench system puts its files in (a real disk, not tmpfs).
  const dir = mkdtempSync(join(tmpdir(), 'reckon-bench-host-'));
  try {
    const fsyncUs = measureFsync(dir, z.samples);
    const sqlite = measureSqlite(dir, z);
    let postgres: Pick<HostLimits, 'pgCommitsPerSec' | 'pgRoundTripMs'> = {};
    try {
      postgres = await measurePostgres(z);
    } catch {
      // No PostgreSQL here: the line says so by leaving its numbers out.
    }
    return { fsyncUs, ...sqlite, ...postgres };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function describeHost(h: HostLimits): string {
  const n = (x: number) => x.toLocaleString('en');
  const parts = [
    `fsync ${n(h.fsyncUs)} µs`,
    `SQLite ${n(h.sqliteCommitsPerSec)} single-row commits/s, ${n(h.sqliteBatchRowsPerSec)} rows/s in transactions of 1,000`,
  ];
  parts.push(
    h.pgCommitsPerSec === undefined
      ? 'PostgreSQL not reachable'
      : `PostgreSQL ${n(h.pgCommitsPerSec)} single-row commits/s on one connection, SELECT 1 round trip ${h.pgRoundTripMs!.toFixed(2)} ms`,
  );
  return parts.join(' · ');
}
