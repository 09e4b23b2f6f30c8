/**
 * The queue API: delivery, dedup, bad input, outcomes, cancel, claiming and graceful stop on
 * both stores (PostgreSQL required in CI and with RECKON_REQUIRE_PG=1); the SQLite file's own
 * concerns (fsync, typed file errors, migrations, the append-only trigger) on SQLite.
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  DefiniteFailure,
  InvalidInput,
  JobStateConflict,
  PayloadTooLarge,
  RequestKeyConflict,
  SchemaTooNew,
  StoreCorrupt,
  StoreUnavailable,
  UnknownOperation,
  defineOperation,
  openQueue,
  type Queue,
} from '../src/index.js';
import {
  PG_REQUIRED,
  pgUnavailableReason,
  tempPgStore,
  tempSqliteStore,
  type StoreKind,
  type TestStore,
} from './helpers/stores.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, rewriteTables } from '../src/store/sqlite/schema.js';
import { SqliteStore } from '../src/store/sqlite/store.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** Why PostgreSQL cannot run here (null: it can); throws where it is required. */
const PG_WHY = await pgUnavailableReason();
const KINDS: StoreKind[] = PG_WHY ? ['sqlite'] : ['sqlite', 'postgres'];
/** The store of the describe.each block running now; SQLite for the SQLite-only blocks. */
let kind: StoreKind = 'sqlite';

async function makeStore(): Promise<TestStore> {
  return kind === 'sqlite' ? tempSqliteStore() : tempPgStore();
}

async function queue(
  options: Parameters<typeof openQueue>[0] = {},
): Promise<{ q: Queue; store: TestStore }> {
  const store = await makeStore();
  const q = await openQueue({ store: store.url, ...options });
  cleanups.push(async () => {
    await q.close();
    await store.drop();
  });
  return { q, store };
}

const send = defineOperation({
  name: 'mail.send',
  fingerprint: (input: { to: string; body?: string }) => ({ to: input.to }),
  execute: (input, ctx) => ctx.dispatch(() => Promise.resolve({ delivered: input.to })),
});

async function until<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false>,
  ms = 10_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('which commits wait for an fsync', () => {
  it('a batch of claims alone commits without one; a batch with any other write, and everything after, with one', async () => {
    const { q } = await queue({ operations: [send] });
    const store = q.store as SqliteStore;
    // White box: the synchronous level each COMMIT runs under (2 = FULL: fsync; 1 = NORMAL: none).
    const inner = store as unknown as {
      conn(): Database.Database;
      writer: { txStatements(): { commit: { run(): unknown } } };
    };
    const commit = inner.writer.txStatements().commit;
    const levels: number[] = [];
    const run = commit.run.bind(commit);
    commit.run = () => {
      levels.push(inner.conn().pragma('synchronous', { simple: true }) as number);
      return run();
    };
    const claim = () =>
      store.attemptClaimMany({
        ownerId: 'w',
        queues: ['default'],
        operations: [send.name],
        limit: 1,
        leaseMs: 60_000,
      });
    await q.enqueue(send, { to: 'a' });
    await q.enqueue(send, { to: 'b' });
    const [claimed] = await claim();
    // A claim and an enqueue in one turn of the event loop share one batch.
    await Promise.all([claim(), q.enqueue(send, { to: 'c' })]);
    await store.attemptDispatchMany({ leases: [claimed!.attempt] });
    expect(levels).toEqual([2, 2, 1, 2, 2]);
    expect(inner.conn().pragma('synchronous', { simple: true })).toBe(2);
  });
});

describe('store errors are typed', () => {
  const dirs: string[] = [];
  afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));
  const dir = () => {
    const d = mkdtempSync(join(tmpdir(), 'reckon-bad-'));
    dirs.push(d);
    return d;
  };

  it('a corrupted file', async () => {
    const path = join(dir(), 'bad.db');
    writeFileSync(path, 'this is not a database, just some text that is long enough'.repeat(100));
    await expect(openQueue({ store: `sqlite:${path}` })).rejects.toBeInstanceOf(StoreCorrupt);
  });

  it('a database whose pages were damaged after it was written', async () => {
    const path = join(dir(), 'damaged.db');
    const q = await openQueue({ store: `sqlite:${path}` });
    for (let i = 0; i < 200; i++) await q.enqueue(send, { to: `u${i}@x`, body: 'x'.repeat(200) });
    await q.close();
    const db = new Database(path);
    db.pragma('wal_checkpoint(TRUNCATE)');
    db.close();
    const { openSync, writeSync, closeSync } = await import('node:fs');
    const fd = openSync(path, 'r+');
    writeSync(fd, Buffer.alloc(4096 * 3, 0xab), 0, 4096 * 3, 4096 * 2);
    closeSync(fd);
    await expect(openQueue({ store: `sqlite:${path}` })).rejects.toBeInstanceOf(StoreCorrupt);
  });

  it('a read-only file', async (ctx) => {
    const d = dir();
    const path = join(d, 'ro.db');
    const q = await openQueue({ store: `sqlite:${path}` });
    await q.close();
    chmodSync(path, 0o444);
    chmodSync(d, 0o555);
    try {
      // root ignores file modes: open it as an unprivileged user instead.
      const asRoot = process.getuid?.() === 0;
      if (asRoot) {
        try {
          execFileSync('runuser', [
            '-u',
            'nobody',
            '--',
            'test',
            '-r',
            join(process.cwd(), 'node_modules/tsx/package.json'),
          ]);
        } catch {
          const why =
            'running as root, and user nobody cannot read this checkout to try the read-only file as non-root';
          // Where every suite must run (CI), a skip would hide that this was never tried.
          if (PG_REQUIRED) throw new Error(`${why} (CI=true or RECKON_REQUIRE_PG=1: no skipping)`);
          ctx.skip(why);
        }
      }
      const cmd = asRoot ? 'runuser' : process.execPath;
      const args = ['--import', 'tsx', 'test/fixtures/open-store.ts'];
      const out = execFileSync(
        cmd,
        asRoot ? ['-u', 'nobody', '--', process.execPath, ...args] : args,
        {
          env: {
            ...process.env,
            STORE_URL: `sqlite:${path}`,
            TSX_TSCONFIG_PATH: 'tsconfig.json',
            HOME: tmpdir(),
          },
          encoding: 'utf8',
        },
      );
      expect(JSON.parse(out)).toMatchObject({
        ok: false,
        name: 'StoreReadOnly',
        code: 'STORE_READ_ONLY',
      });
    } finally {
      chmodSync(d, 0o755);
    }
  });

  it('a version 1 database is migrated in place: the jobs survive, the indexes are the new ones', async () => {
    const path = join(dir(), 'v1.db');
    const q = await openQueue({ store: `sqlite:${path}`, operations: [send] });
    const job = await q.enqueue(send, { to: 'a@example.com' });
    await q.close();
    // Back to version 1 as an older reckon left it: jobs_state present, jobs_review absent.
    const db = new Database(path);
    db.exec(`DROP INDEX jobs_review; CREATE INDEX jobs_state ON jobs (state, queue);
      DELETE FROM reckon_migrations WHERE version > 1;`);
    db.close();
    const again = await openQueue({ store: `sqlite:${path}` });
    expect(await again.store.schemaVersion()).toBe(LATEST_SCHEMA_VERSION);
    expect((await again.store.jobGet({ id: job.id }))?.job.state).toBe('QUEUED');
    await again.close();
    const check = new Database(path, { readonly: true });
    const indexes = check
      .prepare(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'`)
      .all()
      .map((r) => (r as { name: string }).name);
    check.close();
    expect(indexes).toContain('jobs_review');
    expect(indexes).not.toContain('jobs_state');
  });

  it('a version 2 database is migrated in place: the state checks are the same constraints, written so that no row write builds a table', async () => {
    const path = join(dir(), 'v2.db');
    // The schema as release 2 left it, with a job in it.
    const old = new Database(path);
    old.pragma('journal_mode = WAL');
    old.exec(
      `CREATE TABLE reckon_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
    );
    for (const m of MIGRATIONS.filter((m) => m.version <= 2)) {
      old.exec(m.sql);
      old.prepare('INSERT INTO reckon_migrations VALUES (?, ?, 0)').run(m.version, m.name);
    }
    const ephemeral = (db: Database.Database, sql: string) =>
      (
        db.prepare(`EXPLAIN ${sql}`).all(
          ...sql
            .split('?')
            .slice(1)
            .map(() => null),
        ) as { opcode: string }[]
      ).some((o) => o.opcode === 'OpenEphemeral');
    const setState = `UPDATE jobs SET state = ?, updated_at = ? WHERE id = ?`;
    const setAttempt = `UPDATE attempts SET state = ?, resolution = ? WHERE job_id = ? AND attempt_no = ?`;
    expect(ephemeral(old, setState)).toBe(true);
    expect(ephemeral(old, setAttempt)).toBe(true);
    old.close();
    const q1 = await openQueue({ store: `sqlite:${path}`, operations: [send] });
    const job = await q1.enqueue(send, { to: 'a@example.com' });
    expect(await q1.store.schemaVersion()).toBe(LATEST_SCHEMA_VERSION);
    await q1.close();
    const q = await openQueue({ store: `sqlite:${path}`, operations: [send] });
    cleanups.push(() => q.close());
    const w = q.worker({ operations: [send], pollIntervalMs: 10 });
    await w.start();
    await until('the job to succeed', async () => (await q.job(job.id))?.job.state === 'SUCCEEDED');
    await w.stop();
    const db = new Database(path);
    try {
      expect(ephemeral(db, setState)).toBe(false);
      expect(ephemeral(db, setAttempt)).toBe(false);
      // Still enforced: an unknown state or resolution is refused, NULL resolution allowed.
      expect(() => db.prepare(setState).run('DONE', 0, job.id)).toThrow(/CHECK constraint failed/);
      expect(() => db.prepare(setAttempt).run('DONE', null, job.id, 1)).toThrow(
        /CHECK constraint failed/,
      );
      expect(() => db.prepare(setAttempt).run('UNKNOWN', 'maybe', job.id, 1)).toThrow(
        /CHECK constraint failed/,
      );
      expect(db.prepare(setState).run('CANCELLED', 0, job.id).changes).toBe(1);
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    } finally {
      db.close();
    }
  });

  it('migration 3 leaves a state check it did not write (a table edited by hand) as it is, and rewrites the others', async () => {
    const path = join(dir(), 'edited.db');
    const old = new Database(path);
    old.exec(
      `CREATE TABLE reckon_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
    );
    for (const m of MIGRATIONS.filter((m) => m.version <= 2)) {
      old.exec(m.sql);
      old.prepare('INSERT INTO reckon_migrations VALUES (?, ?, 0)').run(m.version, m.name);
    }
    // An operator's own constraint on jobs.state, in place of reckon's.
    const mine = `CHECK (length(state) > 0 AND state IN ('QUEUED','LEASED','UNKNOWN','NEEDS_REVIEW','SUCCEEDED','FAILED','CANCELLED'))`;
    const version = old.pragma('schema_version', { simple: true }) as number;
    old.unsafeMode(true);
    old.pragma('writable_schema = ON');
    old
      .prepare(
        `UPDATE sqlite_schema SET sql = replace(sql, ?, ?) WHERE type = 'table' AND name = 'jobs'`,
      )
      .run(
        `CHECK (state IN ('QUEUED','LEASED','UNKNOWN','NEEDS_REVIEW','SUCCEEDED','FAILED','CANCELLED'))`,
        mine,
      );
    old.pragma(`schema_version = ${version + 1}`);
    old.pragma('writable_schema = OFF');
    old.close();
    const q = await openQueue({ store: `sqlite:${path}`, operations: [send] });
    cleanups.push(() => q.close());
    expect(await q.store.schemaVersion()).toBe(LATEST_SCHEMA_VERSION);
    await q.enqueue(send, { to: 'a@example.com' });
    const check = new Database(path, { readonly: true });
    try {
      const sql = (table: string) =>
        (
          check.prepare(`SELECT sql FROM sqlite_schema WHERE name = ?`).get(table) as {
            sql: string;
          }
        ).sql;
      expect(sql('jobs')).toContain(mine);
      expect(sql('attempts')).toContain(`CHECK (state = 'LEASED' OR state = 'SUCCEEDED'`);
      expect(sql('attempts')).not.toContain('state IN (');
    } finally {
      check.close();
    }
  });

  it('migration 13 lets attempts leave the job copies NULL, and refuses a table edited by hand it cannot rewrite', async () => {
    const build = (path: string, edit?: [string, string]) => {
      const old = new Database(path);
      old.exec(
        `CREATE TABLE reckon_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
      );
      for (const m of MIGRATIONS.filter((m) => m.version <= 12)) {
        for (const c of m.columns ?? [])
          old.exec(`ALTER TABLE ${c.table} ADD COLUMN ${c.column} ${c.type}`);
        old.exec(m.sql);
        if (m.rewrites) rewriteTables(old, m.rewrites);
        old.prepare('INSERT INTO reckon_migrations VALUES (?, ?, 0)').run(m.version, m.name);
      }
      if (edit) rewriteTables(old, [{ table: 'attempts', from: edit[0], to: edit[1] }]);
      old.close();
    };
    const notNull = (path: string) => {
      const db = new Database(path, { readonly: true });
      try {
        return db
          .prepare(
            `SELECT name, "notnull" FROM pragma_table_info('attempts')
             WHERE name IN ('request_key', 'request_fingerprint') ORDER BY name`,
          )
          .all();
      } finally {
        db.close();
      }
    };
    const plain = join(dir(), 'plain.db');
    build(plain);
    expect(notNull(plain)).toEqual([
      { name: 'request_fingerprint', notnull: 1 },
      { name: 'request_key', notnull: 1 },
    ]);
    const q = await openQueue({ store: `sqlite:${plain}`, operations: [send] });
    cleanups.push(() => q.close());
    expect(await q.store.schemaVersion()).toBe(LATEST_SCHEMA_VERSION);
    expect(notNull(plain)).toEqual([
      { name: 'request_fingerprint', notnull: 0 },
      { name: 'request_key', notnull: 0 },
    ]);
    // An operator's own spelling of the column: neither the old text nor the new is there.
    const edited = join(dir(), 'edited13.db');
    build(edited, ['request_key              TEXT NOT NULL', 'request_key TEXT NOT NULL']);
    await expect(openQueue({ store: `sqlite:${edited}`, operations: [send] })).rejects.toThrow(
      /has neither/,
    );
    expect(notNull(edited)).toEqual([
      { name: 'request_fingerprint', notnull: 1 },
      { name: 'request_key', notnull: 1 },
    ]);
  });

  it('a schema rewrite whose new text does not parse is refused before it is written: the migration rolls back, the file stays readable', () => {
    const path = join(dir(), 'rewrite.db');
    const db = new Database(path);
    db.exec(
      `CREATE TABLE t (id TEXT PRIMARY KEY, state TEXT NOT NULL CHECK (state IN ('A','B','C'))) STRICT; INSERT INTO t VALUES ('x', 'A')`,
    );
    const from = `CHECK (state IN ('A','B','C'))`;
    expect(() =>
      db.transaction(() =>
        rewriteTables(db, [{ table: 't', from, to: `CHECK (state = 'A' OR OR)` }]),
      )(),
    ).toThrow(/new text of table t does not parse/);
    db.close();
    const again = new Database(path);
    try {
      expect(again.pragma('quick_check', { simple: true })).toBe('ok');
      expect(again.prepare('SELECT state FROM t').all()).toEqual([{ state: 'A' }]);
      expect(
        (again.prepare(`SELECT sql FROM sqlite_schema WHERE name = 't'`).get() as { sql: string })
          .sql,
      ).toContain(from);
      // A good one applies, and is enforced by a connection opened afterwards.
      again.transaction(() =>
        rewriteTables(again, [{ table: 't', from, to: `CHECK (state = 'A' OR state = 'B')` }]),
      )();
    } finally {
      again.close();
    }
    const third = new Database(path);
    try {
      expect(() => third.prepare(`INSERT INTO t VALUES ('y', 'C')`).run()).toThrow(
        /CHECK constraint failed/,
      );
    } finally {
      third.close();
    }
  });

  it('a write lock held by another process: the event loop runs on while the write waits, then it lands or fails as StoreUnavailable', async () => {
    const path = join(dir(), 'locked.db');
    const q = await openQueue({
      store: new SqliteStore({ path, busyTimeoutMs: 400 }),
      operations: [send],
    });
    try {
      const other = new Database(path);
      other.exec('BEGIN IMMEDIATE');
      let ticks = 0;
      let last = performance.now();
      let longestStall = 0;
      const ticker = setInterval(() => {
        ticks++;
        longestStall = Math.max(longestStall, performance.now() - last);
        last = performance.now();
      }, 5);
      // Held past the busy timeout: the enqueue fails, typed, and nothing froze meanwhile.
      const t0 = performance.now();
      await expect(q.enqueue(send, { to: 'a@example.com' })).rejects.toBeInstanceOf(
        StoreUnavailable,
      );
      expect(performance.now() - t0).toBeGreaterThanOrEqual(390);
      expect(ticks).toBeGreaterThan(20);
      // Not even the first try sleeps in SQLite's busy handler.
      expect(longestStall).toBeLessThan(150);
      // Released within the timeout: the waiting enqueue lands.
      const pending = q.enqueue(send, { to: 'b@example.com' });
      setTimeout(() => other.exec('COMMIT'), 100);
      const job = await pending;
      clearInterval(ticker);
      other.close();
      expect((await q.store.jobGet({ id: job.id }))?.job.state).toBe('QUEUED');
    } finally {
      await q.close();
    }
  });

  it('a database from a newer schema version', async () => {
    const path = join(dir(), 'new.db');
    const q = await openQueue({ store: `sqlite:${path}` });
    await q.close();
    const db = new Database(path);
    db.prepare('INSERT INTO reckon_migrations (version, name, applied_at) VALUES (999, ?, 0)').run(
      'from the future',
    );
    db.close();
    await expect(openQueue({ store: `sqlite:${path}` })).rejects.toBeInstanceOf(SchemaTooNew);
    await expect(openQueue({ store: `sqlite:${path}` })).rejects.toThrow(
      new RegExp(
        `schema version 999, newer than this reckon supports \\(${LATEST_SCHEMA_VERSION}\\)`,
      ),
    );
  });
});

describe('evidence trail (invariant 8)', () => {
  it('events cannot be updated or deleted', async () => {
    const { q, store } = await queue();
    await q.enqueue(send, { to: 'x' }, { key: 'k' });
    await q.enqueue(send, { to: 'x' }, { key: 'k' }); // a dedup: an event row
    const db = new Database(store.url.slice('sqlite:'.length));
    try {
      expect(() => db.prepare("UPDATE events SET kind = 'forged'").run()).toThrow(/append-only/);
      expect(() => db.prepare('DELETE FROM events').run()).toThrow(/append-only/);
      // The enqueued step is a column of the job (invariant 8): as write-once as an event.
      expect(() => db.prepare("UPDATE jobs SET enqueue_actor = 'forged'").run()).toThrow(
        /write-once/,
      );
    } finally {
      db.close();
    }
  });
});

if (PG_WHY)
  describe('the queue API on postgres', () => {
    it.skip(`skipped: ${PG_WHY}`, () => undefined);
  });

describe.each(KINDS)('on %s', (k) => {
  beforeEach(() => {
    kind = k;
  });
  afterEach(() => {
    kind = 'sqlite';
  });

  describe('delivery (invariant 1)', () => {
    it('every job whose enqueue resolved survives a SIGKILL of the enqueuing process', async () => {
      const store = await makeStore();
      cleanups.push(() => store.drop());
      const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/enqueue-loop.ts'], {
        env: { ...process.env, STORE_URL: store.url },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const acknowledged: string[] = [];
      let buffer = '';
      child.stdout.on('data', (chunk: Buffer) => {
        buffer += chunk.toString();
        const lines = buffer.split('\n');
        buffer = lines.pop()!;
        for (const line of lines) if (line !== 'ready') acknowledged.push(line);
      });
      await until(
        '200 acknowledged enqueues',
        () => Promise.resolve(acknowledged.length >= 200),
        30_000,
      );
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      const q = await openQueue({ store: store.url });
      cleanups.push(() => q.close());
      for (const id of acknowledged) expect((await q.job(id))?.job.state, id).toBe('QUEUED');
    });
  });

  describe('request-key dedup (invariant 9)', () => {
    it('returns the existing job for the same key and fingerprint, and records the decision', async () => {
      const { q } = await queue();
      const a = await q.enqueue(
        send,
        { to: 'ann@example.com', body: 'v1' },
        { key: 'welcome:ann' },
      );
      // body is not part of the fingerprint: same request
      const b = await q.enqueue(
        send,
        { to: 'ann@example.com', body: 'v2' },
        { key: 'welcome:ann' },
      );
      expect(b.id).toBe(a.id);
      expect(b.deduplicated).toBe(true);
      expect(a.deduplicated).toBe(false);
      const detail = await q.job(a.id);
      expect(detail!.events.map((e) => e.kind)).toEqual(['enqueued', 'enqueue-deduplicated']);
      expect(detail!.job.input).toEqual({ to: 'ann@example.com', body: 'v1' });
    });

    it('refuses another fingerprint under the same key and changes nothing, for the whole batch', async () => {
      const { q } = await queue();
      await q.enqueue(send, { to: 'ann@example.com' }, { key: 'k1' });
      await expect(q.enqueue(send, { to: 'bob@example.com' }, { key: 'k1' })).rejects.toThrow(
        RequestKeyConflict,
      );
      await expect(
        q.enqueueMany(send, [
          { input: { to: 'carl@example.com' }, key: 'k2' },
          { input: { to: 'bob@example.com' }, key: 'k1' },
        ]),
      ).rejects.toBeInstanceOf(RequestKeyConflict);
      const jobs = await q.jobs();
      expect(jobs.map((j) => j.requestKey)).toEqual(['k1']);
      expect(jobs[0]!.input).toEqual({ to: 'ann@example.com' });
    });

    it('derives the key from runId:stepId, and from the job id when none is given', async () => {
      const { q } = await queue();
      const step = await q.enqueue(send, { to: 'a@x' }, { runId: 'run-7', stepId: 'submit' });
      expect(step.requestKey).toBe('run-7:submit');
      const plain = await q.enqueue(send, { to: 'a@x' });
      expect(plain.requestKey).toBe(`job:${plain.id}`);
    });
  });

  describe('bad input never corrupts (invariant 10)', () => {
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    it.each([
      ['a function', { f: () => 1 }, InvalidInput],
      ['a cycle', cycle, InvalidInput],
      ['a BigInt', { amount: 10n }, InvalidInput],
      ['undefined at the top', undefined, InvalidInput],
    ])('rejects a payload with %s, writing nothing', async (_name, input, type) => {
      const { q } = await queue();
      await expect(q.enqueue(send, input as never)).rejects.toBeInstanceOf(type);
      expect(await q.jobs()).toEqual([]);
    });

    it('rejects a payload over the limit (default 1 MiB, configurable)', async () => {
      const { q } = await queue();
      const big = { to: 'x', body: 'a'.repeat(1024 * 1024) };
      await expect(q.enqueue(send, big)).rejects.toBeInstanceOf(PayloadTooLarge);
      const { q: small } = await queue({ payloadBytesMax: 100 });
      await expect(small.enqueue(send, { to: 'x', body: 'a'.repeat(200) })).rejects.toThrow(
        /over the limit of 100 bytes/,
      );
      await small.enqueue(send, { to: 'x' });
      expect(await q.jobs()).toEqual([]);
    });

    it('rejects an unknown operation by name', async () => {
      const { q } = await queue({ operations: [send] });
      await expect(q.enqueue('mail.sned', { to: 'x' })).rejects.toThrow(UnknownOperation);
      await expect(q.enqueue('mail.sned', { to: 'x' })).rejects.toThrow(/known: mail\.send/);
      await q.enqueue('mail.send', { to: 'x' });
    });

    it.each([
      ['an empty key', { key: '' }, /key is empty/],
      ['an over-long key', { key: 'k'.repeat(513) }, /over the limit of 512/],
      ['a key with control characters', { key: 'a\nb' }, /control characters/],
      ['both key and runId', { key: 'a', runId: 'r', stepId: 's' }, /either key or runId/],
      ['an empty stepId', { runId: 'r', stepId: '' }, /stepId is empty/],
      ['a bad queue name', { queue: 'no spaces' }, /queue "no spaces" is invalid/],
      ['a fractional priority', { priority: 1.5 }, /priority/],
    ])('rejects %s', async (_name, options, message) => {
      const { q } = await queue();
      await expect(q.enqueue(send, { to: 'x' }, options)).rejects.toThrow(message);
      expect(await q.jobs()).toEqual([]);
    });

    it('rejects an input the operation’s validate refuses', async () => {
      const strict = defineOperation({
        name: 'strict',
        validate: (input: unknown) => {
          if (typeof (input as { n?: unknown }).n !== 'number')
            throw new Error('n must be a number');
          return input as { n: number };
        },
        execute: () => Promise.resolve(null),
      });
      const { q } = await queue();
      await expect(q.enqueue(strict, { n: 'one' } as never)).rejects.toThrow(
        /validate: n must be a number/,
      );
    });
  });

  describe('outcomes', () => {
    const fast = {
      concurrency: 4,
      leaseMs: 2_000,
      pollIntervalMs: 10,
      reclaimIntervalMs: 50,
      reconcileIntervalMs: 50,
    };

    it('a definite failure is FAILED, and not retried unless retryable', async () => {
      let calls = 0;
      const charge = defineOperation({
        name: 'card.charge',
        execute: (_input: { cents: number }, ctx) =>
          ctx.dispatch(() => {
            calls++;
            return Promise.reject(
              new DefiniteFailure('card declined', {
                retryable: false,
                details: { code: 'declined' },
              }),
            );
          }),
      });
      const { q } = await queue();
      const job = await q.enqueue(charge, { cents: 100 });
      const w = q.worker({ operations: [charge], ...fast });
      const failed = new Promise((r) => w.once('failed', r));
      await w.start();
      await failed;
      await w.stop();
      const detail = (await q.job(job.id))!;
      expect(detail.job.state).toBe('FAILED');
      expect(detail.job.error).toMatchObject({
        message: 'card declined',
        details: { code: 'declined' },
      });
      expect(detail.attempts.map((a) => a.state)).toEqual(['FAILED']);
      expect(calls).toBe(1);
    });

    it('the attempt timeout aborts ctx.signal (read before or after it), and an execute that ignores it is given up two seconds later as UNKNOWN', async () => {
      const seen: Record<string, { aborted: boolean; reason: unknown; at: number }> = {};
      const started: Record<string, number> = {};
      const slow = defineOperation({
        name: 'browser.submit',
        timeoutMs: 300,
        execute: (input: { mode: 'listens' | 'late-reader' | 'ignores' }, ctx) => {
          // The timeout counts from the attempt's start, before the marker's write.
          started[input.mode] = performance.now();
          return ctx.dispatch(async () => {
            const record = () =>
              (seen[input.mode] = {
                aborted: ctx.signal.aborted,
                reason: ctx.signal.reason,
                at: performance.now() - started[input.mode]!,
              });
            if (input.mode === 'listens') {
              // Reads the signal at once and settles when it aborts.
              await new Promise((_, reject) =>
                ctx.signal.addEventListener('abort', () => {
                  record();
                  reject(ctx.signal.reason as Error);
                }),
              );
            }
            if (input.mode === 'late-reader') {
              // First reads ctx.signal after the timeout: it is already aborted, with the reason.
              await new Promise((r) => setTimeout(r, 600));
              record();
              throw ctx.signal.reason as Error;
            }
            // Never settles and never looks at the signal.
            return new Promise(() => undefined);
          });
        },
      });
      const { q } = await queue();
      const jobs = await Promise.all(
        (['listens', 'late-reader', 'ignores'] as const).map((mode) => q.enqueue(slow, { mode })),
      );
      const w = q.worker({ operations: [slow], ...fast, leaseMs: 10_000 });
      const ended: Record<string, number> = {};
      w.on('review', (e: { input: { mode: string } }) => {
        ended[e.input.mode] = performance.now() - started[e.input.mode]!;
      });
      await w.start();
      await until('three attempts to end', () => Promise.resolve(Object.keys(ended).length === 3));
      await w.stop();
      for (const mode of ['listens', 'late-reader'] as const) {
        expect(seen[mode]).toMatchObject({ aborted: true, reason: { code: 'ATTEMPT_TIMEOUT' } });
      }
      expect(seen.listens!.at).toBeGreaterThanOrEqual(290);
      expect(seen.listens!.at).toBeLessThan(1_500);
      expect(ended.listens).toBeLessThan(1_500);
      // The one that ignores the signal: given up at the timeout plus two seconds, not before.
      expect(ended.ignores).toBeGreaterThanOrEqual(2_250);
      expect(ended.ignores).toBeLessThan(4_000);
      for (const job of jobs) {
        const detail = (await q.job(job.id))!;
        expect(detail.job.state).toBe('NEEDS_REVIEW');
        expect(detail.attempts.map((a) => [a.state, a.reason])).toEqual([
          ['UNKNOWN', 'timeout-after-dispatch'],
        ]);
      }
    });

    it('a plain error after dispatch is UNKNOWN, never retried; with no recovery path it waits for review', async () => {
      let calls = 0;
      const post = defineOperation({
        name: 'form.post',
        execute: (_input: object, ctx) =>
          ctx.dispatch(() => {
            calls++;
            return Promise.reject(new Error('socket hang up'));
          }),
      });
      const { q } = await queue();
      const job = await q.enqueue(post, {});
      const w = q.worker({ operations: [post], ...fast });
      const review = new Promise((r) => w.once('review', r));
      await w.start();
      await review;
      await w.stop();
      const detail = (await q.job(job.id))!;
      expect(detail.job.state).toBe('NEEDS_REVIEW');
      expect(detail.attempts).toHaveLength(1);
      expect(detail.attempts[0]).toMatchObject({
        state: 'UNKNOWN',
        reason: 'no-definitive-answer',
      });
      expect(detail.attempts[0]!.dispatchedAt).not.toBeNull();
      expect(detail.events.at(-1)).toMatchObject({
        kind: 'review',
        fromState: 'UNKNOWN',
        toState: 'NEEDS_REVIEW',
      });
      expect(calls).toBe(1);

      const listed = await q.review.list();
      expect(listed.map((d) => d.job.id)).toEqual([job.id]);
      await expect(q.review.resolve(job.id, { as: 'succeeded', actor: '' })).rejects.toThrow(
        /needs an actor/,
      );
      const resolved = await q.review.resolve(job.id, {
        as: 'succeeded',
        actor: 'dana',
        note: 'form visible in the CRM',
      });
      expect(resolved.state).toBe('SUCCEEDED');
      const after = (await q.job(job.id))!;
      expect(after.attempts[0]).toMatchObject({
        resolution: 'succeeded',
        resolutionSource: 'operator:dana',
        resolutionEvidence: { note: 'form visible in the CRM' },
      });
      expect(after.events.at(-1)).toMatchObject({
        kind: 'resolved',
        actor: 'operator:dana',
        detail: { as: 'succeeded', note: 'form visible in the CRM' },
      });
      await expect(
        q.review.resolve(job.id, { as: 'failed', actor: 'dana' }),
      ).rejects.toBeInstanceOf(JobStateConflict);
      expect(calls).toBe(1);
    });

    it('connection refused is provably not sent: FAILED_BEFORE_SEND and retried', async () => {
      const closed = await new Promise<number>((resolve) => {
        const srv = createServer();
        srv.listen(0, '127.0.0.1', () => {
          const port = (srv.address() as { port: number }).port;
          srv.close(() => resolve(port));
        });
      });
      const call = defineOperation({
        name: 'api.call',
        retry: { maxAttempts: 2, backoff: { initialMs: 10, factor: 1, maxMs: 10 } },
        execute: (_input: object, ctx) =>
          ctx.dispatch(() => fetch(`http://127.0.0.1:${closed}/`).then((r) => r.status)),
      });
      const { q } = await queue();
      const job = await q.enqueue(call, {});
      const w = q.worker({ operations: [call], ...fast });
      const failed = new Promise((r) => w.once('failed', r));
      await w.start();
      await failed;
      await w.stop();
      const detail = (await q.job(job.id))!;
      expect(detail.job.state).toBe('FAILED');
      expect(detail.attempts.map((a) => a.state)).toEqual([
        'FAILED_BEFORE_SEND',
        'FAILED_BEFORE_SEND',
      ]);
      expect(detail.attempts[0]!.reason).toBe('not-sent: ECONNREFUSED');
    });

    it('a throw before dispatch is FAILED_BEFORE_SEND and the retry uses the same request key', async () => {
      const keys: string[] = [];
      let n = 0;
      const flaky = defineOperation({
        name: 'flaky.build',
        retry: { maxAttempts: 3, backoff: { initialMs: 5, factor: 1, maxMs: 5 } },
        execute: (_input: object, ctx) => {
          if (++n === 1) throw new Error('template missing');
          return ctx.dispatch(() => {
            keys.push(ctx.requestKey);
            return Promise.resolve('ok');
          });
        },
      });
      const { q } = await queue();
      const job = await q.enqueue(flaky, {}, { key: 'stable-key' });
      const w = q.worker({ operations: [flaky], ...fast });
      const ok = new Promise((r) => w.once('succeeded', r));
      await w.start();
      await ok;
      await w.stop();
      const detail = (await q.job(job.id))!;
      expect(detail.attempts.map((a) => [a.state, a.requestKey])).toEqual([
        ['FAILED_BEFORE_SEND', 'stable-key'],
        ['SUCCEEDED', 'stable-key'],
      ]);
      expect(detail.attempts[0]!.reason).toMatch(/threw-before-dispatch: template missing/);
      expect(keys).toEqual(['stable-key']);
    });

    it('an attempt that outlives its timeout after dispatch is UNKNOWN', async () => {
      const slow = defineOperation({
        name: 'slow.call',
        timeoutMs: 100,
        execute: (_input: object, ctx) =>
          ctx.dispatch(
            () =>
              new Promise((_, reject) =>
                ctx.signal.addEventListener('abort', () => reject(new Error('aborted'))),
              ),
          ),
      });
      const { q } = await queue();
      const job = await q.enqueue(slow, {});
      const w = q.worker({ operations: [slow], ...fast, recover: false });
      const unknown = new Promise((r) => w.once('unknown', r));
      await w.start();
      await unknown;
      await w.stop();
      expect((await q.job(job.id))!.attempts[0]).toMatchObject({ state: 'UNKNOWN' });
    });

    it('calling dispatch twice in one attempt is refused', async () => {
      let effects = 0;
      const twice = defineOperation({
        name: 'twice',
        retry: { maxAttempts: 1 },
        execute: async (_input: object, ctx) => {
          await ctx.dispatch(() => Promise.resolve(effects++));
          return ctx.dispatch(() => Promise.resolve(effects++));
        },
      });
      const { q } = await queue();
      await q.enqueue(twice, {});
      const w = q.worker({ operations: [twice], ...fast, recover: false });
      const settled = new Promise(
        (r) => (w.once('unknown', r), w.once('failed', r), w.once('succeeded', r)),
      );
      await w.start();
      await settled;
      await w.stop();
      expect(effects).toBe(1);
    });
  });

  describe('cancel', () => {
    it('cancels a queued job, and refuses once its request was dispatched', async () => {
      const { q } = await queue();
      const job = await q.enqueue(send, { to: 'x' }, { delayMs: 60_000 });
      expect((await q.cancel(job.id, { actor: 'ops', reason: 'customer asked' })).state).toBe(
        'CANCELLED',
      );
      await expect(q.cancel(job.id)).rejects.toBeInstanceOf(JobStateConflict);

      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const held = defineOperation({
        name: 'held',
        execute: (_i: object, ctx) => ctx.dispatch(() => gate),
      });
      const second = await q.enqueue(held, {});
      const w = q.worker({ operations: [held], pollIntervalMs: 10 });
      await w.start();
      await until('dispatch', async () => (await q.job(second.id))!.attempts[0]?.dispatchedAt);
      await expect(q.cancel(second.id)).rejects.toThrow(/already dispatched/);
      release();
      await w.stop();
      expect((await q.job(second.id))!.job.state).toBe('SUCCEEDED');
    });
  });

  describe('claiming', () => {
    it('claims when work arrives, not each time a slot frees on a drained queue', async () => {
      const { q } = await queue({ operations: [send] });
      const store = q.store;
      let claims = 0;
      const claim = store.attemptClaimMany.bind(store);
      store.attemptClaimMany = (p) => {
        claims++;
        return claim(p);
      };
      // Polling off in effect: only the enqueues (and freed slots, if it claimed on them) wake it.
      const w = q.worker({ operations: [send], concurrency: 10, pollIntervalMs: 60_000 });
      await w.start();
      const jobs = 5;
      for (let i = 0; i < jobs; i++) {
        const done = new Promise((r) => w.once('succeeded', r));
        await q.enqueue(send, { to: `${i}@example.com` });
        await done;
      }
      await w.stop();
      // One claim at start and one per enqueue; a claim per freed slot and finished attempt would
      // make it three per job.
      expect(claims).toBeLessThanOrEqual(1 + jobs);
    });
  });

  describe('graceful stop', () => {
    it('keeps heartbeating while it drains, so a long attempt finishes under its own lease', async () => {
      let effects = 0;
      const long = defineOperation({
        name: 'long.call',
        execute: (_i: object, ctx) =>
          ctx.dispatch(async () => {
            effects++;
            await new Promise((r) => setTimeout(r, 3000));
            return 'done';
          }),
      });
      // The attempt outlasts its lease more than twice; the lease leaves a loaded CI host room
      // for a late heartbeat without the test meaning less.
      const { q } = await queue();
      const job = await q.enqueue(long, {});
      const w = q.worker({
        operations: [long],
        leaseMs: 1200,
        pollIntervalMs: 10,
        reclaimIntervalMs: 50,
        clockSkewToleranceMs: 0,
      });
      await w.start();
      await until('dispatch', async () => (await q.job(job.id))!.attempts[0]?.dispatchedAt);
      // A second worker's reclaimer would take the attempt over if the first stopped heartbeating.
      const other = q.worker({
        operations: [long],
        leaseMs: 1200,
        pollIntervalMs: 10,
        reclaimIntervalMs: 20,
        clockSkewToleranceMs: 0,
      });
      await other.start();
      await w.stop();
      await other.stop();
      const detail = (await q.job(job.id))!;
      expect(detail.job.state).toBe('SUCCEEDED');
      expect(detail.attempts.map((a) => a.state)).toEqual(['SUCCEEDED']);
      expect(effects).toBe(1);
    });

    it('with prefetch, never runs more than `concurrency` at once; claimed-ahead jobs keep their leases and run before stop() returns', async () => {
      let running = 0;
      let most = 0;
      const effects = new Map<number, number>();
      const slow = defineOperation({
        name: 'slow.call',
        execute: (input: { n: number }, ctx) =>
          ctx.dispatch(async () => {
            running++;
            most = Math.max(most, running);
            effects.set(input.n, (effects.get(input.n) ?? 0) + 1);
            await new Promise((r) => setTimeout(r, 400));
            running--;
            return input.n;
          }),
      });
      const { q } = await queue();
      await q.enqueueMany(
        slow,
        Array.from({ length: 12 }, (_, n) => ({ input: { n } })),
      );
      // Leases shorter than the wait of the last prefetched job (two turns of 400 ms): only
      // heartbeats keep them. A lease of 600 ms leaves room for a heartbeat that a loaded host
      // delays by a few hundred ms (PostgreSQL's group commit under CI load did).
      const w = q.worker({
        operations: [slow],
        concurrency: 2,
        prefetch: 4,
        leaseMs: 600,
        heartbeatIntervalMs: 100,
        pollIntervalMs: 10,
        reclaimIntervalMs: 20,
        clockSkewToleranceMs: 0,
      });
      await w.start();
      await until('the worker to hold its prefetch', () =>
        Promise.resolve(w.activeCount >= 6 && w.executingCount === 2),
      );
      expect(w.executingCount).toBeLessThanOrEqual(2);
      await w.stop();
      // stop() drained everything it had claimed: no lease left to expire, nothing retried.
      const jobs = await q.jobs({ limit: 100 });
      const succeeded = jobs.filter((j) => j.state === 'SUCCEEDED');
      expect(succeeded.length).toBeGreaterThanOrEqual(6);
      expect(jobs.filter((j) => j.state !== 'SUCCEEDED').every((j) => j.state === 'QUEUED')).toBe(
        true,
      );
      for (const j of succeeded) expect(j.attemptCount).toBe(1);
      expect(most).toBe(2);
      expect([...effects.values()].every((n) => n === 1)).toBe(true);
    });
  });
});
