/**
 * What only the PostgreSQL store does: transactional enqueue (the outbox pattern), migrations
 * from several processes at once, LISTEN/NOTIFY wake-ups, and staying correct when connections
 * die, when the server itself restarts, and when worker processes are killed at random.
 *
 * Every test makes its own database (tempPgStore) and drops it; the restart test makes its own
 * throwaway cluster, because the machine's shared server serves other test files in parallel.
 * The verdict is always the business outcome at a downstream ledger: each effect exactly once
 * (or the job in NEEDS_REVIEW), nothing lost.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  InvalidInput,
  RequestKeyConflict,
  StoreUnavailable,
  defineOperation,
  openQueue,
  type Queue,
} from '../src/index.js';
import type { Worker } from '../src/runtime/worker.js';
import { mulberry32 } from '../src/runtime/faults.js';
import { PostgresStore } from '../src/store/postgres/store.js';
import {
  LATEST_SCHEMA_VERSION,
  MIGRATIONS,
  MIGRATIONS_TABLE_SQL,
} from '../src/store/postgres/schema.js';
import type { Store } from '../src/store/store.js';
import { OK, startDownstream } from '../src/testkit/downstream.js';
import { startWorkerChild, type WorkerChild } from '../src/testkit/fleet.js';
import { downstreamOperation } from '../src/testkit/operations.js';
import {
  judge,
  judgeDetails,
  jobDetails,
  waitUntilSettled,
  type Verdict,
} from '../src/testkit/verdict.js';
import {
  PG_ADMIN_URL,
  PG_REQUIRED,
  pgUnavailableReason,
  tempPgStore,
  type TestStore,
} from './helpers/stores.js';

const run = promisify(execFile);
const pgReason = await pgUnavailableReason();
const clusterReason = await privateClusterSupport();

// ------------------------------------------------------------------ helpers

async function pgDatabase(): Promise<TestStore> {
  const t = await tempPgStore();
  onTestFinished(() => t.drop());
  return t;
}

async function queueOn(url: string | Store): Promise<Queue> {
  const q = await openQueue({ store: url });
  onTestFinished(() => q.close());
  return q;
}

async function client(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => undefined);
  await c.connect();
  onTestFinished(() => c.end().catch(() => undefined));
  return c;
}

/**
 * The schema "reckon" as release `version` left it, migrated no further; the connection's
 * search_path is left on it (for the rows a test writes as that release would).
 */
async function schemaAsOf(admin: pg.Client, version: number): Promise<void> {
  await admin.query('CREATE SCHEMA reckon; SET search_path TO reckon');
  await admin.query(MIGRATIONS_TABLE_SQL);
  for (const m of MIGRATIONS.filter((m) => m.version <= version)) {
    await admin.query(m.sql);
    await admin.query('INSERT INTO reckon_migrations (version, name) VALUES ($1, $2)', [
      m.version,
      m.name,
    ]);
  }
}

/** An operation whose side effect is a count per request key in this process: the ledger. */
function ledgerOp(ledger: Map<string, number>, o: { name?: string; sendMs?: number } = {}) {
  return defineOperation<{ n: number }, { ok: true }>({
    name: o.name ?? 'ledger.effect',
    lookup: (requestKey) =>
      Promise.resolve(
        ledger.has(requestKey)
          ? { found: true, outcome: 'succeeded', result: { ok: true } }
          : { found: false },
      ),
    execute: (_input, ctx) =>
      ctx.dispatch(async () => {
        if (o.sendMs) await sleep(o.sendMs);
        ledger.set(ctx.requestKey, (ledger.get(ctx.requestKey) ?? 0) + 1);
        return { ok: true as const };
      }),
    timeoutMs: 1_000,
    reconcile: { graceMs: 100, lookupBackoffMs: 100, lookupBackoffMaxMs: 500 },
    retry: { maxAttempts: 20, backoff: { initialMs: 20, factor: 2, maxMs: 200 } },
  });
}

function ledgerOf(ledger: Map<string, number>) {
  return { effectsOf: (key: string) => ledger.get(key) ?? 0 };
}

function expectEachEffectOnce(v: Verdict, jobs: number): void {
  expect(v.violations).toEqual([]);
  expect(v.unsettled).toEqual([]);
  expect(v.byState.SUCCEEDED).toBe(jobs);
}

async function until<T>(
  what: string,
  fn: () => Promise<T> | T,
  ms = 10_000,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}

function startWorker(q: Queue, options: Parameters<Queue['worker']>[0]): Promise<Worker> {
  const w = q.worker(options);
  // Loop errors while the database is away are expected here; the verdict judges the outcome.
  w.on('error', () => undefined);
  onTestFinished(() => w.stop());
  return w.start().then(() => w);
}

function dbName(url: string): string {
  return new URL(url).pathname.slice(1);
}

// ------------------------------------------------------------------ tests

describe.skipIf(pgReason !== null)(
  `PostgreSQL store${pgReason ? ` (skipped: ${pgReason})` : ''}`,
  () => {
    it('a fractional runAt is kept to the millisecond, as on SQLite', async () => {
      const t = await pgDatabase();
      const q = await queueOn(t.url);
      const op = ledgerOp(new Map());
      const at = Date.now() + 60_000.6;
      const job = await q.enqueue(op, { n: 1 }, { runAt: at });
      expect(job.runAt).toBe(Math.round(at));
      expect((await q.job(job.id))?.job.runAt).toBe(Math.round(at));
    });

    it('writes that promise durability commit with synchronous_commit on, whatever the database default', async () => {
      const t = await pgDatabase();
      const admin = await client(PG_ADMIN_URL);
      await admin.query(`ALTER DATABASE ${dbName(t.url)} SET synchronous_commit = off`);
      const plain = await client(t.url);
      const shown = await plain.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
      expect(shown.rows[0]!.synchronous_commit).toBe('off');
      const q = await queueOn(t.url);
      // Every row the store writes records the setting its session ran with.
      await plain.query(`
        CREATE TABLE public.sync_seen (tbl text, what text, setting text);
        CREATE FUNCTION public.record_sync() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE what text;
        BEGIN
          IF TG_TABLE_NAME = 'events' THEN what := NEW.kind;
          ELSE what := TG_OP || ' ' || NEW.state;
          END IF;
          INSERT INTO public.sync_seen VALUES (TG_TABLE_NAME, what, current_setting('synchronous_commit'));
          RETURN NEW;
        END $$;
        CREATE TRIGGER sync_seen AFTER INSERT OR UPDATE ON reckon.jobs FOR EACH ROW EXECUTE FUNCTION public.record_sync();
        CREATE TRIGGER sync_seen AFTER INSERT OR UPDATE ON reckon.attempts FOR EACH ROW EXECUTE FUNCTION public.record_sync();
        CREATE TRIGGER sync_seen AFTER INSERT ON reckon.events FOR EACH ROW EXECUTE FUNCTION public.record_sync();`);
      const ledger = new Map<string, number>();
      const op = ledgerOp(ledger);
      const jobs = await q.enqueueMany(
        op,
        [1, 2, 3].map((n) => ({ input: { n }, key: `k${n}` })),
      );
      await q.enqueue(op, { n: 1 }, { key: 'k1' }); // the transaction path (a dedup)
      const spare = await q.enqueue(op, { n: 9 }, { key: 'spare', delayMs: 60_000 });
      await q.cancel(spare.id);
      // The outbox path, on a session whose default is off.
      const outbox = await client(t.url);
      await outbox.query('BEGIN');
      await q.enqueue(op, { n: 4 }, { key: 'k4', transaction: outbox });
      await outbox.query('COMMIT');
      await startWorker(q, { operations: [op], pollIntervalMs: 20 });
      await until('every job done', async () => {
        const done = await Promise.all(
          [...jobs.map((j) => j.id)].map(async (id) => (await q.job(id))?.job.state),
        );
        return done.every((s) => s === 'SUCCEEDED') && ledger.get('k4') === 1;
      });
      const seen = (
        await plain.query<{ tbl: string; what: string; setting: string }>(
          'SELECT tbl, what, setting FROM public.sync_seen',
        )
      ).rows;
      // A claim alone commits without waiting for its flush (its marker, a synced write, follows).
      const claim = (r: { tbl: string; what: string }) =>
        (r.tbl === 'events' && r.what === 'leased') ||
        (r.tbl === 'jobs' && r.what === 'UPDATE LEASED') ||
        (r.tbl === 'attempts' && r.what === 'INSERT LEASED');
      const durable = seen.filter((r) => !claim(r));
      // Routine steps are columns (invariant 8): the enqueue is the job's insert, the marker the
      // LEASED attempt's update, the outcome its update to SUCCEEDED.
      for (const [tbl, what] of [
        ['jobs', 'INSERT QUEUED'],
        ['events', 'enqueue-deduplicated'],
        ['events', 'cancelled'],
        ['attempts', 'UPDATE LEASED'],
        ['attempts', 'UPDATE SUCCEEDED'],
      ])
        expect(
          durable.some((r) => r.tbl === tbl && r.what === what),
          `${tbl} ${what}`,
        ).toBe(true);
      expect(durable.filter((r) => r.setting !== 'on')).toEqual([]);
    });

    describe('fenced writes on rows another transaction moves', () => {
      it('a marker and an outcome that waited for a row lock write the rows’ new versions', async () => {
        // The marker and outcome statements lock their rows, then update them where the lock
        // found them (by ctid). A transaction that updated those rows first, and held them,
        // leaves new row versions: the waiting statements must write those, not fail or miss.
        const t = await pgDatabase();
        const q = await queueOn(t.url);
        const op = ledgerOp(new Map());
        await q.enqueueMany(
          op,
          [1, 2, 3].map((n) => ({ input: { n }, key: `k${n}` })),
        );
        const store = q.store;
        const claimed = await store.attemptClaimMany({
          ownerId: 'w1',
          queues: ['default'],
          operations: [op.name],
          limit: 3,
          leaseMs: 60_000,
        });
        expect(claimed).toHaveLength(3);
        const leases = claimed.map((c) => ({
          jobId: c.job.id,
          attemptNo: c.attempt.attemptNo,
          leaseToken: c.attempt.leaseToken,
        }));
        const other = await client(t.url);
        const otherPid = (await other.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))
          .rows[0]!.pid;
        const watcher = await client(t.url);
        // A statement of the store waits for a lock the other transaction holds.
        const blocked = async () =>
          (
            await watcher.query<{ n: number }>(
              'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))',
              [otherPid],
            )
          ).rows[0]!.n > 0;
        const moveRows = async () => {
          await other.query('BEGIN');
          // What a heartbeat does to the attempts, and a harmless write to the jobs: new
          // versions of every row, held until COMMIT.
          await other.query(
            `UPDATE reckon.attempts SET lease_expires_at = lease_expires_at + interval '1 second'
             WHERE job_id = ANY($1)`,
            [leases.map((l) => l.jobId)],
          );
          await other.query(`UPDATE reckon.jobs SET updated_at = updated_at WHERE id = ANY($1)`, [
            leases.map((l) => l.jobId),
          ]);
        };

        await moveRows();
        const marking = store.attemptDispatchMany({ leases });
        await until('the marker to wait for the locks', blocked);
        await other.query('COMMIT');
        const marks = await marking;
        expect(marks.map((m) => m.ok)).toEqual([true, true, true]);

        await moveRows();
        const finishing = store.attemptFinishMany({
          finishes: leases.map((lease) => ({
            lease,
            state: 'SUCCEEDED' as const,
            reason: null,
            resultJson: '{"ok":true}',
            error: null,
            job: { to: 'SUCCEEDED' as const },
            actor: 'w1',
          })),
        });
        await until('the outcome to wait for the locks', blocked);
        await other.query('COMMIT');
        expect(await finishing).toEqual([true, true, true]);
        for (const c of claimed) {
          const d = await q.job(c.job.id);
          expect(d?.job.state).toBe('SUCCEEDED');
          expect(d?.attempts[0]?.state).toBe('SUCCEEDED');
          expect(d?.attempts[0]?.dispatchedAt).not.toBeNull();
        }
      });
    });

    describe('an outcome racing a move of its job', () => {
      it('an outcome that waited for its job while another transaction took the job off its attempt does not apply', async () => {
        // The outcome judges its fence on the rows' latest versions, after the wait. Here the
        // other transaction does what the reclaimer does to an expired, marked lease, and
        // commits while the outcome waits.
        const t = await pgDatabase();
        const q = await queueOn(t.url);
        const op = ledgerOp(new Map());
        await q.enqueueMany(op, [{ input: { n: 1 }, key: 'raced' }]);
        const [c] = await q.store.attemptClaimMany({
          ownerId: 'w1',
          queues: ['default'],
          operations: [op.name],
          limit: 1,
          leaseMs: 60_000,
        });
        const lease = { jobId: c!.job.id, attemptNo: 1, leaseToken: c!.attempt.leaseToken };
        expect((await q.store.attemptDispatchMany({ leases: [lease] }))[0]?.ok).toBe(true);
        const other = await client(t.url);
        const otherPid = (await other.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))
          .rows[0]!.pid;
        const watcher = await client(t.url);
        await other.query('BEGIN');
        await other.query(
          `UPDATE reckon.jobs SET state = 'UNKNOWN', next_check_at = now() WHERE id = $1`,
          [lease.jobId],
        );
        await other.query(
          `UPDATE reckon.attempts SET state = 'UNKNOWN', finished_at = now(),
             reason = 'lease-expired-after-dispatch' WHERE job_id = $1`,
          [lease.jobId],
        );
        const finishing = q.store.attemptFinishMany({
          finishes: [
            {
              lease,
              state: 'SUCCEEDED',
              reason: null,
              resultJson: '{"ok":true}',
              error: null,
              job: { to: 'SUCCEEDED' },
              actor: 'w1',
            },
          ],
        });
        await until(
          'the outcome to wait for the job',
          async () =>
            (
              await watcher.query<{ n: number }>(
                'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))',
                [otherPid],
              )
            ).rows[0]!.n > 0,
        );
        await other.query('COMMIT');
        expect(await finishing).toEqual([false]);
        const d = await q.job(lease.jobId);
        expect(d?.job.state).toBe('UNKNOWN');
        expect(d?.attempts.map((a) => [a.state, a.reason, a.result])).toEqual([
          ['UNKNOWN', 'lease-expired-after-dispatch', null],
        ]);
      });
    });

    describe('transactional enqueue (outbox)', () => {
      it('a job enqueued in the caller’s transaction exists iff it commits, and then runs', async () => {
        const t = await pgDatabase();
        const q = await queueOn(t.url);
        const ledger = new Map<string, number>();
        const op = ledgerOp(ledger);
        const app = await client(t.url);
        await app.query('CREATE TABLE orders (id text PRIMARY KEY)');

        await app.query('BEGIN');
        await app.query(`INSERT INTO orders VALUES ('o1')`);
        const rolledBack = await q.enqueue(op, { n: 1 }, { key: 'order:o1', transaction: app });
        expect(rolledBack.deduplicated).toBe(false);
        // Not visible to anyone else before the commit.
        expect(await q.job(rolledBack.id)).toBeNull();
        await app.query('ROLLBACK');
        expect(await q.job(rolledBack.id)).toBeNull();
        expect(await q.jobs()).toEqual([]);

        await app.query('BEGIN');
        await app.query(`INSERT INTO orders VALUES ('o2')`);
        const [committed] = await q.enqueueMany(op, [{ input: { n: 2 }, key: 'order:o2' }], {
          transaction: app,
        });
        await app.query('COMMIT');
        expect((await q.job(committed!.id))?.job.state).toBe('QUEUED');

        await startWorker(q, { operations: [op], pollIntervalMs: 50 });
        await until(
          'the committed job to run',
          async () => (await q.job(committed!.id))?.job.state === 'SUCCEEDED',
        );
        expect([...ledger]).toEqual([['order:o2', 1]]);
      });

      it('a conflict rolls back only reckon’s part; the caller’s transaction stays usable', async () => {
        const t = await pgDatabase();
        const q = await queueOn(t.url);
        const op = ledgerOp(new Map());
        const app = await client(t.url);
        await app.query('CREATE TABLE orders (id text PRIMARY KEY)');
        await q.enqueue(op, { n: 1 }, { key: 'order:1' });

        await app.query('BEGIN');
        await app.query(`INSERT INTO orders VALUES ('a')`);
        await expect(
          q.enqueueMany(
            op,
            [
              { input: { n: 2 }, key: 'fresh' },
              { input: { n: 99 }, key: 'order:1' },
            ],
            {
              transaction: app,
            },
          ),
        ).rejects.toBeInstanceOf(RequestKeyConflict);
        await app.query(`INSERT INTO orders VALUES ('b')`);
        await app.query('COMMIT');
        expect((await app.query('SELECT id FROM orders ORDER BY id')).rows).toEqual([
          { id: 'a' },
          { id: 'b' },
        ]);
        expect((await q.jobs()).map((j) => j.requestKey)).toEqual(['order:1']);

        // Outside a transaction, or not a client at all: a clear InvalidInput, nothing written.
        await expect(
          q.enqueue(op, { n: 3 }, { key: 'k3', transaction: app }),
        ).rejects.toBeInstanceOf(InvalidInput);
        await expect(
          q.enqueue(op, { n: 3 }, { key: 'k3', transaction: 'nope' }),
        ).rejects.toBeInstanceOf(InvalidInput);
        expect(await q.jobs()).toHaveLength(1);
      });
    });

    describe('plans', () => {
      it('the hot paths never scan the journal, also with plans cached while the tables were empty', async () => {
        const t = await pgDatabase();
        // Two connections: each prepared statement runs often enough on each that PostgreSQL
        // caches a generic plan for it while the tables are nearly empty.
        const q = await queueOn(new PostgresStore({ connectionString: t.url, poolMax: 2 }));
        const ledger = new Map<string, number>();
        const op = ledgerOp(ledger);
        const settle = async (jobs: { id: string }[]) => {
          for (const j of jobs)
            await until(
              `job ${j.id} to succeed`,
              async () => (await q.job(j.id))?.job.state === 'SUCCEEDED',
              30_000,
            );
        };
        const w = await startWorker(q, { operations: [op], concurrency: 2, pollIntervalMs: 20 });
        await settle(
          await q.enqueueMany(
            op,
            Array.from({ length: 40 }, (_, n) => ({ input: { n } })),
          ),
        );
        // The journal grows by 20,000 finished jobs, each with its attempt.
        const app = await client(t.url);
        await app.query(`
          INSERT INTO reckon.jobs (id, queue, operation, input_json, request_key, request_fingerprint,
            state, priority, run_at, created_at, updated_at, finished_at, attempt_count,
            max_attempts, backoff_json, timeout_ms)
          SELECT 'old-' || g, 'default', 'ledger.effect', '{}', 'old-' || g, 'f', 'SUCCEEDED', 0,
            now(), now(), now(), now(), 1, 3, '{}', 1000
          FROM generate_series(1, 20000) g;
          INSERT INTO reckon.attempts (job_id, attempt_no, request_key, request_fingerprint, state,
            owner_id, lease_token, leased_at, lease_expires_at, dispatched_at, finished_at)
          SELECT 'old-' || g, 1, 'old-' || g, 'f', 'SUCCEEDED', 'w', 't', now(), now(), now(), now()
          FROM generate_series(1, 20000) g;`);
        // A backend reports its table statistics when it goes idle (within 10 s) or exits. The
        // baseline includes the migration's index builds (each a scan of its table): wait until
        // those are in and the counts hold still.
        const seqScans = async () => {
          let last = '';
          for (;;) {
            const r = await app.query<{ relname: string; seq_scan: string }>(
              `SELECT relname, seq_scan FROM pg_stat_user_tables
               WHERE schemaname = 'reckon' AND relname IN ('jobs', 'attempts') ORDER BY relname`,
            );
            const now = JSON.stringify(r.rows);
            if (now === last && r.rows.every((row) => Number(row.seq_scan) > 0)) return r.rows;
            last = now;
            await sleep(1_500);
          }
        };
        const before = await seqScans();
        await settle(
          await q.enqueueMany(
            op,
            Array.from({ length: 200 }, (_, n) => ({ input: { n: 100 + n } })),
          ),
        );
        await w.stop();
        // Closed, the store's connections exit, and an exiting backend reports at once.
        await q.close();
        const after = await seqScans();
        expect(after).toEqual(before);
        expect(ledger.size).toBe(240);
      }, 60_000);

      it('a claim reads the claim index only for the jobs it takes, also with stale statistics', async () => {
        const t = await pgDatabase();
        const app = await client(t.url);
        const op = ledgerOp(new Map());
        const indexReads = async () => {
          const r = await app.query<{ n: string }>(
            `SELECT idx_tup_read AS n FROM pg_stat_user_indexes
             WHERE schemaname = 'reckon' AND indexrelname = 'jobs_claim'`,
          );
          return Number(r.rows[0]!.n);
        };
        const q1 = await openQueue({ store: t.url });
        // Never analyzed: the planner believes the table holds next to nothing.
        await app.query('ALTER TABLE reckon.jobs SET (autovacuum_enabled = false)');
        for (let i = 0; i < 5; i++)
          await q1.enqueueMany(
            op,
            Array.from({ length: 1_000 }, (_, n) => ({ input: { n: i * 1_000 + n } })),
          );
        await q1.close();
        await sleep(200);
        const before = await indexReads();
        // Claims of a few jobs each, as a worker's claim loop sends them: of 10 (a statement
        // planned per call) and of 16 (a statement of its own, its generic plan cached from the
        // sixth call on, while the statistics are stale).
        const store = new PostgresStore({ connectionString: t.url, poolMax: 1 });
        await store.init();
        let claimed = 0;
        let bound = 0;
        for (let i = 0; i < 40; i++) {
          const limit = i % 2 === 0 ? 10 : 16;
          const got = await store.attemptClaimMany({
            ownerId: 'w',
            queues: ['default'],
            operations: [op.name],
            limit,
            leaseMs: 60_000,
          });
          expect(got).toHaveLength(limit);
          bound += claimed + limit;
          claimed += got.length;
        }
        // Closed, the store's connection exits, and an exiting backend reports its counts at once.
        await store.close();
        const reads = await until('the claims’ index statistics', async () => {
          const n = (await indexReads()) - before;
          return n > 0 ? n : undefined;
        });
        expect(claimed).toBe(520);
        // Each claim reads the entries it takes, and those the claims before it left dead (their
        // jobs now LEASED; the entries are marked dead only once the WAL writer has flushed
        // those asynchronous commits): at most `bound` (10,600) in all. Walking the whole index
        // to find its own ids again reads ~5,000 a claim: ~200,000.
        expect(bound).toBe(10_600);
        expect(reads).toBeLessThanOrEqual(bound + 400);
      }, 60_000);
    });

    describe('opening', () => {
      it('several processes and connections migrating one new schema at once apply each migration once', async () => {
        const t = await pgDatabase();
        const url = `${t.url}?schema=tenant_a`;
        const children = Array.from({ length: 3 }, () => {
          const p = spawn(
            process.execPath,
            ['--import', 'tsx', 'test/fixtures/pg-migrate.ts', url],
            {
              stdio: ['ignore', 'pipe', 'pipe'],
            },
          );
          let out = '';
          let err = '';
          p.stdout.on('data', (c: Buffer) => (out += c.toString()));
          p.stderr.on('data', (c: Buffer) => (err += c.toString()));
          return new Promise<{ code: number | null; out: string; err: string }>((resolve) =>
            p.once('exit', (code) => resolve({ code, out, err })),
          );
        });
        const stores = Array.from(
          { length: 6 },
          () => new PostgresStore({ connectionString: url }),
        );
        onTestFinished(() => Promise.all(stores.map((s) => s.close())).then(() => undefined));
        await Promise.all(stores.map((s) => s.init()));
        for (const c of await Promise.all(children)) {
          expect(c.err).toBe('');
          expect(c).toMatchObject({ code: 0, out: `${LATEST_SCHEMA_VERSION}\n` });
        }
        const admin = await client(t.url);
        const rows = (
          await admin.query('SELECT version FROM tenant_a.reckon_migrations ORDER BY version')
        ).rows;
        expect(rows.map((r: { version: number }) => r.version)).toEqual(
          MIGRATIONS.map((m) => m.version),
        );
        // The tables live in the named schema only.
        const where = await admin.query(
          `SELECT to_regclass('tenant_a.jobs') AS a, to_regclass('reckon.jobs') AS b`,
        );
        expect(where.rows[0]).toEqual({ a: 'tenant_a.jobs', b: null });
        expect(stores[0]!.schema).toBe('tenant_a');
      });

      it('a version 2 schema is migrated in place: its jobs and events survive, ids compare byte by byte, events are keyed by job', async () => {
        const t = await pgDatabase();
        const admin = await client(t.url);
        // The schema as release 2 left it, with a finished job and a waiting one in it.
        await schemaAsOf(admin, 2);
        await admin.query(`
          INSERT INTO jobs (id, queue, operation, input_json, request_key, request_fingerprint,
            state, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms)
          VALUES ('old-1', 'default', 'ledger.effect', '{"n":1}', 'key-1', 'f1', 'QUEUED',
            now(), now(), now(), 3, '{"initialMs":20,"factor":2,"maxMs":200}', 1000);
          INSERT INTO events (job_id, request_fingerprint, kind, to_state, actor, at)
            VALUES ('old-1', 'f1', 'enqueued', 'QUEUED', 'api', now());
          RESET search_path`);
        const ledger = new Map<string, number>();
        const op = ledgerOp(ledger);
        const q = await queueOn(t.url);
        expect(await q.store.schemaVersion()).toBe(LATEST_SCHEMA_VERSION);
        // The old job runs on the new schema, and a new one joins it.
        const fresh = await q.enqueue(op, { n: 2 }, { key: 'key-2' });
        const w = await startWorker(q, { operations: [op], pollIntervalMs: 20 });
        await until('both jobs to succeed', async () => {
          const states = await Promise.all(['old-1', fresh.id].map((id) => q.job(id)));
          return states.every((d) => d?.job.state === 'SUCCEEDED');
        });
        await w.stop();
        expect([...ledger.entries()].sort()).toEqual([
          ['key-1', 1],
          ['key-2', 1],
        ]);
        const old = await q.job('old-1');
        expect(old!.events.map((e) => e.kind)).toEqual([
          'enqueued',
          'leased',
          'dispatched',
          'attempt-succeeded',
        ]);
        const collations = await admin.query<{ col: string; collation: string | null }>(
          `SELECT c.table_name || '.' || c.column_name AS col, c.collation_name AS collation
           FROM information_schema.columns c
           WHERE c.table_schema = 'reckon' AND c.column_name IN ('id', 'job_id', 'request_key')
             AND c.table_name IN ('jobs', 'attempts', 'events')
             AND c.data_type = 'text' ORDER BY 1`,
        );
        expect(collations.rows).toEqual([
          { col: 'attempts.job_id', collation: 'C' },
          { col: 'attempts.request_key', collation: 'C' },
          { col: 'events.job_id', collation: 'C' },
          { col: 'jobs.id', collation: 'C' },
          { col: 'jobs.request_key', collation: 'C' },
        ]);
        const eventKey = await admin.query<{ def: string }>(
          `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint
           WHERE conrelid = 'reckon.events'::regclass AND contype = 'p'`,
        );
        expect(eventKey.rows).toEqual([{ def: 'PRIMARY KEY (job_id, id)' }]);
      });

      it('a lease taken before migration 15 (none recorded on its job) is still found expired and reclaimed', async () => {
        const t = await pgDatabase();
        const admin = await client(t.url);
        // The schema as migration 13 left it, with a job leased by a worker that died.
        await schemaAsOf(admin, 13);
        await admin.query(`
          INSERT INTO jobs (id, queue, operation, input_json, request_key, request_fingerprint,
            state, run_at, created_at, updated_at, attempt_count, max_attempts, backoff_json,
            timeout_ms, enqueue_actor)
          VALUES ('old-1', 'default', 'ledger.effect', '{"n":1}', 'key-1', 'f1', 'LEASED',
            now(), now(), now(), 1, 3, '{"initialMs":20,"factor":2,"maxMs":200}', 1000, 'api');
          INSERT INTO attempts (job_id, attempt_no, state, owner_id, lease_token, leased_at,
            lease_expires_at, lease_ms)
          VALUES ('old-1', 1, 'LEASED', 'dead-worker', 't1', now() - interval '1 minute',
            now() - interval '30 seconds', 30000);
          RESET search_path`);
        const ledger = new Map<string, number>();
        const q = await queueOn(t.url);
        expect(await q.store.schemaVersion()).toBe(LATEST_SCHEMA_VERSION);
        // Attempts keep their key only: the outcome and heartbeats change no indexed column.
        const indexes = await admin.query<{ name: string }>(
          `SELECT indexname AS name FROM pg_indexes
           WHERE schemaname = 'reckon' AND tablename = 'attempts' ORDER BY 1`,
        );
        expect(indexes.rows).toEqual([{ name: 'attempts_pkey' }]);
        const listed = await q.store.attemptExpiredList({ skewMs: 0, limit: 10 });
        expect(listed.map((e) => [e.job.id, e.attempt.ownerId])).toEqual([
          ['old-1', 'dead-worker'],
        ]);
        expect((await q.store.statsGet()).expiredLeases).toBe(1);
        // The reclaimer takes it (no marker: never dispatched), and it runs once.
        const w = await startWorker(q, { operations: [ledgerOp(ledger)], pollIntervalMs: 20 });
        await until('the old job to succeed', async () => {
          return (await q.job('old-1'))?.job.state === 'SUCCEEDED';
        });
        await w.stop();
        expect([...ledger.entries()]).toEqual([['key-1', 1]]);
        const old = await q.job('old-1');
        expect(old!.attempts.map((a) => [a.attemptNo, a.state])).toEqual([
          [1, 'FAILED_BEFORE_SEND'],
          [2, 'SUCCEEDED'],
        ]);
      });

      it('an unreachable server is StoreUnavailable without the password; a bad schema name is InvalidInput', async () => {
        const s = new PostgresStore({
          connectionString: 'postgres://reckon:s3cret-pw@127.0.0.1:1/reckon',
          connectTimeoutMs: 2_000,
        });
        const err = await s.init().catch((e: unknown) => e);
        expect(err).toBeInstanceOf(StoreUnavailable);
        expect((err as Error).message).toMatch(/unreachable/);
        expect((err as Error).message).not.toContain('s3cret-pw');
        expect(s.location).not.toContain('s3cret-pw');
        expect(
          () => new PostgresStore({ connectionString: PG_ADMIN_URL, schema: 'x; DROP TABLE y' }),
        ).toThrow(InvalidInput);
        expect(
          () => new PostgresStore({ connectionString: `${PG_ADMIN_URL}?schema=a`, schema: 'b' }),
        ).toThrow(InvalidInput);
      });
    });

    describe('LISTEN/NOTIFY', () => {
      it('wakes a worker polling every minute at once, from another process’s enqueue, also after its listener was cut', async () => {
        const t = await pgDatabase();
        const producer = await queueOn(t.url); // its own pool: the in-process notifier cannot help
        const consumer = await queueOn(t.url);
        const ranAt = new Map<string, number>();
        const op = defineOperation<{ n: number }, null>({
          name: 'notify.probe',
          execute: (_i, ctx) => {
            ranAt.set(ctx.requestKey, Date.now());
            return Promise.resolve(null);
          },
        });
        const admin = await client(PG_ADMIN_URL);
        const listening = `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%'`;
        await producer.enqueue(op, { n: 0 }, { key: 'n0' });
        await startWorker(consumer, { operations: [op], pollIntervalMs: 60_000, recover: false });
        // Its first poll took n0 and found nothing more: the next poll is a minute away, so only
        // a wake runs n1. (A fixed sleep here let a slow first poll find n1 itself.)
        await until('the first poll to take n0', () => ranAt.has('n0'), 4_000);
        await until(
          'the listener',
          async () => (await admin.query(listening, [dbName(t.url)])).rowCount === 1,
        );

        const t0 = Date.now();
        await producer.enqueue(op, { n: 1 }, { key: 'n1' });
        await until('the first job to run', () => ranAt.has('n1'), 4_000);
        expect(ranAt.get('n1')! - t0).toBeLessThan(1_500);

        const cut = await admin.query(`SELECT pg_terminate_backend(pid) FROM (${listening}) l`, [
          dbName(t.url),
        ]);
        expect(cut.rowCount).toBe(1);
        await until(
          'the listener to reconnect',
          async () => (await admin.query(listening, [dbName(t.url)])).rowCount === 1,
        );
        await sleep(200);

        const t1 = Date.now();
        await producer.enqueue(op, { n: 2 }, { key: 'n2' });
        await until('the second job to run', () => ranAt.has('n2'), 4_000);
        expect(ranAt.get('n2')! - t1).toBeLessThan(1_500);
      });
    });

    describe('connection loss', () => {
      it('a worker whose connections are killed over and over still does each effect exactly once', async () => {
        const t = await pgDatabase();
        const q = await queueOn(t.url);
        const ledger = new Map<string, number>();
        const op = ledgerOp(ledger, { sendMs: 3 });
        const N = 300;
        const jobs = await q.enqueueMany(
          op,
          Array.from({ length: N }, (_, i) => ({ input: { n: i }, key: `k${i}` })),
        );
        await startWorker(q, {
          operations: [op],
          concurrency: 16,
          leaseMs: 2_000,
          pollIntervalMs: 20,
          clockSkewToleranceMs: 100,
          reclaimIntervalMs: 100,
          reconcileIntervalMs: 100,
        });
        const admin = await client(PG_ADMIN_URL);
        let terminated = 0;
        for (let i = 0; i < 12 && ledger.size < N; i++) {
          await sleep(120);
          const r = await admin.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
            [dbName(t.url)],
          );
          terminated += r.rowCount ?? 0;
        }
        expect(terminated).toBeGreaterThan(0);
        await waitUntilSettled(q, { timeoutMs: 30_000 });
        const v = judgeDetails(
          await jobDetails(
            q,
            jobs.map((j) => j.id),
          ),
          ledgerOf(ledger),
        );
        expectEachEffectOnce(v, N);
        expect(ledger.size).toBe(N);
      });

      it('an outcome write that fails is retried until it lands, also when a try committed but its answer was lost', async () => {
        const t = await pgDatabase();
        const real = new PostgresStore({ connectionString: t.url });
        let failuresLeft = 3;
        let loseAnswers = 0;
        const flaky = new Proxy(real, {
          get(target, prop, receiver) {
            if (prop === 'attemptFinishMany')
              return async (p: Parameters<Store['attemptFinishMany']>[0]) => {
                if (failuresLeft > 0) {
                  failuresLeft--;
                  throw new StoreUnavailable('injected: the database is away');
                }
                const answer = await target.attemptFinishMany(p);
                if (loseAnswers > 0) {
                  loseAnswers--;
                  throw new StoreUnavailable('injected: committed, then the connection died');
                }
                return answer;
              };
            const v: unknown = Reflect.get(target, prop, receiver);
            return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
          },
        });
        const q = await queueOn(flaky);
        const ledger = new Map<string, number>();
        const op = ledgerOp(ledger);
        const w = await startWorker(q, { operations: [op], pollIntervalMs: 20, leaseMs: 5_000 });
        const seen: string[] = [];
        for (const e of ['succeeded', 'fenced', 'unknown'] as const) w.on(e, () => seen.push(e));

        const a = await q.enqueue(op, { n: 1 }, { key: 'a' });
        await until('a to succeed', async () => (await q.job(a.id))?.job.state === 'SUCCEEDED');
        loseAnswers = 1;
        const b = await q.enqueue(op, { n: 2 }, { key: 'b' });
        await until('b to succeed', async () => (await q.job(b.id))?.job.state === 'SUCCEEDED');
        await until('both announcements', () => seen.length >= 2);
        expect(seen).toEqual(['succeeded', 'succeeded']);
        for (const id of [a.id, b.id]) {
          const d = (await q.job(id))!;
          expect(d.attempts.map((x) => x.state)).toEqual(['SUCCEEDED']);
          expect(d.events.filter((e) => e.kind === 'late-evidence')).toEqual([]);
        }
        expect([...ledger]).toEqual([
          ['a', 1],
          ['b', 1],
        ]);
      });
    });

    describe('PostgreSQL restarted mid-run (a private throwaway cluster)', () => {
      // Where PostgreSQL is required (CI), it runs, and fails with the reason if it cannot.
      it.skipIf(clusterReason !== null && !PG_REQUIRED)(
        `a crash restart of the server loses nothing and duplicates nothing${clusterReason ? ` (skipped: ${clusterReason})` : ''}`,
        async () => {
          if (clusterReason) throw new Error(`cannot run the crash test: ${clusterReason}`);
          const c = await PrivateCluster.start();
          onTestFinished(() => c.destroy());
          const q = await queueOn(c.url);
          const ledger = new Map<string, number>();
          const op = ledgerOp(ledger, { sendMs: 5 });
          const N = 400;
          const jobs = await q.enqueueMany(
            op,
            Array.from({ length: N }, (_, i) => ({ input: { n: i }, key: `r${i}` })),
          );
          const w = await startWorker(q, {
            operations: [op],
            concurrency: 8,
            leaseMs: 3_000,
            pollIntervalMs: 20,
            clockSkewToleranceMs: 100,
            reclaimIntervalMs: 100,
            reconcileIntervalMs: 100,
          });
          await until('a third of the jobs to run', () => ledger.size >= N / 3, 20_000);
          await c.stop('immediate'); // a crash: no checkpoint, recovery from WAL on start
          const doneWhileDown = ledger.size;
          // Its loops (the claim loop every 20 ms) tried the stopped server, and failed.
          let failures = 0;
          w.on('error', () => void failures++);
          await until('the worker to fail against the stopped server', () => failures >= 20);
          expect(ledger.size - doneWhileDown).toBeLessThanOrEqual(8); // only what was already in flight
          await c.start();
          await waitUntilSettled(q, { timeoutMs: 40_000 });
          const v = judgeDetails(
            await jobDetails(
              q,
              jobs.map((j) => j.id),
            ),
            ledgerOf(ledger),
          );
          expectEachEffectOnce(v, N);
        },
      );
    });

    describe('many worker processes', () => {
      /** Four worker processes (run without `sabotage`, or a broken build with it), 1,500 jobs, SIGKILLs. */
      async function fleetUnderKills(sabotage?: string) {
        const t = await pgDatabase();
        // Deduplicating only what the idempotent operation declares: a lookup or none request
        // sent twice is two effects here, so a blind resend cannot hide behind the downstream.
        const downstream = await startDownstream({
          honourIdempotencyKey: (key) => key.startsWith('idempotent-'),
          // A request without dedup takes 100 ms, so kills land while some are in flight: their
          // attempts end UNKNOWN with the effect done (a blind resend is then a second effect).
          behaviour: (r) => (r.key.startsWith('none-') ? { action: 'ok', delayMs: 100 } : OK),
        });
        onTestFinished(() => downstream.close());
        const q = await queueOn(t.url);
        const seed = Number(process.env.RECKON_SEED ?? 20260312);
        const random = mulberry32(seed);
        const ids: string[] = [];
        for (const flavour of ['lookup', 'idempotent', 'none'] as const) {
          const op = downstreamOperation(flavour, { url: downstream.url });
          const count = flavour === 'none' ? 300 : 600;
          const jobs = await q.enqueueMany(
            op,
            Array.from({ length: count }, (_, i) => ({ input: { n: i }, key: `${flavour}-${i}` })),
          );
          ids.push(...jobs.map((j) => j.id));
        }
        const children: WorkerChild[] = [];
        onTestFinished(() => Promise.all(children.map((c) => c.kill())).then(() => undefined));
        const spawnChild = () => {
          const c = startWorkerChild(
            {
              storeUrl: t.url,
              downstreamUrl: downstream.url,
              concurrency: 8,
              leaseMs: 1_000,
              clockSkewToleranceMs: 100,
              reclaimIntervalMs: 100,
              reconcileIntervalMs: 100,
              pollIntervalMs: 50,
            },
            sabotage
              ? { env: { NODE_ENV: 'test', RECKON_UNSAFE_DISABLE_SAFEGUARD: sabotage } }
              : {},
          );
          children.push(c);
          return c;
        };
        let live = Array.from({ length: 4 }, spawnChild);
        await Promise.all(live.map((c) => c.ready));
        let kills = 0;
        const killUntil = Date.now() + 12_000;
        while (Date.now() < killUntil && downstream.stats.effects < ids.length) {
          await sleep(300 + random() * 900);
          const victim = live[Math.floor(random() * live.length)]!;
          await victim.kill();
          kills++;
          live = [...live.filter((c) => c !== victim), spawnChild()];
        }
        expect(kills).toBeGreaterThan(0);
        try {
          await waitUntilSettled(q, { timeoutMs: 120_000 });
        } catch (err) {
          throw new Error(
            `${(err as Error).message} (seed ${seed})\n${children.map((c) => c.stderr).join('\n')}`,
          );
        }
        return { v: await judge(q, downstream, ids), ids, seed };
      }

      it('four worker processes, 1,500 jobs, SIGKILL at random: each effect at most once, nothing lost', async () => {
        const { v, ids, seed } = await fleetUnderKills();
        expect(v.violations, `seed ${seed}`).toEqual([]);
        expect(v.unsettled).toEqual([]);
        expect(v.duplicates).toEqual([]);
        expect(v.jobs).toBe(ids.length);
        expect(v.byState.SUCCEEDED + v.byState.NEEDS_REVIEW).toBe(ids.length);
      }, 180_000);

      it('the same run catches a build that resends every UNKNOWN request with its key', async () => {
        const { v } = await fleetUnderKills('same-key-resend');
        expect(v.duplicates.length).toBeGreaterThan(0);
        expect(v.duplicates.every((d) => !d.key.startsWith('idempotent-'))).toBe(true);
      }, 180_000);
    });
  },
);

// ------------------------------------------------------------------ a private cluster

function pgBin(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root).sort((a, b) => Number(b) - Number(a));
  for (const v of versions)
    if (existsSync(join(root, v, 'bin', 'initdb'))) return join(root, v, 'bin');
  return null;
}

/** null when a throwaway cluster can be made here; otherwise why not. */
async function privateClusterSupport(): Promise<string | null> {
  if (!pgBin()) return 'no PostgreSQL server binaries (initdb) under /usr/lib/postgresql';
  if (process.getuid?.() === 0) {
    try {
      await run('runuser', ['-u', 'postgres', '--', 'true']);
    } catch {
      return 'running as root but cannot switch to the postgres OS user with runuser';
    }
  }
  return null;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A PostgreSQL cluster in a temp dir, on a free port, owned by this test: safe to crash. */
class PrivateCluster {
  private constructor(
    private readonly dir: string,
    readonly port: number,
  ) {}

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  static async start(): Promise<PrivateCluster> {
    const dir = mkdtempSync(join(tmpdir(), 'reckon-pgcluster-'));
    const c = new PrivateCluster(dir, await freePort());
    if (process.getuid?.() === 0) await run('chown', ['-R', 'postgres:postgres', dir]);
    await c.pg('initdb', [
      '-D',
      c.data,
      '-A',
      'trust',
      '-U',
      'postgres',
      '--no-sync',
      '-E',
      'UTF8',
    ]);
    await c.start();
    return c;
  }

  private get data(): string {
    return join(this.dir, 'data');
  }

  private async pg(tool: string, args: string[]): Promise<void> {
    const bin = join(pgBin()!, tool);
    if (process.getuid?.() === 0) await run('runuser', ['-u', 'postgres', '--', bin, ...args]);
    else await run(bin, args);
  }

  async start(): Promise<void> {
    await this.pg('pg_ctl', [
      '-D',
      this.data,
      '-l',
      join(this.dir, 'server.log'),
      '-w',
      '-o',
      `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off`,
      'start',
    ]);
  }

  async stop(mode: 'fast' | 'immediate'): Promise<void> {
    await this.pg('pg_ctl', ['-D', this.data, '-m', mode, '-w', 'stop']);
  }

  async destroy(): Promise<void> {
    await this.stop('immediate').catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
