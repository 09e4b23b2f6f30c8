/**
 * Retention racing the writers of a terminal job's history (issue #33 item 7), each race widened
 * at the point where it bites: events appended between the archive read and the delete are never
 * deleted unarchived (both stores); on PostgreSQL, an event written while a prune deletes its job
 * never outlives the job, an enqueue whose key's old job is pruned under it creates the job
 * cleanly, and an outcome wait written while its job finishes does not outlive it (and retention
 * removes strays).
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue } from '../src/index.js';
import { createStore } from '../src/store/open.js';
import type { JobDetail, Store } from '../src/store/store.js';
import { newJobInsert } from './helpers/jobs.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type TestStore,
} from './helpers/stores.js';

const pgReason = await pgUnavailableReason();
const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function storeOf(kind: 'sqlite' | 'postgres'): Promise<{ ts: TestStore; store: Store }> {
  const ts = await makeTestStore(kind);
  cleanup.push(() => ts.drop());
  const store = await createStore(ts.url);
  cleanup.push(() => store.close());
  await store.init();
  return { ts, store };
}

/** A terminal (CANCELLED) job with key `key`, written through the store's API. */
async function cancelledJob(store: Store, key: string): Promise<string> {
  const [r] = await store.jobInsertMany({ jobs: [newJobInsert(key)], actor: 'test' });
  const c = await store.jobCancel({ id: r!.job.id, actor: 'test', reason: 'test' });
  expect(c?.cancelled).toBe(true);
  return r!.job.id;
}

async function until(what: string, fn: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe.each(STORE_KINDS)('retention races: %s', (kind) => {
  it.skipIf(kind === 'postgres' && pgReason !== null)(
    'an event appended between the archive read and the delete is archived before it goes',
    async () => {
      const { store } = await storeOf(kind);
      const id = await cancelledJob(store, 'k');
      const archived: JobDetail[] = [];
      let replayed = false;
      const archive = async (histories: JobDetail[]) => {
        archived.push(...histories);
        if (replayed) return;
        replayed = true;
        // A q.call replay of the same key, after the archive was read: a dedup event.
        const [again] = await store.jobInsertMany({ jobs: [newJobInsert('k')], actor: 'replay' });
        expect(again).toMatchObject({ created: false, job: { id } });
      };
      let rounds = 0;
      for (;;) {
        const r = await store.jobPruneMany({
          states: ['CANCELLED'],
          olderThanMs: 0,
          limit: 10,
          archive,
        });
        if (!r.more || ++rounds > 5) break;
      }
      expect((await store.jobGet({ id }))?.job).toBeUndefined();
      // The history deleted is the last one archived, and it holds the replay's event.
      const last = archived.filter((h) => h.job.id === id).at(-1)!;
      expect(last.events.map((e) => e.kind)).toContain('enqueue-deduplicated');
    },
  );
});

describe.skipIf(pgReason !== null)('retention races: postgres only', () => {
  async function raw(url: string): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    cleanup.push(() => c.end());
    return c;
  }
  const blocked = async (c: pg.Client) =>
    (
      await c.query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      )
    ).rows[0]!.n !== '0';

  it('an event written while a prune deletes its job waits for it and writes nothing', async () => {
    const { ts, store } = await storeOf('postgres');
    const id = await cancelledJob(store, 'k');
    const pruner = await raw(ts.url);
    const probe = await raw(ts.url);
    // A prune's delete transaction, held open before its commit (retention.ts, in order).
    await pruner.query('BEGIN');
    await pruner.query('SELECT id FROM reckon.jobs WHERE id = $1 FOR UPDATE', [id]);
    await pruner.query('DELETE FROM reckon.events WHERE job_id = $1', [id]);
    await pruner.query('DELETE FROM reckon.attempts WHERE job_id = $1', [id]);
    await pruner.query('DELETE FROM reckon.jobs WHERE id = $1', [id]);
    let appended = false;
    const append = store
      .eventAppendMany({
        events: [{ jobId: id, attemptNo: null, kind: 'late-evidence', actor: 'w9', detail: {} }],
      })
      .then(() => (appended = true));
    await until(
      'the append to wait for the prune, or finish',
      async () => appended || (await blocked(probe)),
    );
    await pruner.query('COMMIT');
    await append;
    const left = await probe.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM reckon.events WHERE job_id = $1',
      [id],
    );
    expect(left.rows[0]!.n).toBe(0);
  });

  it("an enqueue whose key's old job is pruned under it creates the job, no InvariantViolation", async () => {
    const { ts, store } = await storeOf('postgres');
    const old = await cancelledJob(store, 'k');
    const caller = await raw(ts.url);
    await caller.query('BEGIN');
    let pruned = 0;
    // The caller's transaction, paused after the insert found the key taken and before the
    // enqueue reads the key's job: a prune of that job commits there.
    const tx = {
      query: async (text: string, values?: unknown[]) => {
        if (/request_key = ANY/.test(text) && pruned === 0) {
          const r = await store.jobPruneMany({ states: ['CANCELLED'], olderThanMs: 0, limit: 10 });
          pruned = r.jobs.CANCELLED;
        }
        return caller.query(text, values);
      },
    };
    const [r] = await store.jobInsertMany({
      jobs: [newJobInsert('k')],
      actor: 'test',
      transaction: tx,
    });
    await caller.query('COMMIT');
    expect(pruned).toBe(1);
    expect(r).toMatchObject({ created: true });
    expect(r!.job.id).not.toBe(old);
    expect((await store.jobGet({ id: r!.job.id }))?.job).toMatchObject({
      requestKey: 'k',
      state: 'QUEUED',
    });
  });

  it('an outcome wait registered while its job finishes resolves with the outcome', async () => {
    const { ts, store } = await storeOf('postgres');
    const [r] = await store.jobInsertMany({ jobs: [newJobInsert('w')], actor: 'test' });
    const id = r!.job.id;
    const finisher = await raw(ts.url);
    const probe = await raw(ts.url);
    await finisher.query('BEGIN');
    await finisher.query(
      `UPDATE reckon.jobs SET state = 'CANCELLED', finished_at = now(), updated_at = now()
       WHERE id = $1`,
      [id],
    );
    const q = await openQueue({ store: ts.url });
    cleanup.push(() => q.close());
    const outcome = q.waitFor(id, { timeoutMs: 30_000 });
    outcome.catch(() => undefined);
    const watched = async () =>
      (
        await probe.query<{ watched: boolean }>('SELECT watched FROM reckon.jobs WHERE id = $1', [
          id,
        ])
      ).rows[0]!.watched;
    await until(
      'the wait to register, or to wait for the finish',
      async () => (await watched()) || (await blocked(probe)),
    );
    await finisher.query('COMMIT');
    expect(await outcome).toMatchObject({ state: 'CANCELLED' });
    // The watch waited for the finish and found the job terminal: nothing to flag.
    expect(await watched()).toBe(false);
  });
});
