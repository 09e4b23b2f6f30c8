/**
 * Approval before dispatch (AWAITING_APPROVAL), on both stores: a job of an operation defined
 * with `approval` is never claimed until a person approves it; denied or expired, it ends
 * CANCELLED with no attempt and no effect at the downstream. Judged at the downstream.
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it, type TestContext } from 'vitest';
import {
  ApprovalInputChanged,
  inputHashOf,
  InvalidInput,
  JobNotFound,
  JobStateConflict,
  OutcomePending,
  defineOperation,
  openQueue,
} from '../src/index.js';
import type { AnyOperation } from '../src/core/operation.js';
import {
  LATEST_SCHEMA_VERSION as PG_LATEST,
  MIGRATIONS as PG_MIGRATIONS,
  MIGRATIONS_TABLE_SQL as PG_MIGRATIONS_TABLE_SQL,
} from '../src/store/postgres/schema.js';
import {
  LATEST_SCHEMA_VERSION as SQLITE_LATEST,
  MIGRATIONS as SQLITE_MIGRATIONS,
} from '../src/store/sqlite/schema.js';
import { APPROVAL_EXPIRED_ERROR } from '../src/store/plan/index.js';
import { rewriteTables } from '../src/store/sqlite/schema.js';
import { createStore } from '../src/store/open.js';
import type {
  AttemptRecord,
  EventRecord,
  JobDetail,
  JobInsert,
  Store,
} from '../src/store/store.js';
import type { Flavour } from '../src/testkit/operations.js';
import { judgeDetails } from '../src/testkit/verdict.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  tempSqliteStore,
} from './helpers/stores.js';
import { Rig, expectKeptPromises, until } from './reliability/harness.js';
import { newJobInsert } from './helpers/jobs.js';

/** The rig's downstream operation of `flavour`, needing approval. */
function approvalOp(
  rig: Rig,
  flavour: Flavour = 'lookup',
  extra: { approval?: unknown; approvalTimeoutMs?: number | null } = {},
): AnyOperation {
  const base = rig.op(flavour);
  return defineOperation({
    ...base.spec,
    approval: (extra.approval ?? true) as never,
    ...(extra.approvalTimeoutMs !== undefined
      ? { approvalTimeoutMs: extra.approvalTimeoutMs }
      : {}),
  });
}

describe('defineOperation({ approval })', () => {
  it('validates the options', () => {
    const execute = () => Promise.resolve(1);
    expect(() => defineOperation({ name: 'a', execute, approval: 'yes' as never })).toThrow(
      InvalidInput,
    );
    expect(() => defineOperation({ name: 'a', execute, approvalTimeoutMs: 1000 })).toThrow(
      /approvalTimeoutMs is set but approval is not/,
    );
    expect(() =>
      defineOperation({ name: 'a', execute, approval: true, approvalTimeoutMs: -1 }),
    ).toThrow(InvalidInput);
    expect(defineOperation({ name: 'a', execute, approval: true }).approvalTimeoutMs).toBe(
      24 * 3600_000,
    );
    expect(
      defineOperation({ name: 'a', execute, approval: true, approvalTimeoutMs: 0 })
        .approvalTimeoutMs,
    ).toBeNull();
  });
});

describe.each(STORE_KINDS)('approvals on %s', (kind) => {
  it('approve: never claimed while awaiting; once approved, runs exactly once at the downstream', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig);
    // An idle worker of this queue is running: the job is not handed to it at enqueue.
    const sentinel = rig.op('idempotent');
    const w = await rig.worker({ operations: [op, sentinel] });
    const job = await rig.q.enqueue(op, { n: 1 }, { key: 'approve-1' });
    expect(job).toMatchObject({ state: 'AWAITING_APPROVAL', approvalReason: null });
    expect(job.approvalExpiresAt).toBe(job.createdAt + 24 * 3600_000);
    // The same key attaches to the awaiting job.
    const again = await rig.q.enqueue(op, { n: 1 }, { key: 'approve-1' });
    expect(again).toMatchObject({ id: job.id, deduplicated: true, state: 'AWAITING_APPROVAL' });

    // A job enqueued after it, on the same queue, runs: the worker has claimed since the
    // awaiting job was written, and passed it over.
    const after = await rig.q.enqueue(sentinel, { n: 2 }, { key: 'idempotent-after-1' });
    await until(
      'the later job to succeed',
      async () => (await rig.job(after.id)).job.state === 'SUCCEEDED',
    );
    expect(w.isRunning).toBe(true);
    const waiting = await rig.job(job.id);
    expect(waiting.job.state).toBe('AWAITING_APPROVAL');
    expect(waiting.attempts).toEqual([]);
    expect(rig.downstream.requestsOf('approve-1')).toBe(0);

    const listed = await rig.q.approvals.list();
    expect(listed.map((j) => j.id)).toEqual([job.id]);
    expect(listed[0]).toMatchObject({ input: { n: 1 }, approvalReason: null });
    expect(listed[0]!.ageMs).toBeGreaterThanOrEqual(0);
    expect(listed[0]!.expiresInMs).toBeGreaterThan(23 * 3600_000);

    const decided = await rig.q.approvals.decide(job.id, {
      approve: true,
      actor: 'alice',
      note: 'looks right',
    });
    expect(decided).toMatchObject({ state: 'QUEUED', approvalExpiresAt: null });
    await until(
      'the job to succeed',
      async () => (await rig.job(job.id)).job.state === 'SUCCEEDED',
    );
    expect(rig.downstream.effectsOf('approve-1')).toBe(1);
    const { events, attempts } = await rig.job(job.id);
    expect(attempts).toHaveLength(1);
    expect(events[0]).toMatchObject({ kind: 'enqueued', toState: 'AWAITING_APPROVAL' });
    const approved = events.find((e) => e.kind === 'approved')!;
    expect(approved).toMatchObject({
      fromState: 'AWAITING_APPROVAL',
      toState: 'QUEUED',
      actor: 'operator:alice',
      detail: { approve: true, note: 'looks right' },
    });
    expect(approved.at).toBe(decided.updatedAt);
    expect(await rig.q.approvals.list()).toEqual([]);
    expectKeptPromises(await rig.verdict([job.id]));
  });

  it('deny: CANCELLED with the decision as its error, no attempt, no effect', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'none', {
      approval: (input: { n: number }) => (input.n > 100 ? `amount ${input.n} over 100` : false),
    });
    const small = await rig.q.enqueue(op, { n: 5 }, { key: 'small' });
    const big = await rig.q.enqueue(op, { n: 500 }, { key: 'big' });
    expect(small.state).toBe('QUEUED');
    expect(big).toMatchObject({
      state: 'AWAITING_APPROVAL',
      approvalReason: 'amount 500 over 100',
    });
    const first = (await rig.job(big.id)).events[0]!;
    expect(first.detail).toEqual({
      approval: { reason: 'amount 500 over 100', expiresAt: big.approvalExpiresAt },
    });

    const denied = await rig.q.approvals.decide(big.id, {
      approve: false,
      actor: 'bob',
      note: 'too much',
    });
    expect(denied).toMatchObject({
      state: 'CANCELLED',
      error: { name: 'ApprovalDenied', message: 'denied by operator:bob: too much' },
    });
    expect(denied.finishedAt).not.toBeNull();
    await rig.worker({ operations: [op] });
    await rig.settle();
    const { job, attempts, events } = await rig.job(big.id);
    expect(job.state).toBe('CANCELLED');
    expect(attempts).toEqual([]);
    expect(events.map((e) => [e.kind, e.fromState, e.toState, e.actor])).toEqual([
      ['enqueued', null, 'AWAITING_APPROVAL', 'api'],
      ['denied', 'AWAITING_APPROVAL', 'CANCELLED', 'operator:bob'],
    ]);
    expect(rig.downstream.effectsOf('big')).toBe(0);
    expect(rig.downstream.effectsOf('small')).toBe(1);
    // Decided once: a second decision conflicts, and so does one on a job that never awaited.
    await expect(
      rig.q.approvals.decide(big.id, { approve: true, actor: 'carol' }),
    ).rejects.toBeInstanceOf(JobStateConflict);
    await expect(
      rig.q.approvals.decide(small.id, { approve: true, actor: 'carol' }),
    ).rejects.toMatchObject({ code: 'JOB_STATE_CONFLICT', state: 'SUCCEEDED' });
    await expect(
      rig.q.approvals.decide('no-such-job', { approve: true, actor: 'carol' }),
    ).rejects.toBeInstanceOf(JobNotFound);
    await expect(
      rig.q.approvals.decide(big.id, { approve: true, actor: ' ' }),
    ).rejects.toBeInstanceOf(InvalidInput);
    expectKeptPromises(await rig.verdict([big.id, small.id]));
  });

  it('a batch of jobs that need approval and jobs that do not, with an idle worker running: only the latter run', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'idempotent', {
      approval: (input: { n: number }) => input.n % 2 === 1,
    });
    await rig.worker({ operations: [op] });
    const jobs = await rig.q.enqueueMany(
      op,
      [0, 1, 2, 3].map((n) => ({ input: { n }, key: `mixed-${n}` })),
    );
    expect(jobs.map((j) => j.state)).toEqual([
      expect.stringMatching(/^(QUEUED|LEASED)$/),
      'AWAITING_APPROVAL',
      expect.stringMatching(/^(QUEUED|LEASED)$/),
      'AWAITING_APPROVAL',
    ]);
    await rig.settle();
    const states = await Promise.all(jobs.map(async (j) => (await rig.job(j.id)).job.state));
    expect(states).toEqual(['SUCCEEDED', 'AWAITING_APPROVAL', 'SUCCEEDED', 'AWAITING_APPROVAL']);
    expect([0, 1, 2, 3].map((n) => rig.downstream.effectsOf(`mixed-${n}`))).toEqual([1, 0, 1, 0]);
    const v = await rig.verdict();
    expectKeptPromises(v);
    expect(v.byState.AWAITING_APPROVAL).toBe(2);
  });

  it.runIf(kind === 'postgres')(
    'in the caller’s transaction (outbox): awaiting iff it commits, run once approved',
    async (ctx) => {
      const rig = await Rig.open(ctx, kind);
      const op = approvalOp(rig, 'none');
      await rig.worker({ operations: [op] });
      const app = new pg.Client({ connectionString: rig.store.url });
      await app.connect();
      ctx.onTestFinished(() => app.end());
      await app.query('BEGIN');
      await rig.q.enqueue(op, { n: 1 }, { key: 'tx-1', transaction: app });
      await app.query('ROLLBACK');
      await app.query('BEGIN');
      const job = await rig.q.enqueue(op, { n: 2 }, { key: 'tx-2', transaction: app });
      await app.query('COMMIT');
      expect((await rig.q.jobs()).map((j) => [j.requestKey, j.state])).toEqual([
        ['tx-2', 'AWAITING_APPROVAL'],
      ]);
      await rig.q.approvals.decide(job.id, { approve: true, actor: 'a' });
      await until(
        'the job to succeed',
        async () => (await rig.job(job.id)).job.state === 'SUCCEEDED',
      );
      expect(rig.downstream.effectsOf('tx-2')).toBe(1);
    },
  );

  it('q.call of a job that needs approval: OutcomePending while it waits; a waiter hears the decision', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'lookup');
    await rig.worker({ operations: [op] });
    const pending = await rig.q.call(op, { n: 1 }, { key: 'call-1', timeoutMs: 200 }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(pending).toBeInstanceOf(OutcomePending);
    expect(pending).toMatchObject({ state: 'AWAITING_APPROVAL', reason: 'timeout' });
    const jobId = (pending as OutcomePending).jobId;
    const approved = rig.q.waitFor(jobId, { timeoutMs: 20_000 });
    await rig.q.approvals.decide(jobId, { approve: true, actor: 'alice' });
    expect(await approved).toMatchObject({ state: 'SUCCEEDED', jobId });
    expect(rig.downstream.effectsOf('call-1')).toBe(1);

    const other = await rig.q
      .call(op, { n: 2 }, { key: 'call-2', timeoutMs: 1 })
      .catch((err: OutcomePending) => err);
    const denied = rig.q.waitFor(other.jobId, { timeoutMs: 20_000 });
    await rig.q.approvals.decide(other.jobId, { approve: false, actor: 'bob', note: 'no' });
    expect(await denied).toMatchObject({
      state: 'CANCELLED',
      error: { name: 'ApprovalDenied', message: 'denied by operator:bob: no' },
    });
    // Calling again with the same key attaches to the decided job: no second side effect.
    expect(await rig.q.call(op, { n: 1 }, { key: 'call-1', timeoutMs: 1_000 })).toMatchObject({
      state: 'SUCCEEDED',
      jobId,
    });
    expect(rig.downstream.effectsOf('call-1')).toBe(1);
    expect(rig.downstream.effectsOf('call-2')).toBe(0);
  });

  it('an approval function that throws rejects the enqueue, naming the operation', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'none', {
      approval: () => {
        throw new Error('policy service down');
      },
    });
    await expect(rig.q.enqueue(op, { n: 1 })).rejects.toThrow(
      /operation downstream\.effect\.none: approval threw: policy service down/,
    );
    expect(await rig.q.jobs()).toEqual([]);
  });

  it('timeout: an approval nobody decides expires, CANCELLED, no attempt, no effect', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'lookup', { approvalTimeoutMs: 300 });
    const never = approvalOp(rig, 'idempotent', { approvalTimeoutMs: null });
    const job = await rig.q.enqueue(op, { n: 1 }, { key: 'expires' });
    const waits = await rig.q.enqueue(never, { n: 2 }, { key: 'waits' });
    expect(waits.approvalExpiresAt).toBeNull();
    // Not yet due: nothing expires.
    expect(await rig.q.approvals.expireOnce()).toBe(false);
    expect((await rig.job(job.id)).job.state).toBe('AWAITING_APPROVAL');
    // The worker's loop expires it on the store's clock.
    await rig.worker({ operations: [op, never] });
    await until(
      'the approval to expire',
      async () => (await rig.job(job.id)).job.state === 'CANCELLED',
    );
    const { job: after, attempts, events } = await rig.job(job.id);
    expect(after.error).toMatchObject({ name: 'ApprovalExpired' });
    expect(attempts).toEqual([]);
    const expired = events.at(-1)!;
    expect(expired).toMatchObject({
      kind: 'approval-expired',
      fromState: 'AWAITING_APPROVAL',
      toState: 'CANCELLED',
      detail: { expiresAt: job.approvalExpiresAt },
    });
    expect(expired.at).toBeGreaterThanOrEqual(job.approvalExpiresAt!);
    // Expiry is idempotent: another pass finds nothing; the decision came first.
    expect(await rig.q.approvals.expireOnce()).toBe(false);
    await expect(
      rig.q.approvals.decide(job.id, { approve: true, actor: 'late' }),
    ).rejects.toBeInstanceOf(JobStateConflict);
    expect((await rig.job(waits.id)).job.state).toBe('AWAITING_APPROVAL');
    // q.cancel takes an awaiting job too, as a denial would.
    const cancelled = await rig.q.cancel(waits.id, { actor: 'ops', reason: 'no longer wanted' });
    expect(cancelled).toMatchObject({
      state: 'CANCELLED',
      error: { name: 'Cancelled', message: 'no longer wanted' },
    });
    expect((await rig.job(waits.id)).events.at(-1)).toMatchObject({
      kind: 'cancelled',
      fromState: 'AWAITING_APPROVAL',
      actor: 'ops',
    });
    expect(rig.downstream.stats.requests).toBe(0);
  });

  it('two approvers at once (two queues on the store): one decision, the other JobStateConflict', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'none');
    const other = await openQueue({ store: rig.store.url });
    ctx.onTestFinished(() => other.close());
    for (let round = 0; round < 5; round++) {
      const job = await rig.q.enqueue(op, { n: round }, { key: `race-${round}` });
      const results = await Promise.allSettled([
        rig.q.approvals.decide(job.id, { approve: true, actor: 'alice' }),
        other.approvals.decide(job.id, { approve: false, actor: 'bob' }),
      ]);
      const won = results.filter((r) => r.status === 'fulfilled');
      const lost = results.filter((r) => r.status === 'rejected');
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(1);
      expect((lost[0] as PromiseRejectedResult).reason).toBeInstanceOf(JobStateConflict);
      const { events } = await rig.job(job.id);
      expect(events.filter((e) => e.fromState === 'AWAITING_APPROVAL')).toHaveLength(1);
    }
  });

  it('an approval bound to the hash of another input decides nothing (ApprovalInputChanged)', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'none');
    const job = await rig.q.enqueue(op, { amount: 10 }, { key: 'bound-1' });
    const seen = inputHashOf({ amount: 1000 });
    await expect(
      rig.q.approvals.decide(job.id, { approve: true, actor: 'alice', inputHash: seen }),
    ).rejects.toBeInstanceOf(ApprovalInputChanged);
    await expect(
      rig.q.approvals.decide(job.id, { approve: true, actor: 'alice', inputHash: 'nope' }),
    ).rejects.toBeInstanceOf(InvalidInput);
    expect((await rig.job(job.id)).job.state).toBe('AWAITING_APPROVAL');
    // Key order does not change the hash: it is the canonical JSON's.
    expect(inputHashOf({ b: 1, a: 2 })).toBe(inputHashOf({ a: 2, b: 1 }));
    const decided = await rig.q.approvals.decide(job.id, {
      approve: true,
      actor: 'alice',
      inputHash: inputHashOf(job.input),
    });
    expect(decided.state).toBe('QUEUED');
  });

  it('the approval list filters by operation and counts by operation', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const a = approvalOp(rig, 'none');
    const b = approvalOp(rig, 'lookup');
    await rig.q.enqueueMany(a, [
      { input: { n: 1 }, key: 'a1' },
      { input: { n: 2 }, key: 'a2' },
    ]);
    await rig.q.enqueue(b, { n: 3 }, { key: 'b1' });
    expect((await rig.q.approvals.list({ operation: a.name })).map((j) => j.requestKey)).toEqual([
      'a1',
      'a2',
    ]);
    expect(await rig.q.approvals.list({ limit: 1 })).toHaveLength(1);
    const stats = await rig.q.store.jobApprovalStats();
    expect(stats.byOperation.map((o) => [o.operation, o.awaiting])).toEqual([
      [b.name, 1],
      [a.name, 2],
    ]);
    const counts = (await rig.q.store.statsGet()).queues[0]!.counts;
    expect(counts.AWAITING_APPROVAL).toBe(3);
    expect((await rig.q.jobs({ state: 'AWAITING_APPROVAL' })).length).toBe(3);
  });
});

describe('migrating a store made before approvals', () => {
  it('SQLite: the jobs survive, the state check takes AWAITING_APPROVAL and still refuses others', async (ctx) => {
    const store = tempSqliteStore();
    ctx.onTestFinished(() => store.drop());
    const path = store.url.slice('sqlite:'.length);
    const old = new Database(path);
    old.pragma('journal_mode = WAL');
    old.exec(
      `CREATE TABLE reckon_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
    );
    // The schema as it was before approvals: the migrations before that one.
    const cut = SQLITE_MIGRATIONS.find((m) => m.name === 'approval before dispatch')!.version;
    for (const m of SQLITE_MIGRATIONS.filter((m) => m.version < cut)) {
      old.exec(m.sql);
      if (m.rewrites) rewriteTables(old, m.rewrites);
      old.prepare('INSERT INTO reckon_migrations VALUES (?, ?, 0)').run(m.version, m.name);
    }
    old.exec(`INSERT INTO jobs (id, queue, operation, input_json, request_key, request_fingerprint,
      state, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms)
      VALUES ('old-1', 'default', 'op', '{}', 'k-old', 'f', 'QUEUED', 0, 0, 0, 1, '{}', 1000)`);
    old.close();
    const q = await openQueue({ store: store.url });
    ctx.onTestFinished(() => q.close());
    expect(await q.store.schemaVersion()).toBe(SQLITE_LATEST);
    const op = defineOperation({ name: 'op', execute: () => Promise.resolve(1), approval: true });
    const job = await q.enqueue(op, { n: 1 });
    expect(job.state).toBe('AWAITING_APPROVAL');
    expect((await q.job('old-1'))!.job).toMatchObject({ state: 'QUEUED', approvalReason: null });
    await q.approvals.decide(job.id, { approve: true, actor: 'a' });
    const db = new Database(path);
    try {
      expect(() => db.prepare(`UPDATE jobs SET state = 'DONE' WHERE id = 'old-1'`).run()).toThrow(
        /CHECK constraint failed/,
      );
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    } finally {
      db.close();
    }
  });

  it('PostgreSQL: the jobs survive, the state check takes AWAITING_APPROVAL and still refuses others', async (ctx) => {
    const why = await pgUnavailableReason();
    if (why) ctx.skip(why);
    const store = await makeTestStore('postgres');
    ctx.onTestFinished(() => store.drop());
    const admin = new pg.Client({ connectionString: store.url });
    await admin.connect();
    ctx.onTestFinished(() => admin.end());
    await admin.query('CREATE SCHEMA reckon; SET search_path TO reckon');
    await admin.query(PG_MIGRATIONS_TABLE_SQL);
    const cut = PG_MIGRATIONS.find((m) => m.name === 'approval before dispatch')!.version;
    for (const m of PG_MIGRATIONS.filter((m) => m.version < cut)) {
      await admin.query(m.sql);
      await admin.query('INSERT INTO reckon_migrations (version, name) VALUES ($1, $2)', [
        m.version,
        m.name,
      ]);
    }
    await admin.query(`INSERT INTO jobs (id, queue, operation, input_json, request_key,
      request_fingerprint, state, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms)
      VALUES ('old-1', 'default', 'op', '{}', 'k-old', 'f', 'QUEUED', now(), now(), now(), 1, '{}', 1000)`);
    const q = await openQueue({ store: store.url });
    ctx.onTestFinished(() => q.close());
    expect(await q.store.schemaVersion()).toBe(PG_LATEST);
    const op = defineOperation({ name: 'op', execute: () => Promise.resolve(1), approval: true });
    const job = await q.enqueue(op, { n: 1 });
    expect(job.state).toBe('AWAITING_APPROVAL');
    expect((await q.job('old-1'))!.job).toMatchObject({ state: 'QUEUED', approvalReason: null });
    await expect(
      admin.query(`UPDATE reckon.jobs SET state = 'DONE' WHERE id = 'old-1'`),
    ).rejects.toThrow(/jobs_state_check/);
  });
});

describe('the testkit verdict', () => {
  it('flags an attempt or an effect of a job never approved', () => {
    const job = {
      id: 'j1',
      requestKey: 'k1',
      state: 'CANCELLED',
    } as unknown as JobDetail['job'];
    const enqueued = {
      kind: 'enqueued',
      fromState: null,
      toState: 'AWAITING_APPROVAL',
    } as EventRecord;
    const denied = {
      kind: 'denied',
      fromState: 'AWAITING_APPROVAL',
      toState: 'CANCELLED',
    } as EventRecord;
    const approved = {
      kind: 'approved',
      fromState: 'AWAITING_APPROVAL',
      toState: 'QUEUED',
    } as EventRecord;
    const attempt = {
      attemptNo: 1,
      requestKey: 'k1',
      state: 'FAILED',
      dispatchedAt: 1,
    } as AttemptRecord;
    const none = { effectsOf: () => 0 };
    const clean = judgeDetails([{ job, attempts: [], events: [enqueued, denied] }], none);
    expect(clean.violations).toEqual([]);
    const ran = judgeDetails([{ job, attempts: [attempt], events: [enqueued, denied] }], none);
    expect(ran.findings.map((f) => f.kind)).toEqual(['unapproved-attempt']);
    // Approved: an attempt is no finding of this check (the journal here is cut short, so other
    // checks may speak of it).
    const ok = judgeDetails([{ job, attempts: [attempt], events: [enqueued, approved] }], none);
    expect(ok.findings.map((f) => f.kind)).not.toContain('unapproved-attempt');
  });
});

function newJob(key: string, approval?: JobInsert['approval']): JobInsert {
  return newJobInsert(key, approval ? { approval } : {});
}

describe.each(STORE_KINDS)('store conformance of approvals: %s', (kind) => {
  async function openStores(ctx: TestContext, n: number): Promise<Store[]> {
    if (kind === 'postgres') {
      const why = await pgUnavailableReason();
      if (why) ctx.skip(why);
    }
    const ts = await makeTestStore(kind);
    const stores: Store[] = [];
    for (let i = 0; i < n; i++) {
      const s = await createStore(ts.url);
      await s.init();
      stores.push(s);
    }
    ctx.onTestFinished(async () => {
      await Promise.all(stores.map((s) => s.close()));
      await ts.drop();
    });
    return stores;
  }

  it('writes the state and both columns, is never claimed, and reads back as written', async (ctx) => {
    const [store] = await openStores(ctx, 1);
    const [r] = await store!.jobInsertMany({
      jobs: [newJob('a', { reason: 'why', expiresInMs: 60_000 })],
      actor: 't',
    });
    expect(r!.created).toBe(true);
    const { job } = r!;
    expect(job).toMatchObject({ state: 'AWAITING_APPROVAL', approvalReason: 'why' });
    expect(job.approvalExpiresAt).toBe(job.createdAt + 60_000);
    const read = (await store!.jobGet({ id: job.id }))!;
    expect(read.job).toEqual(job);
    expect(read.events).toMatchObject([
      {
        kind: 'enqueued',
        toState: 'AWAITING_APPROVAL',
        detail: { approval: { reason: 'why', expiresAt: job.approvalExpiresAt } },
      },
    ]);
    const claimed = await store!.attemptClaimMany({
      ownerId: 'w',
      queues: ['default'],
      operations: ['op.a'],
      limit: 10,
      leaseMs: 1_000,
    });
    expect(claimed).toEqual([]);
    expect(await store!.jobApprovalList({ limit: 10 })).toEqual([job]);
    const missing = await store!.jobApprovalDecide({
      jobId: 'nope',
      to: 'QUEUED',
      kind: 'approved',
      actor: 't',
      detail: {},
      error: null,
    });
    expect(missing).toEqual({ ok: false, job: null });
  });

  it('expiry takes at most `limit` due jobs a pass, on the store clock; two stores expiring at once cancel each job once', async (ctx) => {
    const [a, b] = await openStores(ctx, 2);
    const jobs = Array.from({ length: 7 }, (_, i) =>
      newJob(`e${i}`, { reason: null, expiresInMs: 1 }),
    );
    jobs.push(newJob('later', { reason: null, expiresInMs: 3_600_000 }));
    jobs.push(newJob('never', { reason: null, expiresInMs: null }));
    await a!.jobInsertMany({ jobs, actor: 't' });
    // Wait for the store's clock to pass the expiry (1 ms after enqueue).
    const now = await a!.clockNow();
    await until('the store clock to move', async () => (await a!.clockNow()) > now + 1);
    const first = await a!.jobApprovalExpireMany({ limit: 2, actor: 'x' });
    expect(first).toHaveLength(2);
    const rest = await Promise.all([
      a!.jobApprovalExpireMany({ limit: 100, actor: 'a' }),
      b!.jobApprovalExpireMany({ limit: 100, actor: 'b' }),
      a!.jobApprovalExpireMany({ limit: 100, actor: 'a2' }),
    ]);
    const expired = [...first, ...rest.flat()];
    expect(expired.map((j) => j.requestKey).sort()).toEqual([
      'e0',
      'e1',
      'e2',
      'e3',
      'e4',
      'e5',
      'e6',
    ]);
    for (const j of expired) {
      expect(j).toMatchObject({
        state: 'CANCELLED',
        error: APPROVAL_EXPIRED_ERROR,
        approvalExpiresAt: null,
      });
      const { events, attempts } = (await a!.jobGet({ id: j.id }))!;
      expect(attempts).toEqual([]);
      expect(events.filter((e) => e.kind === 'approval-expired')).toHaveLength(1);
    }
    const left = await b!.jobApprovalList({ limit: 10 });
    expect(left.map((j) => j.requestKey).sort()).toEqual(['later', 'never']);
    const stats = await b!.jobApprovalStats();
    expect(stats.byOperation).toEqual([
      { operation: 'op.a', awaiting: 2, oldestAt: left[0]!.createdAt },
    ]);
  });
});
