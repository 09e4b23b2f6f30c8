/**
 * pg-boss 12 with its recommended throughput settings: LISTEN/NOTIFY on, batch fetches of 100,
 * continuous fetching while batches come back full.
 */
import { PgBoss } from 'pg-boss';
import pg from 'pg';
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

const QUEUE = 'bench';
const BATCH = 100;
/** pg-boss's smallest heartbeat (it refuses less than 10 s); the worker renews every second. */
const HEARTBEAT_S = 10;

export class PgBossSystem implements BenchSystem {
  readonly name = 'pg-boss';
  readonly family = 'peer' as const;
  readonly backend = 'postgres' as const;
  private boss: PgBoss | undefined;
  private db: string | undefined;
  private probe: pg.Client | undefined;
  private owned = false;

  async open(): Promise<void> {
    this.owned = true;
    await this.connect(await createDatabase('pgboss'));
    await this.b.createQueue(QUEUE, { notify: true });
  }

  attach(target: string): Promise<void> {
    return this.connect(target);
  }

  get target(): string {
    return this.db ?? '';
  }

  get database(): string | undefined {
    return this.db;
  }

  private async connect(db: string): Promise<void> {
    this.db = db;
    this.boss = new PgBoss({
      connectionString: pgUrl(this.db),
      useListenNotify: true,
      max: 20,
    });
    // Connections it loses at teardown (the database is dropped) are not results.
    this.boss.on('error', (err: Error & { code?: string }) => {
      if (err.code !== '57P01') console.error('pg-boss error', err);
    });
    await this.boss.start();
    this.probe = new pg.Client({ connectionString: pgUrl(this.db) });
    await this.probe.connect();
  }

  async close(): Promise<void> {
    await this.probe?.end();
    await this.boss?.stop({ graceful: false });
    if (this.owned && this.db) await dropDatabase(this.db);
    this.boss = undefined;
    this.db = undefined;
  }

  private get b(): PgBoss {
    if (!this.boss) throw new Error('pg-boss is not open');
    return this.boss;
  }

  async enqueue(p: Payload): Promise<void> {
    await this.b.send(QUEUE, p);
  }

  async enqueueMany(ps: Payload[]): Promise<void> {
    await this.b.insert(
      QUEUE,
      // Jobs that wait (the agent workload) carry a heartbeat, set when a job is inserted.
      ps.map((data) => (data.waitMs ? { data, heartbeatSeconds: HEARTBEAT_S } : { data })),
    );
  }

  /**
   * One job through send(), then copies of its row in the queue's own table with a new
   * gen_random_uuid() id (as insert does) and payload; every other column as send wrote it.
   */
  async bulkLoad(n: number): Promise<void> {
    const sentAt = Date.now();
    const id = await this.b.send(QUEUE, { seq: 0, sentAt });
    if (!id) throw new Error('pg-boss did not return the template job id');
    if (n <= 1) return;
    const c = this.probe!;
    const t = await c.query<{ table_name: string }>(
      'SELECT table_name FROM pgboss.queue WHERE name = $1',
      [QUEUE],
    );
    const table = t.rows[0]!.table_name;
    const cols = await copyLists(c, 'pgboss', table, 't', {
      id: 'gen_random_uuid()',
      data: `jsonb_build_object('seq', i, 'sentAt', $2::bigint)`,
    });
    const sql = `INSERT INTO pgboss.${quoteIdent(table)} (${cols.columns})
      SELECT ${cols.values} FROM pgboss.${quoteIdent(table)} t, generate_series($3::int, $4::int) AS i
      WHERE t.name = '${QUEUE}' AND t.id = $1`;
    await inChunks(1, n - 1, 100_000, async (lo, hi) => {
      await c.query(sql, [id, sentAt, lo, hi]);
    });
    await c.query(`ANALYZE pgboss.${quoteIdent(table)}`);
  }

  /** pg-boss's own fetch() of one job (the call its work() loop makes, with batchSize 1). */
  claimer(): Promise<Claimer> {
    return Promise.resolve({
      claimOne: async () => (await this.b.fetch(QUEUE, { batchSize: 1 })).length,
      close: () => Promise.resolve(),
    });
  }

  async work(o: WorkOptions): Promise<Running> {
    // pg-boss concurrency is the number of fetch loops; each handles a batch of up to 100. Jobs
    // that wait (leaseMs set) take one job a loop, so that `concurrency` jobs are in flight and
    // none waits for the slowest of its batch.
    const waiting = o.leaseMs !== undefined;
    const id = await this.b.work<Payload>(
      QUEUE,
      {
        batchSize: waiting ? 1 : BATCH,
        localConcurrency: o.concurrency,
        pollingIntervalSeconds: 0.5,
        notifyPollingIntervalSeconds: 30,
        burstWhenBatchFull: true,
        ...(waiting ? { heartbeatRefreshSeconds: Math.max(1, o.leaseMs! / 2000) } : {}),
      },
      async (jobs) => {
        for (const j of jobs) o.onStart(j.data);
        const waits = jobs.filter((j) => j.data.waitMs).map((j) => sleep(j.data.waitMs!));
        if (waits.length > 0) await Promise.all(waits);
        for (const j of jobs) o.onEnd?.(j.data);
      },
    );
    return { stop: () => this.b.offWork(QUEUE, { id, wait: true }) };
  }

  async pending(): Promise<number> {
    const r = await this.probe!.query<{ n: string }>(
      `SELECT count(*) AS n FROM pgboss.job WHERE name = $1 AND state IN ('created','retry','active')`,
      [QUEUE],
    );
    return Number(r.rows[0]!.n);
  }

  writeCounters(): Promise<Record<string, number>> {
    return pgWriteCounters(this.db!);
  }
}

/** What bench/systems/all.ts loads when a run asks for this peer. */
export default (): BenchSystem => new PgBossSystem();
