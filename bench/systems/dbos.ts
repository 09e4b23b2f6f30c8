/**
 * DBOS Transact 5 (TypeScript), the durable-execution peer: each job is a workflow on a DBOS
 * queue whose one step is the no-op (or the wait), so every job checkpoints its step's output
 * and its workflow's end, as a DBOS application would. The producer enqueues through DBOSClient
 * (as an external application does, in one transaction per batch); the worker is a launched
 * DBOS process dequeuing with `workerConcurrency`. DBOS polls its queues: the poll interval is
 * set to 10 ms (its default is 1 s, which would cap a worker at a batch a second). It has no
 * leases to renew: a crashed executor's workflows are recovered when an executor of the same id
 * restarts.
 */
import { DBOS, DBOSClient } from '@dbos-inc/dbos-sdk';
import pg from 'pg';
import { createDatabase, dropDatabase, pgUrl, pgWriteCounters, sleep } from '../lib.js';
import type { BenchSystem, Claimer, Payload, Running, WorkOptions } from './system.js';

const APP = 'reckon-bench';
const VERSION = 'bench-1';
const QUEUE = 'bench';
const WORKFLOW = 'benchNoop';
const POLL_MS = 10;

export class DbosSystem implements BenchSystem {
  readonly name = 'dbos';
  readonly family = 'peer' as const;
  readonly backend = 'postgres' as const;
  readonly noBulkLoad =
    'no bulk load written for DBOS yet (its workflow_status rows would need copying in SQL)';
  private client: DBOSClient | undefined;
  private db: string | undefined;
  private probe: pg.Client | undefined;
  private owned = false;

  async open(): Promise<void> {
    this.owned = true;
    const db = await createDatabase('dbos');
    await DBOS.migrate(pgUrl(db));
    await this.attach(db);
    await this.c.registerQueue(QUEUE, { minPollingIntervalMs: POLL_MS });
  }

  async attach(target: string): Promise<void> {
    this.db = target;
    this.client = await DBOSClient.create({
      systemDatabaseUrl: pgUrl(target),
      applicationName: APP,
      logger: quietLogger,
    });
    this.probe = new pg.Client({ connectionString: pgUrl(target) });
    await this.probe.connect();
  }

  get target(): string {
    return this.db ?? '';
  }

  get database(): string | undefined {
    return this.db;
  }

  async close(): Promise<void> {
    await this.probe?.end();
    await this.client?.destroy();
    if (this.owned && this.db) await dropDatabase(this.db);
    this.client = undefined;
    this.probe = undefined;
    this.db = undefined;
  }

  private get c(): DBOSClient {
    if (!this.client) throw new Error('dbos is not open');
    return this.client;
  }

  private readonly options = { queueName: QUEUE, workflowName: WORKFLOW, appVersion: VERSION };

  async enqueue(p: Payload): Promise<void> {
    await this.c.enqueue(this.options, p);
  }

  /** DBOSClient.enqueueInTransaction: the batch commits as one transaction. */
  async enqueueMany(ps: Payload[]): Promise<void> {
    const tx = this.probe!;
    await tx.query('BEGIN');
    try {
      for (const p of ps) await this.c.enqueueInTransaction(tx, this.options, p);
      await tx.query('COMMIT');
    } catch (err) {
      await tx.query('ROLLBACK');
      throw err;
    }
  }

  bulkLoad(): Promise<void> {
    return Promise.reject(new Error(`bench: ${this.noBulkLoad}`));
  }

  claimer(): Promise<Claimer> {
    return Promise.reject(new Error(`bench: ${this.noBulkLoad}`));
  }

  /** Launches DBOS in this process (one launch a process), dequeuing at `concurrency`. */
  async work(o: WorkOptions): Promise<Running> {
    DBOS.setConfig({
      name: APP,
      systemDatabaseUrl: pgUrl(this.db!),
      systemDatabasePoolSize: Math.min(o.concurrency + 2, 52),
      applicationVersion: VERSION,
      logLevel: 'error',
    });
    DBOS.registerWorkflow(
      async (p: Payload) => {
        await DBOS.runStep(
          async () => {
            o.onStart(p);
            if (p.waitMs) await sleep(p.waitMs);
            o.onEnd?.(p);
          },
          { name: 'noop' },
        );
      },
      { name: WORKFLOW },
    );
    await DBOS.launch();
    await DBOS.registerQueue(QUEUE, {
      workerConcurrency: o.concurrency,
      minPollingIntervalMs: POLL_MS,
      onConflict: 'always_update',
    });
    return {
      stop: () => DBOS.shutdown({ deregister: true, workflowCompletionTimeoutMS: 30_000 }),
    };
  }

  async pending(): Promise<number> {
    const r = await this.probe!.query<{ n: string }>(
      `SELECT count(*) AS n FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING')`,
    );
    return Number(r.rows[0]!.n);
  }

  writeCounters(): Promise<Record<string, number>> {
    return pgWriteCounters(this.db!);
  }
}

/** The client's info and debug lines are not results; its warnings and errors are shown. */
const quietLogger = {
  info: () => undefined,
  debug: () => undefined,
  warn: (e: unknown) => console.error('dbos:', e),
  error: (e: unknown) => console.error('dbos:', e),
};

/** What bench/systems/all.ts loads when a run asks for this peer. */
export default (): BenchSystem => new DbosSystem();
