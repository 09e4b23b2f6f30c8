/**
 * graphile-worker 0.18 with the settings of its own published perf test: a local queue of 500
 * jobs and no completion batching delay.
 */
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from 'graphile-worker';
import pg from 'pg';
import {
  copyLists,
  createDatabase,
  dropDatabase,
  inChunks,
  pgUrl,
  pgWriteCounters,
  sleep,
} from '../lib.js';
import type { BenchSystem, Claimer, Payload, Running, WorkOptions } from './system.js';

const TASK = 'bench_noop';

/**
 * The statement a graphile-worker 0.18 worker runs to take one job (dist/sql/getJobs.js,
 * constructQuery with batchSize 1, no forbidden flags, database time, named-queue strategy 2),
 * copied verbatim: the package exports no way to call it alone. $1 worker id, $2 task ids.
 */
const GET_JOB = `\
with j as (
  select jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.id
    from graphile_worker._private_jobs as jobs
    where jobs.is_available = true
    and run_at <= now()
    and task_id = any($2::int[])
    and (
      jobs.job_queue_id is null
      or
      jobs.job_queue_id in (
        select id
        from graphile_worker._private_job_queues as job_queues
        where job_queues.is_available = true
        for update
        skip locked
      )
    )
    order by priority asc, run_at asc
    limit 1
    for update
    skip locked
),
q as (
  update graphile_worker._private_job_queues as job_queues
    set
      locked_by = $1::text,
      locked_at = now()
    from j
    where job_queues.id = j.job_queue_id
)
  update graphile_worker._private_jobs as jobs
    set
      attempts = jobs.attempts + 1,
      locked_by = $1::text,
      locked_at = now()
    from j
    where jobs.id = j.id
    returning *`;

export class GraphileSystem implements BenchSystem {
  readonly name = 'graphile-worker';
  readonly family = 'peer' as const;
  readonly backend = 'postgres' as const;
  private utils: WorkerUtils | undefined;
  private db: string | undefined;
  private probe: pg.Client | undefined;
  private owned = false;

  async open(): Promise<void> {
    this.owned = true;
    await this.attach(await createDatabase('graphile'));
  }

  async attach(target: string): Promise<void> {
    this.db = target;
    this.utils = await makeWorkerUtils({ connectionString: pgUrl(this.db) });
    if (this.owned) await this.utils.migrate();
    this.probe = new pg.Client({ connectionString: pgUrl(this.db) });
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
    await this.utils?.release();
    if (this.owned && this.db) await dropDatabase(this.db);
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

  /**
   * One job through addJob, then copies of its _private_jobs row with the database's own id
   * (bigserial) and a new payload; every other column as add_job wrote it (generated columns
   * left to the database).
   */
  async bulkLoad(n: number): Promise<void> {
    const sentAt = Date.now();
    const tpl = await this.u.addJob(TASK, { seq: 0, sentAt });
    if (n <= 1) return;
    const c = this.probe!;
    const cols = await copyLists(c, 'graphile_worker', '_private_jobs', 't', {
      payload: `jsonb_build_object('seq', i, 'sentAt', $2::bigint)`,
    });
    const sql = `INSERT INTO graphile_worker._private_jobs (${cols.columns})
      SELECT ${cols.values} FROM graphile_worker._private_jobs t, generate_series($3::int, $4::int) AS i
      WHERE t.id = $1`;
    await inChunks(1, n - 1, 100_000, async (lo, hi) => {
      await c.query(sql, [tpl.id, sentAt, lo, hi]);
    });
    await c.query('ANALYZE graphile_worker._private_jobs');
  }

  /** graphile-worker's own get-one-job statement (GET_JOB), prepared as its worker prepares it. */
  async claimer(): Promise<Claimer> {
    const c = new pg.Client({ connectionString: pgUrl(this.db!) });
    await c.connect();
    const task = await c.query<{ id: number }>(
      'SELECT id FROM graphile_worker._private_tasks WHERE identifier = $1',
      [TASK],
    );
    const taskIds = task.rows.map((r) => r.id);
    return {
      claimOne: async () =>
        (
          await c.query({
            name: 'get_job/graphile_worker',
            text: GET_JOB,
            values: ['bench-claimer', taskIds],
          })
        ).rowCount ?? 0,
      close: () => c.end(),
    };
  }

  /**
   * graphile-worker has no lease to renew (`leaseMs` is not used): a job's lock lasts 4 hours,
   * after which another worker may take it again.
   */
  async work(o: WorkOptions): Promise<Running> {
    const runner: Runner = await run({
      connectionString: pgUrl(this.db!),
      concurrency: o.concurrency,
      // A connection is needed to take or complete jobs, not to run one: the agent workload's
      // 1,000 jobs in flight share 52, as the server is shared.
      maxPoolSize: Math.min(o.concurrency + 2, 52),
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
        [TASK]: async (payload) => {
          const p = payload as Payload;
          o.onStart(p);
          if (p.waitMs) await sleep(p.waitMs);
          o.onEnd?.(p);
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

  writeCounters(): Promise<Record<string, number>> {
    return pgWriteCounters(this.db!);
  }
}

const quietLogger = new Logger(() => () => undefined);

/** What bench/systems/all.ts loads when a run asks for this peer. */
export default (): BenchSystem => new GraphileSystem();
