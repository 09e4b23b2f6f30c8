/**
 * One conformance suite for every store (STYLE.md: River's riverdrivertest). Each test gets a
 * fresh store: a temp SQLite file, or a PostgreSQL database of its own. Both stores judge time by
 * their own clock (the host's, the database's), so leases here are short and real: a few waits
 * of a few hundred milliseconds are the price of testing expiry without a fake clock that
 * PostgreSQL would not honour.
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  IllegalTransition,
  InvalidInput,
  InvariantViolation,
  RequestKeyConflict,
  SchemaTooNew,
} from '../src/core/errors.js';
import { createStore } from '../src/store/open.js';
import type {
  AttemptFinish,
  ClaimedAttempt,
  DispatchMarkResult,
  JobInsert,
  JobTransition,
  LeaseRef,
  Store,
} from '../src/store/store.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type StoreKind,
  type TestStore,
} from './helpers/stores.js';
import { newJobInsert } from './helpers/jobs.js';

const pgReason = await pgUnavailableReason();

/** Short enough to wait out, long enough that a loaded CI box does not expire it by accident. */
const LEASE_MS = 300;

const newJob = newJobInsert;

function leaseOf(c: ClaimedAttempt, token = c.attempt.leaseToken): LeaseRef {
  return { jobId: c.job.id, attemptNo: c.attempt.attemptNo, leaseToken: token };
}

function succeeded(lease: LeaseRef, actor = 'w1'): AttemptFinish {
  return {
    lease,
    state: 'SUCCEEDED',
    reason: null,
    resultJson: JSON.stringify({ ok: true }),
    error: null,
    job: { to: 'SUCCEEDED' },
    actor,
  };
}

/** An UNKNOWN outcome (no definitive answer), to be checked again at once. */
function unknownOutcome(lease: LeaseRef): AttemptFinish {
  return {
    lease,
    state: 'UNKNOWN',
    reason: 'no-definitive-answer',
    resultJson: null,
    error: null,
    job: { to: 'UNKNOWN', checkAfterDispatchMs: 0 },
    actor: 'w1',
  };
}

/** Runs SQL against the store's tables behind its back (SQLite file, or the `reckon` schema). */
async function rawSql(ts: TestStore, sql: string): Promise<void> {
  if (ts.kind === 'sqlite') {
    const db = new Database(ts.url.slice('sqlite:'.length));
    try {
      db.exec(sql);
    } finally {
      db.close();
    }
    return;
  }
  const c = new pg.Client({ connectionString: ts.url });
  await c.connect();
  try {
    await c.query('SET search_path TO reckon');
    await c.query(sql);
  } finally {
    await c.end();
  }
}

/** One column of the rows a query behind the store's back returns. */
async function rawColumn(ts: TestStore, sql: string): Promise<unknown[]> {
  if (ts.kind === 'sqlite') {
    const db = new Database(ts.url.slice('sqlite:'.length), { readonly: true });
    try {
      return db.prepare(sql).pluck().all();
    } finally {
      db.close();
    }
  }
  const c = new pg.Client({ connectionString: ts.url });
  await c.connect();
  try {
    await c.query('SET search_path TO reckon');
    const r = await c.query<Record<string, unknown>>(sql);
    return r.rows.map((row) => Object.values(row)[0]);
  } finally {
    await c.end();
  }
}

describe.each(STORE_KINDS)('store conformance: %s', (kind: StoreKind) => {
  if (kind === 'postgres' && pgReason !== null) {
    it.skip(`skipped: ${pgReason}`, () => undefined);
    return;
  }

  let ts: TestStore;
  let store: Store;
  const opened: Store[] = [];

  async function open(): Promise<Store> {
    const s = await createStore(ts.url);
    await s.init();
    opened.push(s);
    return s;
  }

  beforeEach(async () => {
    ts = await makeTestStore(kind);
    store = await open();
  });

  afterEach(async () => {
    await Promise.all(opened.splice(0).map((s) => s.close()));
    await ts.drop();
  });

  async function insert(...jobs: JobInsert[]) {
    return store.jobInsertMany({ jobs, actor: 'test' });
  }

  async function claim(
    o: {
      limit?: number;
      leaseMs?: number;
      queues?: string[];
      operations?: string[];
      ownerId?: string;
    } = {},
  ) {
    return store.attemptClaimMany({
      ownerId: o.ownerId ?? 'w1',
      queues: o.queues ?? ['default'],
      operations: o.operations ?? ['op.a'],
      limit: o.limit ?? 10,
      leaseMs: o.leaseMs ?? LEASE_MS,
    });
  }

  async function claimOne(key: string, o: Partial<JobInsert> = {}, leaseMs = LEASE_MS) {
    await insert(newJob(key, o));
    const [c] = await claim({ limit: 1, leaseMs });
    expect(c?.job.requestKey).toBe(key);
    return c!;
  }

  /** A job whose attempt dispatched and ended UNKNOWN, due for reconciliation at once. */
  async function unknownJob(key: string): Promise<ClaimedAttempt> {
    const c = await claimOne(key);
    const [mark] = await store.attemptDispatchMany({ leases: [leaseOf(c)] });
    expect(mark?.ok).toBe(true);
    const [ok] = await store.attemptFinishMany({
      finishes: [
        {
          lease: leaseOf(c),
          state: 'UNKNOWN',
          reason: 'no-definitive-answer',
          resultJson: null,
          error: { name: 'Error', message: 'reset' },
          job: { to: 'UNKNOWN', checkAfterDispatchMs: 0 },
          actor: 'w1',
        },
      ],
    });
    expect(ok).toBe(true);
    return c;
  }

  async function detail(id: string) {
    const d = await store.jobGet({ id });
    expect(d).not.toBeNull();
    return d!;
  }

  // ------------------------------------------------------------------ lifecycle

  describe('lifecycle', () => {
    it('migrates once, reports its version, capabilities and clock', async () => {
      const again = await open(); // a second process opening a migrated store
      expect(await again.schemaVersion()).toBe(await store.schemaVersion());
      expect(await store.schemaVersion()).toBeGreaterThanOrEqual(1);
      const before = Date.now();
      const now = await store.clockNow();
      expect(Math.abs(now - before)).toBeLessThan(2_000);
      expect(store.kind).toBe(kind);
      expect(store.location).not.toMatch(/:[^@/:]+@/);
      if (kind === 'postgres')
        expect(store.capabilities).toEqual({
          clock: 'database',
          multiHost: true,
          crossProcessNotify: true,
          handOff: true,
        });
      else expect(store.capabilities.clock).toBe('host');
    });

    it('wakes a subscriber when another connection (process) enqueues', async () => {
      let woken = 0;
      const sub = await store.workSubscribe!({ queues: ['default'], onWork: () => void woken++ });
      try {
        const other = await open();
        await other.jobInsertMany({ jobs: [newJob('from-elsewhere')], actor: 'test' });
        const deadline = Date.now() + 2_000;
        while (woken === 0 && Date.now() < deadline) await sleep(5);
        expect(woken).toBeGreaterThan(0);
      } finally {
        await sub.close();
      }
    });

    it('refuses a store whose schema is newer than this code (SchemaTooNew)', async () => {
      const table =
        kind === 'postgres'
          ? 'reckon_migrations (version, name)'
          : 'reckon_migrations (version, name, applied_at)';
      const values = kind === 'postgres' ? `(999, 'future')` : `(999, 'future', 0)`;
      await rawSql(ts, `INSERT INTO ${table} VALUES ${values}`);
      const s = await createStore(ts.url);
      await expect(s.init()).rejects.toBeInstanceOf(SchemaTooNew);
      await s.close();
    });
  });

  // ------------------------------------------------------------------ insert

  describe('jobInsertMany', () => {
    it('inserts QUEUED jobs with an enqueued event, in the order given', async () => {
      const [a, b] = await insert(newJob('k1'), newJob('k2', { priority: 5 }));
      expect(a).toMatchObject({
        created: true,
        job: { requestKey: 'k1', state: 'QUEUED', attemptCount: 0 },
      });
      expect(b).toMatchObject({ created: true, job: { requestKey: 'k2', priority: 5 } });
      const d = await detail(a!.job.id);
      expect(d.job.input).toEqual({ key: 'k1' });
      expect(d.job.backoff).toEqual({ initialMs: 10, factor: 2, maxMs: 100 });
      expect(d.attempts).toEqual([]);
      expect(d.events.map((e) => [e.kind, e.toState, e.actor])).toEqual([
        ['enqueued', 'QUEUED', 'test'],
      ]);
    });

    it('deduplicates a known key with the same fingerprint, and records the decision', async () => {
      const [first] = await insert(newJob('k1'));
      const [again, fresh] = await insert(newJob('k1'), newJob('k2'));
      expect(again).toMatchObject({ created: false, job: { id: first!.job.id } });
      expect(fresh?.created).toBe(true);
      const d = await detail(first!.job.id);
      expect(d.events.map((e) => e.kind)).toEqual(['enqueued', 'enqueue-deduplicated']);
    });

    it('a different fingerprint is a RequestKeyConflict and the whole batch writes nothing', async () => {
      const [first] = await insert(newJob('k1'));
      const innocent = newJob('k2');
      const err = await insert(innocent, newJob('k1', { fingerprint: 'other' })).catch(
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(RequestKeyConflict);
      expect(err).toMatchObject({ requestKey: 'k1', existingJobId: first!.job.id });
      expect(await store.jobGet({ id: innocent.id })).toBeNull();
      expect((await detail(first!.job.id)).events).toHaveLength(1);
      expect(await store.jobList({ limit: 10 })).toHaveLength(1);
    });

    it('another operation under a known key is a RequestKeyConflict naming both; nothing written', async () => {
      // Same input, so the same fingerprint: only the operation tells the refund from the charge.
      const [first] = await insert(newJob('order-1', { operation: 'payments.charge' }));
      const innocent = newJob('k2');
      const err = await insert(
        innocent,
        newJob('order-1', { operation: 'payments.refund', fingerprint: 'fp-order-1' }),
      ).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RequestKeyConflict);
      expect(err).toMatchObject({
        requestKey: 'order-1',
        existingJobId: first!.job.id,
        existing: { operation: 'payments.charge', fingerprint: 'fp-order-1' },
        given: { operation: 'payments.refund', fingerprint: 'fp-order-1' },
      });
      expect((err as Error).message).toMatch(/payments\.charge.*payments\.refund/);
      expect(await store.jobGet({ id: innocent.id })).toBeNull();
      expect((await detail(first!.job.id)).events.map((e) => e.kind)).toEqual(['enqueued']);
      // Concurrent callers (merged into one commit): the conflicting one fails alone.
      const [ok, bad] = await Promise.allSettled([
        insert(newJob('k3')),
        insert(newJob('order-1', { operation: 'payments.refund', fingerprint: 'fp-order-1' })),
      ]);
      expect(ok.status).toBe('fulfilled');
      expect(bad.status === 'rejected' && bad.reason).toBeInstanceOf(RequestKeyConflict);
    });

    it('records the lookup grace with the job; rows written without it get the default 5000', async () => {
      const [a] = await insert(newJob('g1', { reconcileGraceMs: 12_000 }));
      expect(a!.job.reconcileGraceMs).toBe(12_000);
      expect((await detail(a!.job.id)).job.reconcileGraceMs).toBe(12_000);
      const [c] = await claim();
      expect(c!.job.reconcileGraceMs).toBe(12_000);
      // A row as code before the column wrote it (no grace given).
      const now = Date.now();
      const ts_ = kind === 'sqlite' ? String(now) : `to_timestamp(${now} / 1000.0)`;
      await rawSql(
        ts,
        `INSERT INTO jobs (id, queue, operation, input_json, request_key, request_fingerprint, state,
           priority, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms)
         VALUES ('old-job', 'default', 'op.a', '{}', 'old-key', 'fp', 'QUEUED', 0, ${ts_}, ${ts_}, ${ts_},
           1, '{"initialMs":10,"factor":2,"maxMs":100}', 1000)`,
      );
      expect((await detail('old-job')).job.reconcileGraceMs).toBe(5_000);
    });

    it('honours delayMs and an absolute runAt', async () => {
      const now = await store.clockNow();
      const [later, past] = await insert(
        newJob('later', { delayMs: 60_000 }),
        newJob('past', { runAt: now - 5_000 }),
      );
      expect(later!.job.runAt - later!.job.createdAt).toBe(60_000);
      expect(past!.job.runAt).toBe(now - 5_000);
      const claimed = await claim();
      expect(claimed.map((c) => c.job.requestKey)).toEqual(['past']);
    });

    it('answers each new job exactly as reading it back gives, for shared and varying columns', async () => {
      const now = await store.clockNow();
      const shared = await insert(newJob('s1'), newJob('s2'), newJob('s3'));
      const varying = await insert(
        newJob('v1', { queue: 'other', priority: -3, delayMs: 1_500, runId: 'r1', stepId: 'a' }),
        newJob('v2', { operation: 'op.b', runAt: now + 2_000, maxAttempts: 1, timeoutMs: 7 }),
        newJob('v3', { backoff: { initialMs: 1, factor: 1, maxMs: 1 }, inputJson: '[1,"x",null]' }),
      );
      // Text that array literals must escape: quotes, backslashes, commas, braces, NULL, unicode.
      const odd = 'a"b\\c,{d} NULL \u{1F600}';
      const escaped = await insert(
        newJob(`${odd}-1`, { inputJson: JSON.stringify({ odd }), runId: odd, stepId: '' }),
        newJob(`${odd}-2`, { inputJson: JSON.stringify([odd, '\n']), runId: 'NULL' }),
      );
      const shared2 = await insert(newJob('NULL', { runId: odd }), newJob('{}', { runId: odd }));
      // The general path: a dedup beside a new job.
      const mixed = await insert(newJob('s1'), newJob('m1', { delayMs: 250 }));
      for (const r of [...shared, ...varying, ...escaped, ...shared2, ...mixed]) {
        expect((await detail(r.job.id)).job).toEqual(r.job);
      }
      expect(mixed.map((r) => r.created)).toEqual([false, true]);
      expect(varying[0]!.job.runAt - varying[0]!.job.createdAt).toBe(1_500);
      expect(varying[1]!.job.runAt).toBe(now + 2_000);
      expect(escaped.map((r) => [r.job.requestKey, r.job.runId, r.job.stepId])).toEqual([
        [`${odd}-1`, odd, ''],
        [`${odd}-2`, 'NULL', null],
      ]);
      expect(escaped[1]!.job.input).toEqual([odd, '\n']);
      expect(shared2.map((r) => [r.job.requestKey, r.job.runId])).toEqual([
        ['NULL', odd],
        ['{}', odd],
      ]);
    });

    it('one call naming a key twice is judged as two calls in a row', async () => {
      const [first, again] = await insert(newJob('twice'), newJob('twice'));
      expect(first).toMatchObject({ created: true, job: { requestKey: 'twice' } });
      expect(again).toEqual({ created: false, job: first!.job });
      expect((await detail(first!.job.id)).events.map((e) => e.kind)).toEqual([
        'enqueued',
        'enqueue-deduplicated',
      ]);
      const err = await insert(newJob('fresh'), newJob('k9'), newJob('k9', { fingerprint: 'x' }))
        .then(() => null)
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RequestKeyConflict);
      expect((await store.jobList({ limit: 10 })).map((j) => j.requestKey)).toEqual(['twice']);
    });

    if (kind === 'sqlite') {
      it('rejects a caller transaction: SQLite cannot join one (InvalidInput)', async () => {
        await expect(
          store.jobInsertMany({ jobs: [newJob('k1')], actor: 'test', transaction: {} }),
        ).rejects.toBeInstanceOf(InvalidInput);
        expect(await store.jobList({ limit: 10 })).toEqual([]);
      });
    }
  });

  // ------------------------------------------------------------------ group commit

  describe('concurrent callers (group commit)', () => {
    it('answers each concurrent enqueue with its own jobs, all durable', async () => {
      const calls = Array.from({ length: 40 }, (_, i) =>
        insert(newJob(`g${i}a`), newJob(`g${i}b`)),
      );
      const results = await Promise.all(calls);
      results.forEach((r, i) => {
        expect(r.map((x) => [x.created, x.job.requestKey])).toEqual([
          [true, `g${i}a`],
          [true, `g${i}b`],
        ]);
      });
      // A second connection (another process's view) sees every one of them.
      const other = await open();
      expect(await other.jobList({ limit: 100 })).toHaveLength(80);
    });

    it('a conflicting caller fails alone: the concurrent callers beside it commit', async () => {
      const [first] = await insert(newJob('k1'));
      const before = insert(newJob('ok1'));
      const bad = insert(newJob('bad-innocent'), newJob('k1', { fingerprint: 'other' }));
      const after = insert(newJob('ok2'), newJob('k1'));
      const [r1, r2, r3] = await Promise.allSettled([before, bad, after]);
      expect(r1.status).toBe('fulfilled');
      expect(r2.status === 'rejected' && r2.reason).toBeInstanceOf(RequestKeyConflict);
      expect(r3.status === 'fulfilled' && r3.value.map((x) => x.created)).toEqual([true, false]);
      const keys = (await store.jobList({ limit: 10 })).map((j) => j.requestKey).sort();
      expect(keys).toEqual(['k1', 'ok1', 'ok2']);
      expect((await detail(first!.job.id)).events.map((e) => e.kind)).toEqual([
        'enqueued',
        'enqueue-deduplicated',
      ]);
    });

    // Calls made together while another runs are merged into one store call (PostgreSQL's group
    // commit); each caller must still be judged alone, as if the calls came one after the other.
    it('concurrent callers of one new key with one fingerprint: one creates it, the other is a dedup', async () => {
      const [, a, b] = await Promise.all([
        insert(newJob('first-in-line')),
        insert(newJob('same'), newJob('a-own')),
        insert(newJob('b-own'), newJob('same')),
      ]);
      const same = [a[0]!, b[1]!];
      expect(same.map((r) => r.created).sort()).toEqual([false, true]);
      const created = same.find((r) => r.created)!;
      expect(same.find((r) => !r.created)!.job).toEqual(created.job);
      expect([a[1]!.created, b[0]!.created]).toEqual([true, true]);
      const d = await detail(created.job.id);
      expect(d.job).toEqual(created.job);
      expect(d.events.map((e) => e.kind)).toEqual(['enqueued', 'enqueue-deduplicated']);
      expect(await store.jobList({ limit: 10 })).toHaveLength(4);
    });

    it('concurrent callers of one new key with different fingerprints: one commits, one conflicts', async () => {
      const [, a, b] = await Promise.allSettled([
        insert(newJob('first-in-line')),
        insert(newJob('same'), newJob('a-own')),
        insert(newJob('b-own'), newJob('same', { fingerprint: 'other' })),
      ]);
      const settled = [a, b];
      const won = settled.filter((r) => r.status === 'fulfilled');
      const lost = settled.filter((r) => r.status === 'rejected');
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(1);
      expect(lost[0]!.status === 'rejected' && lost[0]!.reason).toBeInstanceOf(RequestKeyConflict);
      const winner = won[0]!.status === 'fulfilled' ? won[0]!.value : [];
      expect(winner.map((r) => r.created)).toEqual([true, true]);
      const job = winner.find((r) => r.job.requestKey === 'same')!.job;
      expect(job.fingerprint).toBe(a === won[0] ? 'fp-same' : 'other');
      const d = await detail(job.id);
      expect(d.job).toEqual(job);
      expect(d.events.map((e) => e.kind)).toEqual(['enqueued']);
      // The loser wrote nothing: its own other job is not there either.
      const keys = (await store.jobList({ limit: 10 })).map((j) => j.requestKey).sort();
      expect(keys).toEqual(['first-in-line', 'same', a === won[0] ? 'a-own' : 'b-own'].sort());
    });

    it('concurrent markers and outcomes of different attempts each get their own answer', async () => {
      await insert(...Array.from({ length: 12 }, (_, i) => newJob(`m${i}`)));
      const claimed = await claim({ limit: 12, leaseMs: 5_000 });
      expect(claimed).toHaveLength(12);
      const marks = await Promise.all(
        claimed.map((c, i) =>
          store.attemptDispatchMany({ leases: [i === 3 ? leaseOf(c, 'stale') : leaseOf(c)] }),
        ),
      );
      marks.forEach(([m], i) => expect(m?.ok).toBe(i !== 3));
      const done = await Promise.all(
        claimed.map((c, i) =>
          store.attemptFinishMany({
            finishes: [i === 5 ? succeeded(leaseOf(c, 'stale')) : succeeded(leaseOf(c))],
          }),
        ),
      );
      done.forEach(([applied], i) => expect(applied).toBe(i !== 5));
      const d = await detail(claimed[0]!.job.id);
      expect(d.events.map((e) => e.kind)).toEqual([
        'enqueued',
        'leased',
        'dispatched',
        'attempt-succeeded',
      ]);
    });

    it('a broken invariant in one caller rejects that caller only', async () => {
      await insert(newJob('x'), newJob('y'));
      const [x, y] = await claim({ limit: 2, leaseMs: 5_000 });
      await store.attemptDispatchMany({ leases: [leaseOf(x!)] });
      // Marking x again is a bug (dispatched twice); y beside it is fine.
      const [twice, fine] = await Promise.allSettled([
        store.attemptDispatchMany({ leases: [leaseOf(x!)] }),
        store.attemptDispatchMany({ leases: [leaseOf(y!)] }),
      ]);
      expect(twice.status === 'rejected' && twice.reason).toBeInstanceOf(InvariantViolation);
      expect(fine.status === 'fulfilled' && fine.value[0]?.ok).toBe(true);
      expect((await detail(y!.job.id)).attempts[0]!.dispatchedAt).not.toBeNull();
    });

    /** The callers each commit of the store answers from now on (see `Store.onCommit`). */
    const commitSizes = (): (() => number[]) => {
      const sizes: number[] = [];
      const stop = store.onCommit!((c) => sizes.push(c.callers));
      return () => {
        stop();
        return sizes;
      };
    };

    // Markers and outcomes asked for while others run are merged into the next commit of their
    // kind (SQLite: of all kinds): each caller must still get its own answer.
    it('markers and outcomes asked for together each get their own answer and write their rows', async () => {
      await insert(...Array.from({ length: 13 }, (_, i) => newJob(`mf${i}`)));
      const claimed = await claim({ limit: 13, leaseMs: 5_000 });
      expect(claimed).toHaveLength(13);
      const ended = claimed.slice(0, 6);
      const marked = claimed.slice(7);
      await store.attemptDispatchMany({ leases: ended.map((c) => leaseOf(c)) });
      const commits = commitSizes();
      const [, ...answers] = await Promise.all([
        store.attemptDispatchMany({ leases: [leaseOf(claimed[6]!)] }),
        ...ended.map((c, i) =>
          store.attemptFinishMany({
            finishes: [succeeded(leaseOf(c, i === 2 ? 'stale' : undefined))],
          }),
        ),
        ...marked.map((c, i) =>
          store.attemptDispatchMany({ leases: [leaseOf(c, i === 4 ? 'stale' : undefined)] }),
        ),
      ]);
      // They were merged (PostgreSQL: the five markers in one commit, the outcomes but the
      // first in another; SQLite: all in one).
      expect(Math.max(...commits())).toBeGreaterThanOrEqual(5);
      const finishes = answers.slice(0, ended.length) as boolean[][];
      const marks = answers.slice(ended.length) as DispatchMarkResult[][];
      expect(finishes.map(([applied]) => applied)).toEqual([true, true, false, true, true, true]);
      expect(marks.map(([m]) => m?.ok)).toEqual([true, true, true, true, false, true]);
      for (const [i, c] of ended.entries()) {
        const d = await detail(c.job.id);
        expect(d.job.state).toBe(i === 2 ? 'LEASED' : 'SUCCEEDED');
        expect(d.events.map((e) => e.kind)).toEqual(
          i === 2
            ? ['enqueued', 'leased', 'dispatched']
            : ['enqueued', 'leased', 'dispatched', 'attempt-succeeded'],
        );
      }
      for (const [i, c] of marked.entries()) {
        const d = await detail(c.job.id);
        expect(d.job.state).toBe('LEASED');
        expect(d.attempts[0]!.dispatchedAt === null).toBe(i === 4);
        if (i !== 4)
          expect(marks[i]![0]).toMatchObject({ dispatchedAt: d.attempts[0]!.dispatchedAt });
      }
    });

    it('a broken invariant among markers and outcomes asked for together rejects its caller only', async () => {
      await insert(
        newJob('first'),
        newJob('twice'),
        newJob('fine'),
        newJob('unmarked'),
        newJob('m'),
      );
      const [first, twice, fine, unmarked, m] = await claim({ limit: 5, leaseMs: 5_000 });
      await store.attemptDispatchMany({ leases: [leaseOf(twice!), leaseOf(fine!)] });
      const [, again, ok, bad, mark] = await Promise.allSettled([
        store.attemptDispatchMany({ leases: [leaseOf(first!)] }),
        // Marked twice: a bug.
        store.attemptDispatchMany({ leases: [leaseOf(twice!)] }),
        store.attemptFinishMany({ finishes: [succeeded(leaseOf(fine!))] }),
        // UNKNOWN without a marker: a bug.
        store.attemptFinishMany({
          finishes: [unknownOutcome(leaseOf(unmarked!))],
        }),
        store.attemptDispatchMany({ leases: [leaseOf(m!)] }),
      ]);
      expect(again.status === 'rejected' && again.reason).toBeInstanceOf(InvariantViolation);
      expect(bad.status === 'rejected' && bad.reason).toBeInstanceOf(InvariantViolation);
      expect(ok.status === 'fulfilled' && ok.value).toEqual([true]);
      expect(mark.status === 'fulfilled' && mark.value[0]?.ok).toBe(true);
      expect((await detail(fine!.job.id)).job.state).toBe('SUCCEEDED');
      const u = await detail(unmarked!.job.id);
      expect([u.job.state, u.attempts[0]!.state]).toEqual(['LEASED', 'LEASED']);
      expect((await detail(m!.job.id)).attempts[0]!.dispatchedAt).not.toBeNull();
    });
  });

  // ------------------------------------------------------------------ reads

  describe('jobGet, jobList, eventAppendMany', () => {
    it('lists newest first with filters and keyset pagination', async () => {
      await insert(newJob('a'), newJob('b', { queue: 'mail' }), newJob('c', { operation: 'op.b' }));
      const all = await store.jobList({ limit: 10 });
      expect(all.map((j) => j.requestKey)).toEqual(['c', 'b', 'a']);
      expect((await store.jobList({ limit: 10, queue: 'mail' })).map((j) => j.requestKey)).toEqual([
        'b',
      ]);
      expect(
        (await store.jobList({ limit: 10, operation: 'op.b' })).map((j) => j.requestKey),
      ).toEqual(['c']);
      await insert(
        newJob('run-7:fetch', { runId: 'run-7' }),
        newJob('run-7:send', { runId: 'run-7' }),
      );
      expect((await store.jobList({ limit: 10, runId: 'run-7' })).map((j) => j.requestKey)).toEqual(
        ['run-7:send', 'run-7:fetch'],
      );
      expect(await store.jobList({ limit: 10, runId: 'run-8' })).toEqual([]);
      expect(
        (await store.jobList({ limit: 1, beforeId: all[0]!.id })).map((j) => j.requestKey),
      ).toEqual(['b']);
      await claim({ limit: 1 });
      expect(
        (await store.jobList({ limit: 10, states: ['LEASED'] })).map((j) => j.requestKey),
      ).toEqual(['a']);
      expect(await store.jobGet({ id: 'no-such-job' })).toBeNull();
    });

    it('appends events to known jobs and skips unknown ones', async () => {
      const [r] = await insert(newJob('a'));
      await store.eventAppendMany({
        events: [
          { jobId: r!.job.id, attemptNo: null, kind: 'note', actor: 'me', detail: { n: 1 } },
          { jobId: 'missing', attemptNo: null, kind: 'note', actor: 'me' },
          {
            jobId: r!.job.id,
            attemptNo: null,
            kind: 'note2',
            actor: 'me',
            fromState: 'X',
            toState: 'Y',
          },
        ],
      });
      const d = await detail(r!.job.id);
      expect(
        d.events.map((e) => [e.kind, e.detail, e.fromState, e.toState, e.fingerprint]),
      ).toEqual([
        ['enqueued', null, null, 'QUEUED', 'fp-a'],
        ['note', { n: 1 }, null, null, 'fp-a'],
        ['note2', null, 'X', 'Y', 'fp-a'],
      ]);
      expect(d.events[1]!.id).toBeGreaterThan(d.events[0]!.id);
    });

    it('events are append-only: UPDATE and DELETE behind the store fail', async () => {
      const [r] = await insert(newJob('a'));
      await store.eventAppendMany({
        events: [{ jobId: r!.job.id, attemptNo: null, kind: 'note', actor: 'me' }],
      });
      await expect(rawSql(ts, `UPDATE events SET kind = 'forged'`)).rejects.toThrow(/append-only/);
      await expect(rawSql(ts, `DELETE FROM events`)).rejects.toThrow(/append-only/);
      expect((await detail(r!.job.id)).events.map((e) => e.kind)).toEqual(['enqueued', 'note']);
    });

    it('routine steps are write-once columns, read back as the trail they stand for', async () => {
      const c = await claimOne('a');
      const [mark] = await store.attemptDispatchMany({ leases: [leaseOf(c)] });
      expect(mark?.ok).toBe(true);
      expect(await store.attemptFinishMany({ finishes: [succeeded(leaseOf(c))] })).toEqual([true]);
      const d = await detail(c.job.id);
      expect(d.events.map((e) => [e.kind, e.attemptNo, e.fromState, e.toState, e.actor])).toEqual([
        ['enqueued', null, null, 'QUEUED', 'test'],
        ['leased', 1, 'QUEUED', 'LEASED', 'w1'],
        ['dispatched', 1, null, null, 'w1'],
        ['attempt-succeeded', 1, 'LEASED', 'SUCCEEDED', 'w1'],
      ]);
      expect(d.events[1]!.detail).toEqual({ leaseMs: LEASE_MS });
      expect(d.events[3]!.detail).toEqual({ attemptState: 'SUCCEEDED' });
      expect(d.events.map((e) => e.at)).toEqual([
        d.job.createdAt,
        d.attempts[0]!.leasedAt,
        d.attempts[0]!.dispatchedAt,
        d.attempts[0]!.finishedAt,
      ]);
      // No event rows: each step is a column of its row, and none of them can change.
      for (const sql of [
        `UPDATE jobs SET enqueue_actor = 'forged'`,
        `UPDATE attempts SET lease_ms = 1`,
        `UPDATE attempts SET owner_id = 'forged'`,
        // A later time (the marker and the outcome may share a millisecond).
        `UPDATE attempts SET dispatched_at = dispatched_at + ${ts.kind === 'sqlite' ? '1' : `interval '1 millisecond'`}`,
        `UPDATE attempts SET ended_job = 'FAILED'`,
        `UPDATE attempts SET result_json = '{}'`,
      ])
        await expect(rawSql(ts, sql), sql).rejects.toThrow(/write-once/);
      await expect(rawSql(ts, `DELETE FROM events`)).resolves.toBeUndefined();
      expect((await detail(c.job.id)).events).toEqual(d.events);
    });

    it("an attempt does not copy its job's request key and fingerprint: reads take the job's", async () => {
      const c = await unknownJob('a');
      expect(c.attempt).toMatchObject({ requestKey: 'a', fingerprint: 'fp-a' });
      const [due] = await store.jobReconcileClaimMany({
        operations: ['op.a'],
        limit: 10,
        holdMs: 5_000,
      });
      expect(due?.attempt).toMatchObject({
        requestKey: 'a',
        fingerprint: 'fp-a',
        state: 'UNKNOWN',
      });
      const d = await detail(c.job.id);
      expect(d.attempts.map((a) => [a.requestKey, a.fingerprint])).toEqual([['a', 'fp-a']]);
      expect(d.events.map((e) => e.fingerprint)).toEqual(d.events.map(() => 'fp-a'));
      // The row itself holds neither (migration 13); rows written before it keep their copies.
      expect(
        await rawColumn(
          ts,
          `SELECT count(*) FROM attempts WHERE request_key IS NULL AND request_fingerprint IS NULL`,
        ),
      ).toEqual([kind === 'postgres' ? '1' : 1]);
      await rawSql(
        ts,
        `UPDATE attempts SET request_key = 'a', request_fingerprint = 'fp-a' WHERE job_id = '${c.job.id}'`,
      );
      expect((await detail(c.job.id)).attempts).toEqual(d.attempts);
    });

    it("an attempt leased before the columns gets its dispatched event, with its job's fingerprint", async () => {
      const c = await claimOne('a');
      // The row as the store wrote it before migration 11: no lease_ms (its marker is then an
      // event); before migration 13 it copied key and fingerprint, which now no row needs.
      await rawSql(
        ts,
        ts.kind === 'sqlite'
          ? 'DROP TRIGGER attempts_facts_once'
          : 'DROP TRIGGER attempts_facts_once ON attempts',
      );
      await rawSql(ts, `UPDATE attempts SET lease_ms = NULL WHERE job_id = '${c.job.id}'`);
      const [mark] = await store.attemptDispatchMany({ leases: [leaseOf(c)] });
      expect(mark?.ok).toBe(true);
      const d = await detail(c.job.id);
      expect(d.events.map((e) => [e.kind, e.attemptNo, e.actor, e.fingerprint, e.id > 0])).toEqual([
        ['enqueued', null, 'test', 'fp-a', false],
        ['dispatched', 1, 'w1', 'fp-a', true],
      ]);
    });

    it('a job written before the columns keeps its stored enqueued event, and its enqueuer', async () => {
      const [r] = await insert(newJob('old'));
      const id = r!.job.id;
      // The row as the store wrote it before migration 11: no enqueue_actor, an event instead.
      await rawSql(
        ts,
        ts.kind === 'sqlite'
          ? 'DROP TRIGGER jobs_facts_once'
          : 'DROP TRIGGER jobs_facts_once ON jobs',
      );
      await rawSql(ts, `UPDATE jobs SET enqueue_actor = NULL WHERE id = '${id}'`);
      await rawSql(
        ts,
        `INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
         SELECT id, NULL, request_fingerprint, 'enqueued', NULL, 'QUEUED', 'http:old', NULL, created_at
         FROM jobs WHERE id = '${id}'`,
      );
      const before = await detail(id);
      expect(before.events.map((e) => [e.kind, e.actor, e.id > 0])).toEqual([
        ['enqueued', 'http:old', true],
      ]);
      expect(before.enqueuedBy).toBe('http:old');
      // Claimed by the new code: its leased step is a column, after the stored enqueue.
      const [c] = await claim({ limit: 1, leaseMs: LEASE_MS });
      expect(c?.job.id).toBe(id);
      const after = await detail(id);
      expect(after.events.map((e) => [e.kind, e.actor])).toEqual([
        ['enqueued', 'http:old'],
        ['leased', 'w1'],
      ]);
      expect(after.events[0]).toEqual(before.events[0]);
    });

    it('a job awaiting approval keeps its enqueued event; its enqueuer is the column', async () => {
      const [r] = await insert(newJob('ask', { approval: { reason: 'big', expiresInMs: null } }));
      const d = await detail(r!.job.id);
      expect(d.events.map((e) => [e.kind, e.toState, e.actor, e.id > 0])).toEqual([
        ['enqueued', 'AWAITING_APPROVAL', 'test', true],
      ]);
      expect(d.enqueuedBy).toBe('test');
      const [q] = await insert(newJob('plain'));
      expect((await detail(q!.job.id)).enqueuedBy).toBe('test');
    });
  });

  // ------------------------------------------------------------------ claim

  describe('attemptClaimMany', () => {
    it('takes due jobs by priority DESC, run_at, then first come, up to the limit, filtered by queue and operation', async () => {
      const now = await store.clockNow();
      await insert(
        newJob('low', { priority: -1 }),
        newJob('old', { runAt: now - 10_000 }),
        newJob('high', { priority: 10 }),
        newJob('mail', { queue: 'mail', priority: 100 }),
        newJob('other-op', { operation: 'op.b', priority: 100 }),
        newJob('newer', { runAt: now - 5_000 }),
      );
      const first = await claim({ limit: 3 });
      expect(first.map((c) => c.job.requestKey)).toEqual(['high', 'old', 'newer']);
      const rest = await claim({ limit: 10 });
      expect(rest.map((c) => c.job.requestKey)).toEqual(['low']);
      const mail = await claim({ queues: ['mail', 'default'], operations: ['op.a', 'op.b'] });
      expect(mail.map((c) => c.job.requestKey)).toEqual(['mail', 'other-op']);
      // What a claim answers is the job and attempt as the store now holds them.
      for (const c of [...first, ...rest, ...mail]) {
        const d = await detail(c.job.id);
        expect(c.job).toEqual(d.job);
        expect(c.attempt).toEqual(d.attempts[0]);
      }
    });

    it('takes ties (same queue, priority and run_at) first come, first served', async () => {
      const runAt = (await store.clockNow()) - 1_000;
      const keys = Array.from({ length: 12 }, (_, i) => `tie${i}`);
      // Two calls, as two enqueues would be: insertion order and id order agree (uuid v7).
      await insert(...keys.slice(0, 5).map((k) => newJob(k, { runAt })));
      await insert(...keys.slice(5).map((k) => newJob(k, { runAt })));
      const taken: string[] = [];
      for (const limit of [1, 4, 2, 10])
        taken.push(...(await claim({ limit })).map((c) => c.job.requestKey));
      expect(taken).toEqual(keys);
      // Across queues, merged in the same order.
      await insert(
        ...Array.from({ length: 6 }, (_, i) =>
          newJob(`q${i}`, { runAt, queue: i % 2 === 0 ? 'a' : 'b' }),
        ),
      );
      const merged = await claim({ queues: ['b', 'a'], limit: 6 });
      expect(merged.map((c) => c.job.requestKey)).toEqual(['q0', 'q1', 'q2', 'q3', 'q4', 'q5']);
    });

    it('creates a LEASED attempt with a fresh token and expiry now + leaseMs on the store clock', async () => {
      const before = await store.clockNow();
      const c = await claimOne('a', {}, 5_000);
      const after = await store.clockNow();
      expect(c.job).toMatchObject({ state: 'LEASED', attemptCount: 1 });
      expect(c.attempt).toMatchObject({
        attemptNo: 1,
        state: 'LEASED',
        ownerId: 'w1',
        requestKey: 'a',
        fingerprint: 'fp-a',
        dispatchedAt: null,
      });
      expect(c.attempt.leaseToken.length).toBeGreaterThanOrEqual(16);
      expect(c.attempt.leasedAt).toBeGreaterThanOrEqual(before);
      expect(c.attempt.leasedAt).toBeLessThanOrEqual(after);
      expect(c.attempt.leaseExpiresAt - c.attempt.leasedAt).toBe(5_000);
      const d = await detail(c.job.id);
      expect(d.events.at(-1)).toMatchObject({
        kind: 'leased',
        fromState: 'QUEUED',
        toState: 'LEASED',
        attemptNo: 1,
        actor: 'w1',
      });
    });

    it('one lease per job: concurrent claimers split the jobs, each job leased once, on its one attempt', async () => {
      await insert(...Array.from({ length: 40 }, (_, i) => newJob(`k${i}`)));
      const others = await Promise.all([open(), open(), open()]);
      const rounds = await Promise.all(
        [store, ...others].map((s, i) =>
          s.attemptClaimMany({
            ownerId: `w${i}`,
            queues: ['default'],
            operations: ['op.a'],
            limit: 15,
            leaseMs: 5_000,
          }),
        ),
      );
      const ids = rounds.flat().map((c) => c.job.id);
      expect(ids).toHaveLength(40);
      expect(new Set(ids).size).toBe(40);
      expect(await claim()).toEqual([]);
      for (const c of rounds.flat()) {
        const d = await detail(c.job.id);
        expect(d.job).toMatchObject({ state: 'LEASED', attemptCount: 1 });
        expect(d.attempts.map((a) => [a.attemptNo, a.state, a.leaseToken])).toEqual([
          [1, 'LEASED', c.attempt.leaseToken],
        ]);
      }
      // No unique index stands behind this any more (migration 13): the claim takes only QUEUED
      // jobs, under their row locks, and gives each one attempt.
    });
  });

  // ------------------------------------------------------------------ dispatch

  describe('attemptDispatchMany (invariant 3)', () => {
    it('marks a held lease, and refuses a wrong token as lease-lost', async () => {
      const c = await claimOne('a');
      const [bad, good] = await store.attemptDispatchMany({
        leases: [leaseOf(c, 'not-the-token'), leaseOf(c)],
      });
      expect(bad).toEqual({ ok: false, reason: 'lease-lost' });
      expect(good).toMatchObject({ ok: true, leaseExpiresAt: c.attempt.leaseExpiresAt });
      const d = await detail(c.job.id);
      expect(d.attempts[0]!.dispatchedAt).toBe(good?.ok ? good.dispatchedAt : -1);
      expect(d.events.at(-1)).toMatchObject({ kind: 'dispatched', attemptNo: 1 });
    });

    it('refuses an expired lease on the store clock (no heartbeat, no reclaimer yet)', async () => {
      const c = await claimOne('a', {}, 150);
      await sleep(250);
      const [mark] = await store.attemptDispatchMany({ leases: [leaseOf(c)] });
      expect(mark).toEqual({ ok: false, reason: 'lease-expired' });
      expect((await detail(c.job.id)).attempts[0]!.dispatchedAt).toBeNull();
    });

    it('refuses the old owner after a takeover (expiry, then a new claim)', async () => {
      const old = await claimOne('a', {}, 150);
      await sleep(250);
      const [expired] = await store.attemptExpiredList({ skewMs: 0, limit: 10 });
      expect(expired?.attempt.leaseToken).toBe(old.attempt.leaseToken);
      const [applied] = await store.attemptExpireMany({
        expiries: [
          {
            lease: leaseOf(old),
            state: 'FAILED_BEFORE_SEND',
            reason: 'lease-expired-before-dispatch',
            job: { to: 'QUEUED', delayMs: 0 },
            actor: 'reclaimer',
          },
        ],
        skewMs: 0,
      });
      expect(applied).toBe(true);
      const [fresh] = await claim({ ownerId: 'w2', leaseMs: 5_000 });
      expect(fresh?.attempt.attemptNo).toBe(2);
      const [late] = await store.attemptDispatchMany({ leases: [leaseOf(old)] });
      expect(late).toEqual({ ok: false, reason: 'lease-lost' });
      expect((await store.attemptDispatchMany({ leases: [leaseOf(fresh!)] }))[0]?.ok).toBe(true);
    });
  });

  // ------------------------------------------------------------------ heartbeat

  describe('attemptHeartbeatMany', () => {
    it('extends held leases to now + leaseMs and refuses the others one by one', async () => {
      await insert(newJob('a'), newJob('b'));
      const [a, b] = await claim({ leaseMs: LEASE_MS });
      const before = await store.clockNow();
      const results = await store.attemptHeartbeatMany({
        leases: [leaseOf(a!), leaseOf(b!, 'stolen')],
        leaseMs: 10_000,
      });
      expect(results.map((r) => r.ok)).toEqual([true, false]);
      expect(results[0]!.leaseExpiresAt).toBeGreaterThanOrEqual(before + 10_000);
      expect(results[1]!.leaseExpiresAt).toBeNull();
      const d = await detail(a!.job.id);
      expect(d.attempts[0]!.leaseExpiresAt).toBe(results[0]!.leaseExpiresAt);
      await sleep(LEASE_MS + 100);
      // a's lease was extended; b's expired and is not revived by a late heartbeat.
      const late = await store.attemptHeartbeatMany({
        leases: [leaseOf(a!), leaseOf(b!)],
        leaseMs: 10_000,
      });
      expect(late.map((r) => r.ok)).toEqual([true, false]);
      expect(
        (await store.attemptExpiredList({ skewMs: 0, limit: 10 })).map((e) => e.job.id),
      ).toEqual([b!.job.id]);
    });
  });

  // ------------------------------------------------------------------ finish

  describe('attemptFinishMany', () => {
    it('records the outcome for the holder and fences everyone else', async () => {
      const c = await claimOne('a');
      const [stranger] = await store.attemptFinishMany({
        finishes: [succeeded(leaseOf(c, 'nope'))],
      });
      expect(stranger).toBe(false);
      expect((await detail(c.job.id)).job.state).toBe('LEASED');
      await store.attemptDispatchMany({ leases: [leaseOf(c)] });
      const [ok] = await store.attemptFinishMany({ finishes: [succeeded(leaseOf(c))] });
      expect(ok).toBe(true);
      const d = await detail(c.job.id);
      expect(d.job).toMatchObject({ state: 'SUCCEEDED', result: { ok: true } });
      expect(d.job.finishedAt).not.toBeNull();
      expect(d.attempts[0]).toMatchObject({ state: 'SUCCEEDED', result: { ok: true } });
      expect(d.events.at(-1)).toMatchObject({
        kind: 'attempt-succeeded',
        fromState: 'LEASED',
        toState: 'SUCCEEDED',
        actor: 'w1',
      });
      const [twice] = await store.attemptFinishMany({ finishes: [succeeded(leaseOf(c))] });
      expect(twice).toBe(false);
    });

    it('requeues a FAILED_BEFORE_SEND attempt after its delay, keeping the request key', async () => {
      const c = await claimOne('a');
      const [ok] = await store.attemptFinishMany({
        finishes: [
          {
            lease: leaseOf(c),
            state: 'FAILED_BEFORE_SEND',
            reason: 'threw-before-dispatch',
            resultJson: null,
            error: { name: 'Error', message: 'boom' },
            job: { to: 'QUEUED', delayMs: 200 },
            actor: 'w1',
          },
        ],
      });
      expect(ok).toBe(true);
      const d = await detail(c.job.id);
      expect(d.job.state).toBe('QUEUED');
      expect(d.job.runAt).toBe(d.attempts[0]!.finishedAt! + 200);
      expect(await claim()).toEqual([]);
      await sleep(250);
      const [again] = await claim();
      expect(again?.attempt).toMatchObject({ attemptNo: 2, requestKey: 'a' });
    });

    it('a broken invariant throws and writes nothing (UNKNOWN without a marker)', async () => {
      const c = await claimOne('a');
      await expect(
        store.attemptFinishMany({
          finishes: [unknownOutcome(leaseOf(c))],
        }),
      ).rejects.toBeInstanceOf(InvariantViolation);
      const d = await detail(c.job.id);
      expect(d.job.state).toBe('LEASED');
      expect(d.attempts[0]!.state).toBe('LEASED');
    });
  });

  // ------------------------------------------------------------------ expiry

  describe('attemptExpiredList and attemptExpireMany', () => {
    it('waits for expiry + skew on the store clock; two reclaimers end an attempt once', async () => {
      const c = await claimOne('a', {}, 150);
      await store.attemptDispatchMany({ leases: [leaseOf(c)] });
      await sleep(250);
      // Expired, but not past the skew tolerance: not listed, and not expired if asked anyway.
      expect(await store.attemptExpiredList({ skewMs: 2_000, limit: 10 })).toEqual([]);
      const expiry = {
        lease: leaseOf(c),
        state: 'UNKNOWN' as const,
        reason: 'lease-expired-after-dispatch',
        job: { to: 'UNKNOWN' as const, checkAfterDispatchMs: 0 },
        actor: 'reclaimer-1',
      };
      expect(await store.attemptExpireMany({ expiries: [expiry], skewMs: 2_000 })).toEqual([false]);
      const listed = await store.attemptExpiredList({ skewMs: 0, limit: 10 });
      expect(listed.map((e) => [e.job.id, e.attempt.dispatchedAt !== null])).toEqual([
        [c.job.id, true],
      ]);
      const second = await open();
      const [r1, r2] = await Promise.all([
        store.attemptExpireMany({ expiries: [expiry], skewMs: 0 }),
        second.attemptExpireMany({ expiries: [{ ...expiry, actor: 'reclaimer-2' }], skewMs: 0 }),
      ]);
      expect([...r1, ...r2].filter(Boolean)).toHaveLength(1);
      const d = await detail(c.job.id);
      expect(d.job.state).toBe('UNKNOWN');
      expect(d.attempts[0]).toMatchObject({
        state: 'UNKNOWN',
        reason: 'lease-expired-after-dispatch',
      });
      expect(d.events.filter((e) => e.kind === 'attempt-unknown')).toHaveLength(1);
      expect(await store.attemptExpiredList({ skewMs: 0, limit: 10 })).toEqual([]);
      // The fenced worker's outcome does not apply.
      expect(await store.attemptFinishMany({ finishes: [succeeded(leaseOf(c))] })).toEqual([false]);
    });

    it('a stale expiry never ends a newer attempt, and an expired lease is not renewed', async () => {
      const c = await claimOne('a', {}, 150);
      await sleep(250);
      const [listed] = await store.attemptExpiredList({ skewMs: 0, limit: 10 });
      expect(listed?.job.id).toBe(c.job.id);
      // Expired leases cannot be renewed ...
      expect(
        (await store.attemptHeartbeatMany({ leases: [leaseOf(c)], leaseMs: 5_000 }))[0]?.ok,
      ).toBe(false);
      // ... so renew it the only legal way for this test: a fresh claim after a reclaim.
      const expiry = {
        lease: leaseOf(c),
        state: 'FAILED_BEFORE_SEND' as const,
        reason: 'lease-expired-before-dispatch',
        job: { to: 'QUEUED' as const, delayMs: 0 },
        actor: 'reclaimer',
      };
      expect(await store.attemptExpireMany({ expiries: [expiry], skewMs: 0 })).toEqual([true]);
      const [fresh] = await claim({ leaseMs: 5_000 });
      // A stale expiry (the old lease) is refused for the new attempt, and the new one is not listed.
      expect(await store.attemptExpireMany({ expiries: [expiry], skewMs: 0 })).toEqual([false]);
      expect(
        await store.attemptExpireMany({
          expiries: [{ ...expiry, lease: leaseOf(fresh!) }],
          skewMs: 0,
        }),
      ).toEqual([false]);
      expect(await store.attemptExpiredList({ skewMs: 0, limit: 10 })).toEqual([]);
      const d = await detail(c.job.id);
      expect(d.attempts.map((a) => [a.state, a.reason])).toEqual([
        ['FAILED_BEFORE_SEND', 'lease-expired-before-dispatch'],
        ['LEASED', null],
      ]);
    });

    it('a lease its heartbeat extended past its first expiry is listed only once the extension passes', async () => {
      // PostgreSQL finds expired leases from their jobs' first expiry (migration 15): a lease
      // past it but extended must not be listed, and must be once the extension has passed.
      const c = await claimOne('a', {}, 1_000);
      const [beat] = await store.attemptHeartbeatMany({ leases: [leaseOf(c)], leaseMs: 3_000 });
      expect(beat?.ok).toBe(true);
      await sleep(1_300);
      expect(await store.attemptExpiredList({ skewMs: 0, limit: 10 })).toEqual([]);
      expect((await store.statsGet()).expiredLeases).toBe(0);
      await sleep(Math.max(0, beat!.leaseExpiresAt! - Date.now()));
      let listed = await store.attemptExpiredList({ skewMs: 0, limit: 10 });
      for (let i = 0; listed.length === 0 && i < 50; i++) {
        await sleep(20);
        listed = await store.attemptExpiredList({ skewMs: 0, limit: 10 });
      }
      expect(listed.map((e) => [e.job.id, e.attempt.attemptNo])).toEqual([[c.job.id, 1]]);
      expect((await store.statsGet()).expiredLeases).toBe(1);
    });
  });

  // ------------------------------------------------------------------ transition

  describe('jobTransition', () => {
    function resolve(jobId: string, o: Partial<JobTransition> = {}): JobTransition {
      return {
        jobId,
        from: 'UNKNOWN',
        to: 'SUCCEEDED',
        expectAttemptNo: 1,
        resolution: { kind: 'succeeded', source: 'lookup', evidence: { found: true } },
        resultJson: JSON.stringify({ via: 'lookup' }),
        event: { kind: 'reconciled', actor: 'reconciler', detail: { path: 'lookup' } },
        ...o,
      };
    }

    it('applies only from the expected state and attempt, and resolves the attempt once', async () => {
      const c = await unknownJob('a');
      expect(await store.jobTransition(resolve(c.job.id, { from: 'NEEDS_REVIEW' }))).toBe(false);
      // ABA fence: the job's latest attempt must still be the one judged.
      expect(await store.jobTransition(resolve(c.job.id, { expectAttemptNo: 2 }))).toBe(false);
      expect(await store.jobTransition(resolve(c.job.id))).toBe(true);
      const d = await detail(c.job.id);
      expect(d.job).toMatchObject({ state: 'SUCCEEDED', result: { via: 'lookup' } });
      expect(d.attempts[0]).toMatchObject({
        state: 'UNKNOWN',
        resolution: 'succeeded',
        resolutionSource: 'lookup',
        resolutionEvidence: { found: true },
      });
      expect(d.attempts[0]!.resolvedAt).not.toBeNull();
      expect(d.events.at(-1)).toMatchObject({
        kind: 'reconciled',
        fromState: 'UNKNOWN',
        toState: 'SUCCEEDED',
        detail: { path: 'lookup', resolution: 'succeeded', source: 'lookup' },
      });
      expect(await store.jobTransition(resolve(c.job.id))).toBe(false);
    });

    it('an ABA after a same-key retry: the old decision does not apply to the new attempt', async () => {
      const c = await unknownJob('a');
      expect(
        await store.jobTransition({
          jobId: c.job.id,
          from: 'UNKNOWN',
          to: 'QUEUED',
          expectAttemptNo: 1,
          resolution: { kind: 'retry', source: 'same-key', evidence: null },
          event: { kind: 'reconciled', actor: 'reconciler' },
        }),
      ).toBe(true);
      const [again] = await claim();
      expect(again?.attempt.attemptNo).toBe(2);
      // A stale decision about attempt 1, made while the job was UNKNOWN, must not land now.
      expect(await store.jobTransition(resolve(c.job.id, { resolution: undefined }))).toBe(false);
      expect((await detail(c.job.id)).job.state).toBe('LEASED');
    });

    it('counts an inconclusive lookup on the locked row: two decisions made on one read both count', async () => {
      const c = await unknownJob('a');
      const inconclusive: JobTransition = {
        jobId: c.job.id,
        from: 'UNKNOWN',
        to: 'UNKNOWN',
        expectAttemptNo: 1,
        recheckDelayMs: 0,
        lookupFailed: true,
        event: { kind: 'lookup-inconclusive', actor: 'reconciler' },
      };
      // Two reconcilers that read lookupFailures = 0 and both failed to look.
      const both = await Promise.all([
        store.jobTransition(inconclusive),
        (await open()).jobTransition(inconclusive),
      ]);
      expect(both).toEqual([true, true]);
      const d = await detail(c.job.id);
      expect(d.job.lookupFailures).toBe(2);
      expect(d.events.filter((e) => e.kind === 'lookup-inconclusive')).toHaveLength(2);
    });

    it('defers an UNKNOWN check, and throws on an illegal transition before writing', async () => {
      const c = await unknownJob('a');
      const now = await store.clockNow();
      expect(
        await store.jobTransition({
          jobId: c.job.id,
          from: 'UNKNOWN',
          to: 'UNKNOWN',
          expectAttemptNo: 1,
          recheckDelayMs: 60_000,
          lookupFailed: true,
          event: { kind: 'lookup-inconclusive', actor: 'reconciler' },
        }),
      ).toBe(true);
      const d = await detail(c.job.id);
      expect(d.job.lookupFailures).toBe(1);
      expect(d.job.nextCheckAt! - now).toBeGreaterThanOrEqual(60_000);
      // (The SQLite store throws these synchronously; the async wrapper accepts either.)
      await expect(async () =>
        store.jobTransition(resolve(c.job.id, { from: 'SUCCEEDED', to: 'QUEUED' })),
      ).rejects.toBeInstanceOf(IllegalTransition);
      await expect(async () =>
        store.jobTransition(resolve(c.job.id, { from: 'QUEUED', to: 'QUEUED' })),
      ).rejects.toBeInstanceOf(InvariantViolation);
      expect((await detail(c.job.id)).events).toHaveLength(d.events.length);
      expect(await store.jobTransition(resolve('missing'))).toBe(false);
    });
  });

  // ------------------------------------------------------------------ cancel

  describe('jobCancel', () => {
    it('cancels a QUEUED job', async () => {
      const [r] = await insert(newJob('a'));
      const res = await store.jobCancel({ id: r!.job.id, actor: 'op', reason: 'not needed' });
      expect(res).toMatchObject({
        cancelled: true,
        job: { state: 'CANCELLED', error: { name: 'Cancelled', message: 'not needed' } },
      });
      expect(await claim()).toEqual([]);
      expect(await store.jobCancel({ id: r!.job.id, actor: 'op', reason: 'x' })).toMatchObject({
        cancelled: false,
        why: 'it is CANCELLED',
      });
      expect(await store.jobCancel({ id: 'missing', actor: 'op', reason: 'x' })).toBeNull();
    });

    it('cancels a LEASED job before dispatch and fences its worker', async () => {
      const c = await claimOne('a', {}, 5_000);
      const res = await store.jobCancel({ id: c.job.id, actor: 'op', reason: 'stop' });
      expect(res).toMatchObject({ cancelled: true, job: { state: 'CANCELLED' } });
      expect(await store.attemptDispatchMany({ leases: [leaseOf(c)] })).toEqual([
        { ok: false, reason: 'lease-lost' },
      ]);
      expect(await store.attemptFinishMany({ finishes: [succeeded(leaseOf(c))] })).toEqual([false]);
      expect(
        (await store.attemptHeartbeatMany({ leases: [leaseOf(c)], leaseMs: 5_000 }))[0]?.ok,
      ).toBe(false);
      const d = await detail(c.job.id);
      expect(d.attempts[0]).toMatchObject({ state: 'FAILED_BEFORE_SEND', reason: 'cancelled' });
      expect(d.events.at(-1)).toMatchObject({
        kind: 'cancelled',
        fromState: 'LEASED',
        toState: 'CANCELLED',
        detail: { fencedOwner: 'w1' },
      });
    });

    it('refuses after dispatch: the request may have left', async () => {
      const c = await claimOne('a', {}, 5_000);
      await store.attemptDispatchMany({ leases: [leaseOf(c)] });
      const res = await store.jobCancel({ id: c.job.id, actor: 'op', reason: 'stop' });
      expect(res).toMatchObject({ cancelled: false, job: { state: 'LEASED' } });
      expect(res && !res.cancelled && res.why).toMatch(/dispatched/);
      expect(await store.attemptFinishMany({ finishes: [succeeded(leaseOf(c))] })).toEqual([true]);
    });
  });

  // ------------------------------------------------------------------ reconcile claim

  describe('jobReconcileClaimMany', () => {
    it('takes due UNKNOWN jobs of the given operations and holds them from other reconcilers', async () => {
      const a = await unknownJob('a');
      const due = await store.jobReconcileClaimMany({
        operations: ['op.a'],
        limit: 10,
        holdMs: 200,
      });
      expect(due.map((d) => [d.job.id, d.attempt.attemptNo, d.attempt.state])).toEqual([
        [a.job.id, 1, 'UNKNOWN'],
      ]);
      expect(
        await store.jobReconcileClaimMany({ operations: ['op.a'], limit: 10, holdMs: 200 }),
      ).toEqual([]);
      expect(
        await store.jobReconcileClaimMany({ operations: ['op.b'], limit: 10, holdMs: 200 }),
      ).toEqual([]);
      await sleep(300);
      const second = await open();
      const [x, y] = await Promise.all([
        store.jobReconcileClaimMany({ operations: ['op.a'], limit: 10, holdMs: 5_000 }),
        second.jobReconcileClaimMany({ operations: ['op.a'], limit: 10, holdMs: 5_000 }),
      ]);
      expect([...x, ...y].map((d) => d.job.id)).toEqual([a.job.id]);
      expect((await detail(a.job.id)).job.state).toBe('UNKNOWN');
    });
  });

  // ------------------------------------------------------------------ stats

  describe('statsGet', () => {
    it('counts by queue and state, the oldest due job, open cases by operation, expired leases', async () => {
      await unknownJob('u1');
      const now = await store.clockNow();
      await insert(
        newJob('q1', { runAt: now - 1_000 }),
        newJob('q2'),
        newJob('future', { delayMs: 60_000 }),
        newJob('m1', { queue: 'mail' }),
      );
      const stats = await store.statsGet();
      expect(Math.abs(stats.now - Date.now())).toBeLessThan(2_000);
      const byQueue = Object.fromEntries(stats.queues.map((q) => [q.queue, q]));
      expect(Object.keys(byQueue)).toEqual(['default', 'mail']);
      expect(byQueue.default!.counts).toMatchObject({
        QUEUED: 3,
        UNKNOWN: 1,
        LEASED: 0,
        SUCCEEDED: 0,
      });
      expect(byQueue.mail!.counts.QUEUED).toBe(1);
      expect(byQueue.default!.oldestDueAt).toBe(now - 1_000);
      expect(stats.byOperation).toEqual([{ operation: 'op.a', unknown: 1, needsReview: 0 }]);
      expect(stats.expiredLeases).toBe(0);
      await claim({ leaseMs: 100, limit: 1 });
      await sleep(200);
      expect((await store.statsGet()).expiredLeases).toBe(1);
    });
  });

  // ------------------------------------------------------------------ console queries

  describe('jobSearch', () => {
    const page = (o: Partial<Parameters<Store['jobSearch']>[0]> = {}) =>
      store.jobSearch({ limit: 50, scanRowsMax: 20_000, ...o });

    it('pages newest first by keyset, each job once, with every filter applied', async () => {
      const jobs = Array.from({ length: 23 }, (_, i) =>
        newJob(`k${i}`, {
          queue: i % 3 === 0 ? 'mail' : 'default',
          operation: i % 2 === 0 ? 'op.a' : 'op.b',
        }),
      );
      await insert(...jobs);
      const seen: string[] = [];
      let before: string | undefined;
      for (let calls = 0; calls < 10; calls++) {
        const r = await page({ limit: 5, ...(before ? { beforeId: before } : {}) });
        seen.push(...r.jobs.map((j) => j.id));
        if (r.nextBeforeId === null) break;
        before = r.nextBeforeId;
      }
      expect(seen).toEqual(jobs.map((j) => j.id).reverse());
      const mailA = await page({ queue: 'mail', operation: 'op.a' });
      expect(mailA.jobs.map((j) => j.requestKey)).toEqual(['k18', 'k12', 'k6', 'k0']);
      await claim({ limit: 2 });
      const leased = await page({ states: ['LEASED'] });
      expect(leased.jobs.map((j) => j.state)).toEqual(['LEASED', 'LEASED']);
      expect((await page({ states: ['LEASED', 'QUEUED'] })).jobs).toHaveLength(23);
    });

    it('reads the people-sized states through their partial indexes, keyset-paged', async () => {
      const u = await unknownJob('u-1');
      await insert(newJob('approve-me', { approval: { reason: 'big', expiresInMs: null } }));
      const open = await page({ states: ['UNKNOWN', 'AWAITING_APPROVAL', 'NEEDS_REVIEW'] });
      expect(open.jobs.map((j) => j.requestKey)).toEqual(['approve-me', 'u-1']);
      expect(open.nextBeforeId).toBeNull();
      const one = await page({ states: ['UNKNOWN', 'AWAITING_APPROVAL'], limit: 1 });
      expect(one.jobs.map((j) => j.requestKey)).toEqual(['approve-me']);
      expect(one.nextBeforeId).toBe(one.jobs[0]!.id);
      const two = await page({
        states: ['UNKNOWN', 'AWAITING_APPROVAL'],
        limit: 1,
        beforeId: one.nextBeforeId!,
      });
      expect(two.jobs.map((j) => j.id)).toEqual([u.job.id]);
    });

    it('finds a job by id, request key, run id, fingerprint and text in its input', async () => {
      const [a, b, c] = await insert(
        newJob('order-1', { inputJson: JSON.stringify({ note: 'Refund 50% for Ada_Lovelace' }) }),
        newJob('run-7:step-2', { runId: 'run-7', stepId: 'step-2' }),
        newJob('order-3', { fingerprint: 'f'.repeat(64) }),
        newJob('other', { inputJson: JSON.stringify({ note: 'refund 5 for Bob' }) }),
      );
      const keys = async (text: string) =>
        (await page({ text })).jobs.map((j) => j.requestKey).sort();
      expect(await keys(a!.job.id)).toEqual(['order-1']);
      expect(await keys('order-1')).toEqual(['order-1']);
      expect(await keys('run-7')).toEqual(['run-7:step-2']);
      expect(await keys(c!.job.fingerprint)).toEqual(['order-3']);
      // Case-insensitive; % and _ are literal, not wildcards.
      expect(await keys('50% FOR ada_')).toEqual(['order-1']);
      expect(await keys('refund')).toEqual(['order-1', 'other']);
      expect(await keys('%')).toEqual(['order-1']);
      expect(await keys("x' OR '1'='1")).toEqual([]);
      // The exact hits obey the other filters too.
      expect((await page({ text: b!.job.id, queue: 'mail' })).jobs).toEqual([]);
      expect(await store.jobGet({ id: a!.job.id })).not.toBeNull();
    });

    it('folds the case of ASCII letters only, the same on every store', async () => {
      await insert(newJob('dessert', { inputJson: JSON.stringify({ note: 'Crème BRÛLÉE' }) }));
      const found = async (text: string) => (await page({ text })).jobs.length === 1;
      expect(await found('crème')).toBe(true);
      expect(await found('brÛlÉe')).toBe(true);
      expect(await found('DESSERT')).toBe(true);
      // Other letters match as written: a search is a substring test over the stored text, the
      // per-row cost of a window that must stay cheap (docs/console-pages.md).
      expect(await found('CRÈME')).toBe(false);
      expect(await found('brûlée')).toBe(false);
    });

    it('reads at most scanRowsMax jobs per call and says where to continue', async () => {
      const jobs = Array.from({ length: 12 }, (_, i) =>
        newJob(`w${i}`, i === 1 ? { queue: 'q.rare' } : {}),
      );
      await insert(...jobs);
      const r1 = await page({ queue: 'q.rare', scanRowsMax: 5 });
      expect(r1.jobs).toEqual([]);
      expect(r1.scanStopped).toBe(true);
      expect(r1.nextBeforeId).toBe(jobs[7]!.id);
      const r2 = await page({ queue: 'q.rare', scanRowsMax: 5, beforeId: r1.nextBeforeId! });
      expect(r2).toMatchObject({ jobs: [], scanStopped: true, nextBeforeId: jobs[2]!.id });
      const r3 = await page({ queue: 'q.rare', scanRowsMax: 5, beforeId: r2.nextBeforeId! });
      expect(r3.jobs.map((j) => j.requestKey)).toEqual(['w1']);
      expect(r3).toMatchObject({ scanStopped: false, nextBeforeId: null });
    });

    it("with an operation, the window is that operation's newest jobs: a rare one is found", async () => {
      const jobs = Array.from({ length: 12 }, (_, i) =>
        newJob(`o${i}`, i === 1 || i === 4 ? { operation: 'op.rare' } : {}),
      );
      await insert(...jobs);
      const r1 = await page({ operation: 'op.rare', scanRowsMax: 5 });
      expect(r1.jobs.map((j) => j.requestKey)).toEqual(['o4', 'o1']);
      expect(r1).toMatchObject({ scanStopped: false, nextBeforeId: null });
      // The window counts the operation's jobs only: one of them read, then where to go on.
      const r2 = await page({ operation: 'op.rare', text: 'matches nothing', scanRowsMax: 1 });
      expect(r2).toMatchObject({ jobs: [], scanStopped: true, nextBeforeId: jobs[4]!.id });
      const r3 = await page({
        operation: 'op.rare',
        scanRowsMax: 1,
        beforeId: jobs[4]!.id,
        text: 'o1',
      });
      expect(r3.jobs.map((j) => j.requestKey)).toEqual(['o1']);
    });

    it('filters by creation time (the time in the uuid v7 id)', async () => {
      await insert(newJob('early-1'), newJob('early-2'));
      await sleep(30);
      const t = await store.clockNow();
      await sleep(30);
      await insert(newJob('late-1'));
      const keys = async (o: { createdFrom?: number; createdTo?: number }) =>
        (await page(o)).jobs.map((j) => j.requestKey);
      expect(await keys({ createdFrom: t })).toEqual(['late-1']);
      expect(await keys({ createdTo: t })).toEqual(['early-2', 'early-1']);
      expect(await keys({ createdFrom: t - 60_000, createdTo: t + 60_000 })).toHaveLength(3);
      expect(await keys({ createdFrom: t + 60_000 })).toEqual([]);
    });
  });

  describe('statsActivityGet', () => {
    it('counts ended jobs per bucket and UNKNOWN / NEEDS_REVIEW growth', async () => {
      await unknownJob('u1');
      const c = await claimOne('s1');
      await store.attemptDispatchMany({ leases: [leaseOf(c)] });
      expect(await store.attemptFinishMany({ finishes: [succeeded(leaseOf(c))] })).toEqual([true]);
      await insert(newJob('c1'));
      const job = (await page0()).find((j) => j.requestKey === 'c1')!;
      expect((await store.jobCancel({ id: job.id, actor: 't', reason: 'test' }))?.cancelled).toBe(
        true,
      );
      const a = await store.statsActivityGet({
        windowMs: 3_600_000,
        bucketMs: 300_000,
        bucketRowsMax: 1_000,
      });
      expect(Math.abs(a.now - Date.now())).toBeLessThan(2_000);
      expect(a.finished).toHaveLength(12);
      expect(a.finished[0]!.at).toBe(a.now - 3_600_000);
      const last = a.finished[11]!;
      expect(last).toMatchObject({ succeeded: 1, failed: 0, cancelled: 1, estimated: false });
      expect(a.finished.slice(0, 11).every((b) => b.succeeded + b.cancelled === 0)).toBe(true);
      expect(a.unknown).toEqual({ now: 1, entered: 1 });
      expect(a.needsReview).toEqual({ now: 0, entered: 0 });
      const narrow = await store.statsActivityGet({ windowMs: 1, bucketMs: 1, bucketRowsMax: 10 });
      expect(narrow.unknown.now).toBe(1);
      // A bucket with more ended jobs than it may read is estimated from its latest ones.
      const sampled = await store.statsActivityGet({
        windowMs: 3_600_000,
        bucketMs: 3_600_000,
        bucketRowsMax: 1,
      });
      expect(sampled.finished).toHaveLength(1);
      expect(sampled.finished[0]!.estimated).toBe(true);
      expect(
        sampled.finished[0]!.succeeded + sampled.finished[0]!.cancelled,
      ).toBeGreaterThanOrEqual(1);
    });

    async function page0() {
      return (await store.jobSearch({ limit: 50, scanRowsMax: 100 })).jobs;
    }
  });
});
