/**
 * reckon under test: full journal, every invariant on. Each job's function runs inside
 * ctx.dispatch(), so every job writes its claim, its durable dispatch marker and its outcome.
 */
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { v7 as uuidv7 } from 'uuid';
import { canonicalJson, fingerprintOf } from '../../src/core/json.js';
import { defineOperation, openQueue, type Queue } from '../../src/index.js';
import {
  copyLists,
  createDatabase,
  dropDatabase,
  inChunks,
  pgUrl,
  pgWriteCounters,
  quoteIdent,
  sleep,
} from '../lib.js';
import type { BenchSystem, Claimer, Payload, Running, WorkOptions } from './system.js';

export const benchOp = defineOperation({
  name: 'bench.noop',
  async execute(input: Payload, ctx) {
    return ctx.dispatch(async () => {
      handlers.onStart?.(input);
      if (input.waitMs) await sleep(input.waitMs);
      handlers.onEnd?.(input);
      return null;
    });
  },
});

/**
 * benchOp with a concurrency limit of 1 per key and a key of its own per job: every claim goes
 * through the limited claim (flow control, issue #30), and no key is ever contended, so what it
 * costs against benchOp is the limit's bookkeeping alone.
 */
export const benchKeyedOp = defineOperation({
  name: 'bench.keyed',
  concurrency: { max: 1, key: (input: Payload) => `k${input.seq}` },
  execute: benchOp.spec.execute,
});

/** Leases a bench worker holds beyond its concurrency (the worker's `prefetch`). */
export const BENCH_PREFETCH = 100;

/** The operation is module-level (as users define them); the current run's hooks live here. */
const handlers: { onStart?: (p: Payload) => void; onEnd?: (p: Payload) => void } = {};

export class ReckonSystem implements BenchSystem {
  readonly family = 'reckon' as const;
  readonly name: string;
  private q: Queue | undefined;
  private db: string | undefined;
  private dir: string | undefined;
  private seqBase = 0;
  private owned = false;
  /** The SQLite file, for a worker in another process. */
  storeUrl = '';
  /** Enqueue and work benchKeyedOp rather than benchOp (process-c50-keyed). */
  keyed = false;

  constructor(readonly backend: 'sqlite' | 'postgres') {
    this.name = backend === 'sqlite' ? 'reckon-sqlite' : 'reckon-pg';
  }

  async open(): Promise<void> {
    if (this.backend === 'sqlite') {
      // A real disk (not tmpfs): the fsync cost is part of what is measured.
      this.dir = mkdtempSync(join(tmpdir(), 'reckon-bench-'));
      this.storeUrl = `sqlite:${join(this.dir, 'bench.db')}`;
    } else {
      this.db = await createDatabase('reckon');
      this.storeUrl = pgUrl(this.db);
    }
    this.owned = true;
    this.q = await openQueue({ store: this.storeUrl, operations: [benchOp, benchKeyedOp] });
    this.seqBase = Date.now();
  }

  async attach(target: string): Promise<void> {
    this.storeUrl = target;
    if (this.backend === 'postgres') this.db = new URL(target).pathname.slice(1);
    this.q = await openQueue({ store: target, operations: [benchOp, benchKeyedOp] });
    this.seqBase = Date.now();
  }

  get target(): string {
    return this.storeUrl;
  }

  get database(): string | undefined {
    return this.db;
  }

  async close(): Promise<void> {
    await this.q?.close();
    this.q = undefined;
    if (this.owned && this.db) await dropDatabase(this.db);
    if (this.owned && this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.db = undefined;
    this.dir = undefined;
  }

  private get op() {
    return this.keyed ? benchKeyedOp : benchOp;
  }

  get queue(): Queue {
    if (!this.q) throw new Error('reckon bench system is not open');
    return this.q;
  }

  async enqueue(p: Payload): Promise<void> {
    await this.queue.enqueue(this.op, p, { key: `k${this.seqBase}-${p.seq}` });
  }

  async enqueueMany(ps: Payload[]): Promise<void> {
    await this.queue.enqueueMany(
      this.op,
      ps.map((p) => ({ input: p, key: `k${this.seqBase}-${p.seq}` })),
    );
  }

  /**
   * One job through queue.enqueue (the template: its jobs row and its events), then copies of
   * those rows with a new uuid v7, request key, input and fingerprint (SHA-256 of the canonical
   * input, as enqueue computes it), the rest (times, retry policy, timeout…) as enqueue wrote it:
   * n jobs enqueued in one instant. Checked against the template before anything is copied.
   */
  async bulkLoad(n: number): Promise<void> {
    const sentAt = Date.now();
    const tpl = await this.queue.enqueue(
      benchOp,
      { seq: 0, sentAt },
      { key: `k${this.seqBase}-0` },
    );
    if (n <= 1) return;
    if (this.backend === 'sqlite') this.bulkSqlite(tpl.id, n, sentAt);
    else await this.bulkPostgres(tpl.id, n, sentAt);
  }

  private bulkSqlite(tplId: string, n: number, sentAt: number): void {
    const db = new Database(this.storeUrl.replace(/^sqlite:/, ''));
    try {
      db.pragma('busy_timeout = 10000');
      const job = db.prepare('SELECT * FROM jobs WHERE id = ?').get(tplId) as Record<
        string,
        unknown
      >;
      const events = db
        .prepare('SELECT * FROM events WHERE job_id = ? ORDER BY id')
        .all(tplId) as Record<string, unknown>[];
      const attempts = db
        .prepare('SELECT count(*) AS n FROM attempts WHERE job_id = ?')
        .get(tplId) as {
        n: number;
      };
      const input = { seq: 0, sentAt };
      if (
        job.input_json !== canonicalJson(input) ||
        job.request_fingerprint !== fingerprintOf(input) ||
        job.request_key !== `k${this.seqBase}-0` ||
        // The enqueued step: an event, or (since migration 11) the job's enqueue_actor column.
        (events.length === 0 && job.enqueue_actor == null) ||
        attempts.n !== 0
      )
        throw new Error('bench: the bulk copy would not match what enqueue writes');
      const jobCols = Object.keys(job);
      // The events' own id is the database's (INTEGER PRIMARY KEY).
      const eventCols = events.length > 0 ? Object.keys(events[0]!).filter((c) => c !== 'id') : [];
      const insert = (table: string, cols: string[]) =>
        db.prepare(
          `INSERT INTO ${table} (${cols.map(quoteIdent).join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`,
        );
      const insJob = insert('jobs', jobCols);
      const insEvent = events.length > 0 ? insert('events', eventCols) : undefined;
      const chunk = db.transaction((lo: number, hi: number) => {
        for (let i = lo; i <= hi; i++) {
          // As enqueue stores it: canonical JSON, whose hash is the fingerprint.
          const inputJson = canonicalJson({ seq: i, sentAt });
          const row: Record<string, unknown> = {
            ...job,
            id: uuidv7(),
            request_key: `k${this.seqBase}-${i}`,
            input_json: inputJson,
            request_fingerprint: fingerprintOf({ seq: i, sentAt }),
          };
          insJob.run(...jobCols.map((c) => row[c]));
          for (const e of events) {
            const ev: Record<string, unknown> = {
              ...e,
              job_id: row.id,
              request_fingerprint: row.request_fingerprint,
            };
            insEvent!.run(...eventCols.map((c) => ev[c]));
          }
        }
      });
      for (let lo = 1; lo < n; lo += 50_000) chunk(lo, Math.min(n - 1, lo + 50_000 - 1));
    } finally {
      db.close();
    }
  }

  private async bulkPostgres(tplId: string, n: number, sentAt: number): Promise<void> {
    const c = new pg.Client({ connectionString: this.storeUrl });
    await c.connect();
    try {
      const s = 'reckon';
      const check = await c.query<{ ok: boolean }>(
        `SELECT j.input_json = '{"sentAt":' || $2::text || ',"seq":0}'
            AND j.request_fingerprint = encode(sha256(convert_to('{"sentAt":' || $2::text || ',"seq":0}', 'UTF8')), 'hex')
            AND j.request_key = 'k' || $3::text || '-0'
            AND ((SELECT count(*) FROM ${s}.events e WHERE e.job_id = j.id) > 0
              OR to_jsonb(j) ->> 'enqueue_actor' IS NOT NULL)
            AND NOT EXISTS (SELECT 1 FROM ${s}.attempts a WHERE a.job_id = j.id) AS ok
         FROM ${s}.jobs j WHERE j.id = $1`,
        [tplId, String(sentAt), String(this.seqBase)],
      );
      if (check.rows[0]?.ok !== true)
        throw new Error('bench: the bulk copy would not match what enqueue writes');
      const jobs = await copyLists(c, s, 'jobs', 't', {
        id: 'g.id',
        request_key: 'g.request_key',
        input_json: 'g.input_json',
        request_fingerprint: 'g.fp',
      });
      const events = await copyLists(c, s, 'events', 'e', {
        job_id: 'g.id',
        request_fingerprint: 'g.fp',
      });
      // uuid v7: the template's millisecond, then version 7 and variant 8 around a counter, then
      // pseudo-random bits: unique and ordered like the ids of one batch.
      const sql = `
WITH t AS (SELECT * FROM ${s}.jobs WHERE id = $1),
g AS MATERIALIZED (
  SELECT i,
    substr(t.id, 1, 14) || '7' || lpad(to_hex((i >> 12) & 4095), 3, '0') || '-8' ||
      lpad(to_hex(i & 4095), 3, '0') || '-' || substr(md5(i::text || t.id), 1, 12) AS id,
    'k' || $3::text || '-' || i AS request_key,
    '{"sentAt":' || $2::text || ',"seq":' || i || '}' AS input_json,
    encode(sha256(convert_to('{"sentAt":' || $2::text || ',"seq":' || i || '}', 'UTF8')), 'hex') AS fp
  FROM t, generate_series($4::int, $5::int) AS i
),
j AS (INSERT INTO ${s}.jobs (${jobs.columns}) SELECT ${jobs.values} FROM g, t)
INSERT INTO ${s}.events (${events.columns}) SELECT ${events.values}
FROM g, ${s}.events e WHERE e.job_id = $1`;
      await inChunks(1, n - 1, 100_000, async (lo, hi) => {
        await c.query(sql, [tplId, String(sentAt), String(this.seqBase), lo, hi]);
      });
      await c.query(`ANALYZE ${s}.jobs, ${s}.events`);
    } finally {
      await c.end();
    }
  }

  /** The store's own claim, as the worker calls it: attemptClaimMany with a limit of 1. */
  claimer(): Promise<Claimer> {
    const store = this.queue.store;
    return Promise.resolve({
      claimOne: async () =>
        (
          await store.attemptClaimMany({
            ownerId: 'bench-claimer',
            queues: ['default'],
            operations: [benchOp.name],
            limit: 1,
            leaseMs: 600_000,
          })
        ).length,
      close: () => Promise.resolve(),
    });
  }

  async work(o: WorkOptions): Promise<Running> {
    handlers.onStart = o.onStart;
    handlers.onEnd = o.onEnd;
    const worker = this.queue.worker({
      operations: [o.keyed ? benchKeyedOp : this.op],
      concurrency: o.concurrency,
      // reckon's throughput setting (as graphile-worker's local queue of 500 is its own): leases
      // claimed ahead of free slots, so a slot that frees never waits for a claim round trip.
      // Prefetched jobs are not dispatched until a slot takes them; their leases are heartbeated.
      prefetch: BENCH_PREFETCH,
      // Heartbeats every third of the lease (the default), for all the attempts in flight at once.
      ...(o.leaseMs !== undefined ? { leaseMs: o.leaseMs } : {}),
      // The bench runs no crashes: recovery loops stay on (as in production) at their defaults.
    });
    if (o.onDone) {
      const onDone = o.onDone;
      worker.on('succeeded', (e: { input: unknown }) => onDone(e.input as Payload));
    }
    await worker.start();
    return {
      stop: async () => {
        await worker.stop();
        handlers.onStart = undefined;
        handlers.onEnd = undefined;
      },
    };
  }

  async pending(): Promise<number> {
    const stats = await this.queue.store.statsGet();
    let n = 0;
    for (const q of stats.queues) n += q.counts.QUEUED + q.counts.LEASED;
    return n;
  }

  writeCounters(): Promise<Record<string, number>> {
    // SQLite: the worker process's own disk writes are its counter (bench/worker-process.ts).
    return this.db ? pgWriteCounters(this.db) : Promise.resolve({});
  }
}
