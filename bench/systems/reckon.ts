/**
 * reckon under test: full journal, every invariant on. Each job's function runs inside
 * ctx.dispatch(), so every job writes its claim, its durable dispatch marker and its outcome.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineOperation, openQueue, type Queue } from '../../src/index.js';
import { createDatabase, dropDatabase, pgUrl } from '../lib.js';
import type { BenchSystem, Payload, Running, WorkOptions } from './system.js';

export const benchOp = defineOperation({
  name: 'bench.noop',
  async execute(input: Payload, ctx) {
    return ctx.dispatch(() => {
      handlers.onStart?.(input);
      return Promise.resolve(null);
    });
  },
});

/** The operation is module-level (as users define them); the current run's hooks live here. */
const handlers: { onStart?: (p: Payload) => void } = {};

export function setStartHook(fn: ((p: Payload) => void) | undefined): void {
  handlers.onStart = fn;
}

export class ReckonSystem implements BenchSystem {
  readonly family = 'reckon' as const;
  readonly name: string;
  private q: Queue | undefined;
  private db: string | undefined;
  private dir: string | undefined;
  private seqBase = 0;
  /** The SQLite file, for a worker in another process. */
  storeUrl = '';

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
    this.q = await openQueue({ store: this.storeUrl, operations: [benchOp] });
    this.seqBase = Date.now();
  }

  async close(): Promise<void> {
    await this.q?.close();
    this.q = undefined;
    if (this.db) await dropDatabase(this.db);
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.db = undefined;
    this.dir = undefined;
  }

  get queue(): Queue {
    if (!this.q) throw new Error('reckon bench system is not open');
    return this.q;
  }

  async enqueue(p: Payload): Promise<void> {
    await this.queue.enqueue(benchOp, p, { key: `k${this.seqBase}-${p.seq}` });
  }

  async enqueueMany(ps: Payload[]): Promise<void> {
    await this.queue.enqueueMany(
      benchOp,
      ps.map((p) => ({ input: p, key: `k${this.seqBase}-${p.seq}` })),
    );
  }

  async work(o: WorkOptions): Promise<Running> {
    handlers.onStart = o.onStart;
    const worker = this.queue.worker({
      operations: [benchOp],
      concurrency: o.concurrency,
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
      },
    };
  }

  async pending(): Promise<number> {
    const stats = await this.queue.store.statsGet();
    let n = 0;
    for (const q of stats.queues) n += q.counts.QUEUED + q.counts.LEASED;
    return n;
  }
}
