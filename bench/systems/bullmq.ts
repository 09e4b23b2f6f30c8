/**
 * BullMQ 6 on Redis (which does not fsync by default: it promises less), deleting completed
 * jobs as its docs recommend for throughput.
 */
import { Queue, Worker } from 'bullmq';
import { randomBytes } from 'node:crypto';
import { REDIS_HOST, REDIS_PORT } from '../lib.js';
import type { BenchSystem, Payload, Running, WorkOptions } from './system.js';

/** Redis db 9 is the bench's own; each run uses a fresh queue name and obliterates it after. */
const REDIS_DB = Number(process.env.BENCH_REDIS_DB ?? 9);

export class BullMqSystem implements BenchSystem {
  readonly name = 'bullmq';
  readonly family = 'peer' as const;
  readonly backend = 'redis' as const;
  private queue: Queue | undefined;
  private name_ = '';
  private readonly connection = { host: REDIS_HOST, port: REDIS_PORT, db: REDIS_DB };

  async open(): Promise<void> {
    this.name_ = `bench-${randomBytes(4).toString('hex')}`;
    this.queue = new Queue(this.name_, {
      connection: this.connection,
      defaultJobOptions: { removeOnComplete: true, removeOnFail: true },
    });
    await this.queue.waitUntilReady();
  }

  async close(): Promise<void> {
    if (this.queue) {
      await this.queue.obliterate({ force: true });
      await this.queue.close();
    }
    this.queue = undefined;
  }

  private get q(): Queue {
    if (!this.queue) throw new Error('bullmq is not open');
    return this.queue;
  }

  async enqueue(p: Payload): Promise<void> {
    await this.q.add('noop', p);
  }

  async enqueueMany(ps: Payload[]): Promise<void> {
    await this.q.addBulk(ps.map((data) => ({ name: 'noop', data })));
  }

  async work(o: WorkOptions): Promise<Running> {
    const worker = new Worker<Payload>(
      this.name_,
      (job) => {
        o.onStart(job.data);
        return Promise.resolve();
      },
      { connection: this.connection, concurrency: o.concurrency },
    );
    if (o.onDone) {
      const onDone = o.onDone;
      worker.on('completed', (job) => onDone(job.data));
    }
    await worker.waitUntilReady();
    return { stop: () => worker.close() };
  }

  async pending(): Promise<number> {
    const c = await this.q.getJobCounts('wait', 'active', 'delayed', 'prioritized');
    return Object.values(c).reduce((a, b) => a + b, 0);
  }
}
