/**
 * A rig for reliability tests: a store of its own (SQLite temp file or PostgreSQL database), a
 * fake downstream with its effect ledger, a queue in the test process for enqueueing and
 * reading the journal, and worker child processes that the test can kill -9.
 */
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'vitest';
import { openQueue, type Queue } from '../../src/index.js';
import type { OpenQueueOptions } from '../../src/index.js';
import type { JobDetail } from '../../src/store/store.js';
import type { WorkerOptions, Worker } from '../../src/runtime/worker.js';
import {
  startDownstream,
  type Downstream,
  type DownstreamOptions,
} from '../../src/testkit/downstream.js';
import { startWorkerChild, type WorkerChild } from '../../src/testkit/fleet.js';
import type { WorkerChildConfig } from '../../src/testkit/child-config.js';
import {
  downstreamOperation,
  type DownstreamOperationOptions,
  type Flavour,
} from '../../src/testkit/operations.js';
import { judge, waitUntilSettled, type Verdict } from '../../src/testkit/verdict.js';
import {
  makeTestStore,
  pgUnavailableReason,
  type StoreKind,
  type TestStore,
} from '../helpers/stores.js';

/** Why a store kind cannot run here, or null. Throws where PostgreSQL is required (CI). */
async function unavailable(kind: StoreKind): Promise<string | null> {
  if (kind === 'sqlite') return null;
  return pgUnavailableReason();
}

/** A store for one test, or a skip saying why not (never in CI: there PostgreSQL is required). */
async function storeFor(ctx: TestContext, kind: StoreKind): Promise<TestStore> {
  const why = await unavailable(kind);
  if (why) ctx.skip(why);
  return makeTestStore(kind);
}

export interface RigOptions {
  downstream?: DownstreamOptions;
  queue?: Omit<OpenQueueOptions, 'store'>;
}

/** Short timings so that every path settles in seconds. */
export const FAST = {
  leaseMs: 600,
  clockSkewToleranceMs: 100,
  reclaimIntervalMs: 60,
  reconcileIntervalMs: 60,
  pollIntervalMs: 20,
} as const;

export class Rig {
  private readonly children: WorkerChild[] = [];
  private readonly workers: Worker[] = [];
  private readonly resumeFiles: string[] = [];

  private constructor(
    readonly kind: StoreKind,
    readonly store: TestStore,
    readonly q: Queue,
    readonly downstream: Downstream,
  ) {}

  static async open(ctx: TestContext, kind: StoreKind, options: RigOptions = {}): Promise<Rig> {
    const store = await storeFor(ctx, kind);
    // Deduplicating only the keys of the operation that declares it (idempotentWithKey): any
    // other request sent twice is two effects, which the verdict counts.
    const downstream = await startDownstream({
      honourIdempotencyKey: (key) => key.startsWith('idempotent-'),
      ...options.downstream,
    });
    const q = await openQueue({ ...(options.queue ?? {}), store: store.url });
    const rig = new Rig(kind, store, q, downstream);
    ctx.onTestFinished(() => rig.close());
    return rig;
  }

  op(flavour: Flavour, options: Partial<DownstreamOperationOptions> = {}) {
    return downstreamOperation(flavour, { url: this.downstream.url, ...options });
  }

  /** Enqueues `count` jobs of a flavour with keys `${prefix}-0…`; returns their ids. */
  async enqueue(flavour: Flavour, count: number, prefix = flavour): Promise<string[]> {
    const jobs = await this.q.enqueueMany(
      this.op(flavour),
      Array.from({ length: count }, (_, i) => ({ input: { n: i }, key: `${prefix}-${i}` })),
    );
    return jobs.map((j) => j.id);
  }

  /** A worker child process on this rig's store and downstream (`env`: more environment). */
  child(config: Partial<WorkerChildConfig> = {}, env: Record<string, string> = {}): WorkerChild {
    const c = startWorkerChild(
      {
        storeUrl: this.store.url,
        downstreamUrl: this.downstream.url,
        ...FAST,
        ...config,
      },
      { echoStderr: process.env.RECKON_TEST_ECHO === '1', env },
    );
    this.children.push(c);
    return c;
  }

  /**
   * Ends fault pauses when the test says so: give `env` to the paused child (its `pause` faults
   * then last until `resume()`, their length only a cap; see faults.ts).
   */
  pauseControl(): { env: Record<string, string>; resume(): void } {
    const file = join(tmpdir(), `reckon-resume-${randomBytes(6).toString('hex')}`);
    this.resumeFiles.push(file);
    return {
      env: { RECKON_FAULTS_RESUME_FILE: file },
      resume: () => writeFileSync(file, ''),
    };
  }

  /** A worker in the test process. */
  async worker(options: WorkerOptions): Promise<Worker> {
    const w = this.q.worker({ ...FAST, ...options });
    w.on('error', () => undefined);
    this.workers.push(w);
    await w.start();
    return w;
  }

  job(id: string): Promise<JobDetail> {
    return this.q.job(id).then((d) => {
      if (!d) throw new Error(`job ${id} not found`);
      return d;
    });
  }

  settle(timeoutMs = 20_000): Promise<void> {
    return waitUntilSettled(this.q, { timeoutMs });
  }

  verdict(jobIds?: string[]): Promise<Verdict> {
    return judge(this.q, this.downstream, jobIds);
  }

  /** Stderr of the children, for failure messages. */
  childLogs(): string {
    return this.children
      .map((c) => `--- child ${c.pid} ${JSON.stringify(c.exitInfo)}\n${c.stderr}`)
      .join('\n');
  }

  async close(): Promise<void> {
    await Promise.all(this.children.map((c) => c.kill()));
    await Promise.all(this.workers.map((w) => w.stop()));
    await this.q.close();
    await this.downstream.close();
    await this.store.drop();
    for (const f of this.resumeFiles) rmSync(f, { force: true });
  }
}

/** Polls until `fn` returns a truthy value; throws after `ms`. */
export async function until<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  ms = 10_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The business verdict every reliability test ends with. */
export function expectKeptPromises(v: Verdict): void {
  if (process.env.RECKON_TEST_VERDICT === '1')
    console.log(JSON.stringify({ ...v, unsettled: v.unsettled.length }));
  if (v.violations.length || v.unsettled.length || v.duplicates.length)
    throw new Error(
      `reckon broke a promise:\n${[
        ...v.violations,
        ...v.unsettled.map((u) => `job ${u.jobId} still ${u.state} (lost)`),
      ].join('\n')}`,
    );
}
