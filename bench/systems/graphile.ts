/**
 * graphile-worker 0.18 with the settings of its own published perf test: a local queue of 500
 * jobs and no completion batching delay.
 */
import { makeWorkerUtils, run, type Runner, type WorkerUtils } from 'graphile-worker';
import pg from 'pg';
import { createDatabase, dropDatabase, pgUrl } from '../lib.js';
import type { BenchSystem, Payload, Running, WorkOptions } from './system.js';

const TASK = 'bench_noop';

export class GraphileSystem implements BenchSystem {
  readonly name = 'graphile-worker';
  readonly family = 'peer' as const;
  readonly backend = 'postgres' as const;
  private utils: WorkerUtils | undefined;
  private db: string | undefined;
  private probe: pg.Client | undefined;

  async open(): Promise<void> {
    this.db = await createDatabase('graphile');
    this.utils = await makeWorkerUtils({ connectionString: pgUrl(this.db) });
    await this.utils.migrate();
    this.probe = new pg.Client({ connectionString: pgUrl(this.db) });
    await this.probe.connect();
  }

  async close(): Promise<void> {
    await this.probe?.end();
    await this.utils?.release();
    if (this.db) await dropDatabase(this.db);
    this.utils = undefined;
    this.db = undefined;
  }

  private get u(): WorkerUtils {
    if (!this.utils) throw new Error('graphile-worker is not open');
    return this.utils;
  }

  async enqueue(p: Payload): Promise<void> {
    await this.u.addJob(TASK, p);
  }

  async enqueueMany(ps: Payload[]): Promise<void> {
    await this.u.addJobs(ps.map((payload) => ({ identifier: TASK, payload })));
  }

  async work(o: WorkOptions): Promise<Running> {
    const runner: Runner = await run({
      connectionString: pgUrl(this.db!),
      concurrency: o.concurrency,
      maxPoolSize: o.concurrency + 2,
      noHandleSignals: true,
      pollInterval: 2_000,
      logger: quietLogger,
      preset: {
        worker: {
          localQueue: { size: 500 },
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
        },
      },
      taskList: {
        [TASK]: (payload) => {
          o.onStart(payload as Payload);
          return Promise.resolve();
        },
      },
    });
    return { stop: () => runner.stop() };
  }

  async pending(): Promise<number> {
    const r = await this.probe!.query<{ n: string }>(
      'SELECT count(*) AS n FROM graphile_worker._private_jobs',
    );
    return Number(r.rows[0]!.n);
  }
}

import { Logger } from 'graphile-worker';
const quietLogger = new Logger(() => () => undefined);
