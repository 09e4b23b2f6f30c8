/**
 * The operator's commands at their edges: `init --dry-run` (both stores), a schema newer than
 * this reckon refused clearly, and `backup` / `restore` refusing what they must never do.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue, defineOperation } from '../src/index.js';
import {
  LATEST_SCHEMA_VERSION as SQLITE_LATEST,
  MIGRATIONS as SQLITE_MIGRATIONS,
} from '../src/store/sqlite/schema.js';
import {
  LATEST_SCHEMA_VERSION as PG_LATEST,
  MIGRATIONS as PG_MIGRATIONS,
} from '../src/store/postgres/schema.js';
import { pgUnavailableReason, tempPgStore } from './helpers/stores.js';
import { reckon } from './helpers/cli.js';

const pgReason = await pgUnavailableReason();

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'reckon-ops-'));
  dirs.push(d);
  return d;
}

interface DryRun {
  exists: boolean;
  current: number;
  latest: number;
  pending: { version: number; name: string; sql: string }[];
}

describe('reckon init --dry-run', () => {
  it('SQLite: lists what would run, creates nothing, and runs nothing', async () => {
    const dir = tempDir();
    const url = `sqlite:${join(dir, 'r.db')}`;
    const fresh = await reckon(['init', '--dry-run', '--json', '--store', url]);
    expect(fresh.code, fresh.stderr).toBe(0);
    const f = JSON.parse(fresh.stdout) as DryRun;
    expect(f.exists).toBe(false);
    // The numbers as released, not 1..latest: a branch may hold a later number than the next.
    expect(f.pending.map((m) => m.version)).toEqual(SQLITE_MIGRATIONS.map((m) => m.version));
    expect(existsSync(join(dir, 'r.db'))).toBe(false);

    expect((await reckon(['init', '--store', url])).code).toBe(0);
    // One migration behind, as a store of the previous release would be.
    const db = new Database(join(dir, 'r.db'));
    db.prepare('DELETE FROM reckon_migrations WHERE version = ?').run(SQLITE_LATEST);
    db.close();
    const behind = await reckon(['init', '--dry-run', '--store', url]);
    expect(behind.code).toBe(0);
    expect(behind.stdout).toContain(`-- migration ${SQLITE_LATEST}:`);
    expect(behind.stdout).toMatch(/1 migration\(s\) would run; nothing was changed/);
    const still = new Database(join(dir, 'r.db'), { readonly: true });
    expect(still.prepare('SELECT max(version) AS v FROM reckon_migrations').get()).toEqual({
      v: SQLITE_MIGRATIONS[SQLITE_MIGRATIONS.length - 2]!.version,
    });
    still.close();
  });

  it('refuses clearly when the store is newer than this reckon (an old worker meets a new schema)', async () => {
    const dir = tempDir();
    const url = `sqlite:${join(dir, 'r.db')}`;
    expect((await reckon(['init', '--store', url])).code).toBe(0);
    const db = new Database(join(dir, 'r.db'));
    db.prepare(
      `INSERT INTO reckon_migrations (version, name, applied_at) VALUES (999, 'future', 0)`,
    ).run();
    db.close();
    for (const args of [['init', '--dry-run'], ['init'], ['jobs', 'list']]) {
      const r = await reckon([...args, '--json', '--store', url]);
      expect(r.code).toBe(1);
      const e = (JSON.parse(r.stdout) as { error: { code: string; message: string } }).error;
      expect(e.code).toBe('SCHEMA_TOO_NEW');
      expect(e.message).toMatch(/schema version 999, newer than this reckon supports/);
    }
    const op = defineOperation({ name: 'x', execute: () => Promise.resolve(1) });
    await expect(openQueue({ store: url, operations: [op] })).rejects.toMatchObject({
      code: 'SCHEMA_TOO_NEW',
    });
  });

  it.skipIf(pgReason !== null)(
    'PostgreSQL: lists each migration with its SQL, changes nothing',
    async () => {
      const pg = await tempPgStore();
      try {
        const url = `${pg.url}?schema=ops_dry`;
        const r = await reckon(['init', '--dry-run', '--json', '--store', url]);
        expect(r.code, r.stderr).toBe(0);
        const d = JSON.parse(r.stdout) as DryRun;
        expect(d.exists).toBe(false);
        expect(d.pending.map((m) => m.version)).toEqual(PG_MIGRATIONS.map((m) => m.version));
        expect(d.pending[0]!.sql).toContain('SET search_path TO "ops_dry"');
        expect(d.pending[0]!.sql).toContain('CREATE TABLE jobs');
        const again = await reckon(['init', '--dry-run', '--json', '--store', url]);
        expect((JSON.parse(again.stdout) as DryRun).exists).toBe(false);
        expect((await reckon(['init', '--store', url])).code).toBe(0);
        const after = JSON.parse(
          (await reckon(['init', '--dry-run', '--json', '--store', url])).stdout,
        ) as DryRun;
        expect(after).toMatchObject({ exists: true, current: PG_LATEST, pending: [] });
      } finally {
        await pg.drop();
      }
    },
  );
});

describe('reckon backup and restore refuse what they must never do', () => {
  it('no overwrite, no restore of a broken or live file, the copy checked', async () => {
    const dir = tempDir();
    const url = `sqlite:${join(dir, 'live.db')}`;
    const op = defineOperation<{ n: number }, number>({
      name: 'ops.x',
      fingerprint: (i) => i,
      execute: (i) => Promise.resolve(i.n),
    });
    const q = await openQueue({ store: url, operations: [op] });
    await q.enqueueMany(
      op,
      [1, 2, 3].map((n) => ({ input: { n } })),
    );
    const copy = join(dir, 'copy.db');
    try {
      const b = await reckon(['backup', copy, '--json', '--store', url]);
      expect(b.code, b.stderr).toBe(0);
      expect(JSON.parse(b.stdout)).toMatchObject({
        method: 'vacuum-into',
        check: { schemaVersion: SQLITE_LATEST, totalJobs: 3, jobs: { QUEUED: 3 } },
      });
      const again = await reckon(['backup', copy, '--json', '--store', url]);
      expect(again.code).toBe(1);
      expect(JSON.parse(again.stdout)).toMatchObject({ error: { code: 'TARGET_EXISTS' } });
      const online = await reckon([
        'backup',
        join(dir, 'online.db'),
        '--method',
        'online',
        '--json',
        '--store',
        url,
      ]);
      expect(online.code, online.stderr).toBe(0);
      expect(JSON.parse(online.stdout)).toMatchObject({
        method: 'online',
        check: { totalJobs: 3 },
      });

      // Over the live store, or over any file: refused.
      const over = await reckon(['restore', copy, '--json', '--store', url]);
      expect(JSON.parse(over.stdout)).toMatchObject({ error: { code: 'TARGET_EXISTS' } });
      // The live store itself (its WAL beside it) is not a backup.
      const live = await reckon([
        'restore',
        join(dir, 'live.db'),
        '--json',
        '--store',
        `sqlite:${join(dir, 'n1.db')}`,
      ]);
      expect(JSON.parse(live.stdout)).toMatchObject({ error: { code: 'BACKUP_INVALID' } });
      const junk = join(dir, 'junk.db');
      writeFileSync(
        junk,
        'not a database at all, but long enough to look like one? no.'.repeat(100),
      );
      const broken = await reckon([
        'restore',
        junk,
        '--json',
        '--store',
        `sqlite:${join(dir, 'n2.db')}`,
      ]);
      expect(broken.code).toBe(1);
      expect(JSON.parse(broken.stdout)).toMatchObject({ error: { code: 'BACKUP_INVALID' } });
      expect(existsSync(join(dir, 'n2.db'))).toBe(false);

      const ok = await reckon([
        'restore',
        copy,
        '--json',
        '--store',
        `sqlite:${join(dir, 'n3.db')}`,
      ]);
      expect(ok.code, ok.stderr).toBe(0);
      // Three due QUEUED jobs: each marked UNKNOWN, to be looked up before anything is sent.
      expect(JSON.parse(ok.stdout)).toMatchObject({ reconciled: { leased: 0, queued: 3 } });
      const q3 = await openQueue({ store: `sqlite:${join(dir, 'n3.db')}` });
      try {
        const jobs = await q3.jobs({ limit: 10 });
        expect(jobs.map((j) => j.state)).toEqual(['UNKNOWN', 'UNKNOWN', 'UNKNOWN']);
        const d = (await q3.job(jobs[0]!.id))!;
        expect(d.attempts[0]).toMatchObject({ state: 'UNKNOWN', ownerId: 'restore' });
        expect(d.events.at(-1)).toMatchObject({ actor: 'restore', toState: 'UNKNOWN' });
      } finally {
        await q3.close();
      }
      const none = await reckon([
        'restore',
        copy,
        '--reconcile',
        'none',
        '--json',
        '--store',
        `sqlite:${join(dir, 'n4.db')}`,
      ]);
      expect(JSON.parse(none.stdout)).toMatchObject({ reconciled: { leased: 0, queued: 0 } });
    } finally {
      await q.close();
    }
  });
});
