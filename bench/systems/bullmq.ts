/**
 * BullMQ 6 on Redis (which does not fsync by default: it promises less), deleting completed
 * jobs as its docs recommend for throughput.
 */
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { inFlight, REDIS_HOST, REDIS_PORT, sleep } from '../lib.js';
import type { BenchSystem, Claimer, Payload, Running, WorkOptions } from './system.js';

/** Redis db 9 is the bench's own; each run uses a fresh queue name and obliterates it after. */
const REDIS_DB = Number(process.env.BENCH_REDIS_DB ?? 9);

export class BullMqSystem implements BenchSystem {
  readonly name = 'bullmq';
  readonly family = 'peer' as const;
  readonly backend = 'redis' as const;
  private queue: Queue | undefined;
  private name_ = '';
  private readonly connection = { host: REDIS_HOST, port: REDIS_PORT, db: REDIS_DB };
  private owned = false;

  async open(): Promise<void> {
    this.owned = true;
    await this.attach(`bench-${randomBytes(4).toString('hex')}`);
  }

  async attach(target: string): Promise<void> {
    this.name_ = target;
    this.queue = new Queue(this.name_, {
      connection: this.connection,
      defaultJobOptions: { removeOnComplete: true, removeOnFail: true },
    });
    await this.queue.waitUntilReady();
  }

  get target(): string {
    return this.name_;
  }

  async close(): Promise<void> {
    if (this.queue && this.owned) {
      // obliterate() walks a million jobs in small steps; the queue's keys are all its own.
      const client = new Redis(this.connection);
      const pattern = `${this.queue.opts.prefix ?? 'bull'}:${this.name_}:*`;
      let cursor = '0';
      do {
        const [next, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 10_000);
        cursor = next;
        if (keys.length > 0) await client.unlink(...keys);
      } while (cursor !== '0');
      await client.quit();
    }
    await this.queue?.close();
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

  /** addBulk, the way to add many jobs, in calls of 5,000, four in flight. */
  async bulkLoad(n: number): Promise<void> {
    const sentAt = Date.now();
    const chunk = 5_000;
    await inFlight(Math.ceil(n / chunk), 4, async (k) => {
      const jobs = [];
      for (let i = k * chunk; i < Math.min(n, (k + 1) * chunk); i++)
        jobs.push({ name: 'noop', data: { seq: i, sentAt } });
      await this.q.addBulk(jobs);
    });
  }

  /** A Worker without a processor, taking one job with getNextJob (no blocking wait). */
  async claimer(): Promise<Claimer> {
    const worker = new Worker<Payload>(this.name_, undefined, {
      connection: this.connection,
      autorun: false,
    });
    await worker.waitUntilReady();
    let n = 0;
    return {
      claimOne: async () =>
        (await worker.getNextJob(`bench-claimer-${n++}`, { block: false })) ? 1 : 0,
      close: () => worker.close(true),
    };
  }

  /** `leaseMs` is BullMQ's lockDuration: each job's lock is renewed at half of it. */
  async work(o: WorkOptions): Promise<Running> {
    const worker = new Worker<Payload>(
      this.name_,
      async (job) => {
        o.onStart(job.data);
        if (job.data.waitMs) await sleep(job.data.waitMs);
        o.onEnd?.(job.data);
      },
      {
        connection: this.connection,
        concurrency: o.concurrency,
        ...(o.leaseMs !== undefined ? { lockDuration: o.leaseMs } : {}),
      },
    );
    if (o.onDone) {
      const onDone = o.onDone;
      worker.on('completed', (job) => onDone(job.data));
    }
    // A lock lost under load (agent-1000's 1 s locks) is an error per job: said once, counted.
    const errors: string[] = [];
    worker.on('error', (err) => errors.push(err.message));
    await worker.waitUntilReady();
    return {
      stop: async () => {
        await worker.close();
        if (errors.length > 0)
          process.stderr.write(`bullmq: ${errors.length} worker errors, the first: ${errors[0]}\n`);
      },
    };
  }

  async pending(): Promise<number> {
    const c = await this.q.getJobCounts('wait', 'active', 'delayed', 'prioritized');
    return Object.values(c).reduce((a, b) => a + b, 0);
  }

  /** Redis's commands processed (INFO stats), the whole server's: the bench is its only user. */
  async writeCounters(): Promise<Record<string, number>> {
    const client = new Redis(this.connection);
    try {
      const info = await client.info('stats');
      const m = /^total_commands_processed:(\d+)/m.exec(info);
      return { redisCommands: Number(m?.[1] ?? 0) };
    } finally {
      await client.quit();
    }
  }
}

/** What bench/systems/all.ts loads when a run asks for this peer. */
export default (): BenchSystem => new BullMqSystem();
