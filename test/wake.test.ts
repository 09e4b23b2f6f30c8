/**
 * In-process wake-ups, on both stores: work committed by this process wakes this process's
 * workers once (not once by the queue and again by the store's own notification), and every
 * queue object on a store, not only the one that enqueued. Workers here poll once a minute, so
 * only a wake-up can start a job in time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue, type Queue } from '../src/index.js';
import type { Worker } from '../src/runtime/worker.js';
import { createStore } from '../src/store/open.js';
import type { Store } from '../src/store/store.js';
import { countingClaims } from './helpers/counting.js';
import {
  makeTestStore,
  pgUnavailableReason,
  STORE_KINDS,
  type StoreKind,
  type TestStore,
} from './helpers/stores.js';

const pgReason = await pgUnavailableReason();
const MINUTE = 60_000;

const op = defineOperation<{ n: number }, null>({
  name: 'wake.effect',
  execute: (_input, ctx) => ctx.dispatch(() => Promise.resolve(null)),
});

const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function untilDone(worker: Worker, jobId: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      worker.off('succeeded', onDone);
      reject(new Error(`job ${jobId} did not run within 5 s: no wake-up reached the worker`));
    }, 5_000);
    const onDone = (e: { jobId: string }) => {
      if (e.jobId !== jobId) return;
      clearTimeout(timer);
      worker.off('succeeded', onDone);
      resolve();
    };
    worker.on('succeeded', onDone);
  });
}

describe.each(STORE_KINDS)('in-process wake-ups: %s', (kind: StoreKind) => {
  if (kind === 'postgres' && pgReason !== null) {
    it.skip(`skipped: ${pgReason}`, () => undefined);
    return;
  }

  async function store(): Promise<Store> {
    const ts: TestStore = await makeTestStore(kind);
    cleanup.push(() => ts.drop());
    const s = await createStore(ts.url);
    await s.init();
    cleanup.push(() => s.close());
    return s;
  }

  async function worker(q: Queue): Promise<Worker> {
    // Two slots, nothing claimed ahead: a claim that finds one job finds the queue drained, and
    // a slot that frees does not claim again. Only wake-ups make claims here.
    const w = q.worker({ operations: [op], concurrency: 2, prefetch: 0, pollIntervalMs: MINUTE });
    await w.start();
    cleanup.push(() => w.stop());
    return w;
  }

  it('a job enqueued in this process wakes its worker once: one claim per job', async () => {
    const { store: counted, claims } = countingClaims(await store());
    // Two queue objects on one store: a worker of the enqueuing queue object itself may be
    // handed the job in the enqueue's commit, with no wake-up and no claim (hand-off.test.ts).
    const producer = await openQueue({ store: counted });
    const q = await openQueue({ store: counted });
    const w = await worker(q);
    const before = claims();
    for (let n = 0; n < 20; n++) {
      const job = await producer.enqueue(op, { n });
      await untilDone(w, job.id);
    }
    // Each job: the claim its wake-up started. (A second wake-up per job, the store's own
    // notification coming back, made a second claim that found nothing.)
    expect(claims() - before).toBeLessThanOrEqual(20 + 1);
    expect(claims() - before).toBeGreaterThanOrEqual(20);
  });

  it('a job enqueued through one queue object wakes the workers of another on the same store', async () => {
    const s = await store();
    const producer = await openQueue({ store: s });
    const consumer = await openQueue({ store: s });
    const w = await worker(consumer);
    for (let n = 0; n < 3; n++) {
      const job = await producer.enqueue(op, { n });
      await untilDone(w, job.id);
    }
  });
});
