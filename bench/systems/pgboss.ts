/**
 * pg-boss 12 with its recommended throughput settings: LISTEN/NOTIFY on, batch fetches of 100,
 * continuous fetching while batches come back full.
 */
import { PgBoss } from 'pg-boss';
import pg from 'pg';
import { createDatabase, dropDatabase, pgUrl } from '../lib.js';
import type { BenchSystem, Payload, Running, WorkOptions } from './system.js';

const QUEUE = 'bench';
const BATCH = 100;

export class PgBossSystem implements BenchSystem {
  readonly name = 'pg-boss';
  readonly family = 'peer' as const;
  readonly backend = 'postgres' as const;
  private boss: PgBoss | undefined;
  private db: string | undefined;
  private probe: pg.Client | undefined;

  async open(): Promise<void> {
    this.db = await createDatabase('pgboss');
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
    await this.boss.createQueue(QUEUE, { notify: true });
    this.probe = new pg.Client({ connectionString: pgUrl(this.db) });
    await this.probe.connect();
  }

  async close(): Promise<void> {
    await this.probe?.end();
    await this.boss?.stop({ graceful: false });
    if (this.db) await dropDatabase(this.db);
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
      ps.map((data) => ({ data })),
    );
  }

  async work(o: WorkOptions): Promise<Running> {
    // pg-boss concurrency is the number of fetch loops; each handles a batch of up to 100.
    const id = await this.b.work<Payload>(
      QUEUE,
      {
        batchSize: BATCH,
        localConcurrency: o.concurrency,
        pollingIntervalSeconds: 0.5,
        notifyPollingIntervalSeconds: 30,
        burstWhenBatchFull: true,
      },
      (jobs) => {
        for (const j of jobs) o.onStart(j.data);
        return Promise.resolve();
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
}
