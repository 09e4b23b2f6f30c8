/**
 * Retention (invariant 8) on both stores: whole terminal histories go, in batches, after any
 * archive; every other job and its evidence stays exactly as it was; the worker's loop prunes by
 * its policy; `reckon prune` counts, archives, deletes and (SQLite) shrinks the file.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defineOperation, DefiniteFailure, openQueue } from '../src/index.js';
import { parseAge, parseRetentionSpec, retentionSettings } from '../src/runtime/retention.js';
import { createStore } from '../src/store/open.js';
import type { ClaimedAttempt, JobDetail, JobInsert, LeaseRef, Store } from '../src/store/store.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  tempSqliteStore,
  type StoreKind,
  type TestStore,
} from './helpers/stores.js';
import { newJobInsert } from './helpers/jobs.js';
import { reckon } from './helpers/cli.js';

const pgReason = await pgUnavailableReason();

function newJob(key: string, queue = 'default'): JobInsert {
  return newJobInsert(key, { queue, inputJson: JSON.stringify({ key, pad: 'x'.repeat(200) }) });
}

const leaseOf = (c: ClaimedAttempt): LeaseRef => ({
  jobId: c.job.id,
  attemptNo: c.attempt.attemptNo,
  leaseToken: c.attempt.leaseToken,
});

/** Jobs in every state, written through the store's own API. */
async function jobsInEveryState(store: Store, n = 3) {
  const ids: Record<string, string[]> = {
    SUCCEEDED: [],
    FAILED: [],
    CANCELLED: [],
    UNKNOWN: [],
    NEEDS_REVIEW: [],
    LEASED: [],
    QUEUED: [],
    AWAITING_APPROVAL: [],
  };
  const claimOne = async (key: string) => {
    await store.jobInsertMany({ jobs: [newJob(key)], actor: 'test' });
    const [c] = await store.attemptClaimMany({
      ownerId: 'w1',
      queues: ['default'],
      operations: ['op.a'],
      limit: 1,
      leaseMs: 60_000,
    });
    expect(c?.job.requestKey).toBe(key);
    await store.attemptDispatchMany({ leases: [leaseOf(c!)] });
    return c!;
  };
  const finish = async (
    c: ClaimedAttempt,
    state: 'SUCCEEDED' | 'FAILED' | 'UNKNOWN',
    to: string,
  ) => {
    const [ok] = await store.attemptFinishMany({
      finishes: [
        {
          lease: leaseOf(c),
          state,
          reason: state === 'UNKNOWN' ? 'no-definitive-answer' : null,
          resultJson: state === 'SUCCEEDED' ? '{"ok":true}' : null,
          error: state === 'SUCCEEDED' ? null : { name: 'Error', message: 'no' },
          job: { to: to as 'SUCCEEDED', checkAfterDispatchMs: 3_600_000 },
          actor: 'w1',
        },
      ],
    });
    expect(ok).toBe(true);
  };
  for (let i = 0; i < n; i++) {
    let c = await claimOne(`s-${i}`);
    await finish(c, 'SUCCEEDED', 'SUCCEEDED');
    ids.SUCCEEDED!.push(c.job.id);
    c = await claimOne(`f-${i}`);
    await finish(c, 'FAILED', 'FAILED');
    ids.FAILED!.push(c.job.id);
    c = await claimOne(`u-${i}`);
    await finish(c, 'UNKNOWN', 'UNKNOWN');
    ids.UNKNOWN!.push(c.job.id);
    c = await claimOne(`r-${i}`);
    await finish(c, 'UNKNOWN', 'NEEDS_REVIEW');
    ids.NEEDS_REVIEW!.push(c.job.id);
    c = await claimOne(`l-${i}`);
    ids.LEASED!.push(c.job.id);
    const [q] = await store.jobInsertMany({ jobs: [newJob(`c-${i}`)], actor: 'test' });
    await store.jobCancel({ id: q!.job.id, actor: 'test', reason: 'test' });
    ids.CANCELLED!.push(q!.job.id);
    const [w] = await store.jobInsertMany({ jobs: [newJob(`q-${i}`, 'later')], actor: 'test' });
    ids.QUEUED!.push(w!.job.id);
    const [a] = await store.jobInsertMany({
      jobs: [{ ...newJob(`a-${i}`, 'later'), approval: { reason: 'big', expiresInMs: null } }],
      actor: 'test',
    });
    expect(a!.job.state).toBe('AWAITING_APPROVAL');
    ids.AWAITING_APPROVAL!.push(a!.job.id);
  }
  return ids;
}

async function details(store: Store, ids: string[]): Promise<(JobDetail | null)[]> {
  return Promise.all(ids.map((id) => store.jobGet({ id })));
}

const LIVE = ['UNKNOWN', 'NEEDS_REVIEW', 'LEASED', 'QUEUED', 'AWAITING_APPROVAL'];

describe.each(STORE_KINDS)('retention: %s', (kind: StoreKind) => {
  if (kind === 'postgres' && pgReason !== null) {
    it.skip(`skipped: ${pgReason}`, () => undefined);
    return;
  }
  let ts: TestStore;
  let store: Store;

  beforeEach(async () => {
    ts = await makeTestStore(kind);
    store = await createStore(ts.url);
    await store.init();
  });
  afterEach(async () => {
    await store.close();
    await ts.drop();
  });

  it('deletes whole terminal histories in batches, archived first; every other job stays as it was', async () => {
    const ids = await jobsInEveryState(store, 3);
    const liveIds = LIVE.flatMap((s) => ids[s]!);
    const before = await details(store, liveIds);
    const terminal = [...ids.SUCCEEDED!, ...ids.FAILED!, ...ids.CANCELLED!];

    const dry = await store.jobPruneMany({
      states: ['SUCCEEDED', 'FAILED', 'CANCELLED'],
      olderThanMs: 0,
      limit: 2,
      dryRun: true,
    });
    expect(dry.jobs).toEqual({ SUCCEEDED: 3, FAILED: 3, CANCELLED: 3 });
    // Event rows: a cancel is one; a routine enqueue, lease and outcome are columns (invariant 8).
    expect(dry.events).toBeGreaterThanOrEqual(3);
    expect((await details(store, terminal)).every((d) => d !== null)).toBe(true);

    // Nothing is old enough an hour back.
    const young = await store.jobPruneMany({
      states: ['SUCCEEDED'],
      olderThanMs: 3_600_000,
      limit: 10,
    });
    expect(young.jobs.SUCCEEDED).toBe(0);

    // An archive that fails: nothing goes.
    await expect(
      store.jobPruneMany({
        states: ['SUCCEEDED'],
        olderThanMs: 0,
        limit: 10,
        archive: () => Promise.reject(new Error('disk full')),
      }),
    ).rejects.toThrow('disk full');
    expect((await details(store, ids.SUCCEEDED!)).every((d) => d !== null)).toBe(true);

    const archived: JobDetail[] = [];
    let deleted = 0;
    let batches = 0;
    for (;;) {
      const r = await store.jobPruneMany({
        states: ['SUCCEEDED', 'FAILED', 'CANCELLED'],
        olderThanMs: 0,
        limit: 4,
        archive: async (h) => {
          // Handed over before the delete: the rows are all still there.
          for (const d of await details(
            store,
            h.map((x) => x.job.id),
          ))
            expect(d).not.toBeNull();
          archived.push(...h);
        },
      });
      batches++;
      deleted += r.jobs.SUCCEEDED + r.jobs.FAILED + r.jobs.CANCELLED;
      expect(r.jobs.SUCCEEDED + r.jobs.FAILED + r.jobs.CANCELLED).toBeLessThanOrEqual(4);
      if (!r.more) break;
    }
    expect(deleted).toBe(9);
    expect(batches).toBe(3);
    expect(archived.map((h) => h.job.id).sort()).toEqual([...terminal].sort());
    for (const h of archived) {
      expect(h.events.length).toBeGreaterThan(0);
      if (h.job.state !== 'CANCELLED') expect(h.attempts).toHaveLength(1);
    }
    expect((await details(store, terminal)).every((d) => d === null)).toBe(true);
    expect(await details(store, liveIds)).toEqual(before);
    // A pruned key may be used again: a new job, a new history.
    const [again] = await store.jobInsertMany({ jobs: [newJob('s-0')], actor: 'test' });
    expect(again?.created).toBe(true);
  });

  it('still refuses to delete the events of a job that is not terminal, behind the store', async () => {
    const ids = await jobsInEveryState(store, 1);
    // An event row for each (a routine job's steps are columns of its rows).
    await store.eventAppendMany({
      events: Object.values(ids)
        .flat()
        .map((jobId) => ({ jobId, attemptNo: null, kind: 'note', actor: 'test' })),
    });
    const del = (id: string) => `DELETE FROM events WHERE job_id = '${id}'`;
    for (const s of LIVE) await expect(rawSql(ts, del(ids[s]![0]!))).rejects.toThrow(/append-only/);
    await expect(
      rawSql(ts, `UPDATE events SET kind = 'x' WHERE job_id = '${ids.SUCCEEDED![0]}'`),
    ).rejects.toThrow(/append-only/);
    await rawSql(ts, del(ids.SUCCEEDED![0]!));
  });

  it('a worker prunes on its own, by its policy per state', async () => {
    await store.close();
    const ok = defineOperation<{ n: number }, number>({
      name: 'ret.ok',
      fingerprint: (i) => i,
      execute: (i, ctx) => ctx.dispatch(() => Promise.resolve(i.n)),
    });
    const bad = defineOperation<{ n: number }, number>({
      name: 'ret.bad',
      fingerprint: (i) => i,
      execute: (_i, ctx) =>
        ctx.dispatch(() => Promise.reject(new DefiniteFailure('no', { retryable: false }))),
    });
    const q = await openQueue({ store: ts.url });
    store = q.store;
    try {
      const worker = q.worker({
        operations: [ok, bad],
        pollIntervalMs: 10,
        retention: { ages: { SUCCEEDED: 0, FAILED: 'off' }, intervalMs: 20, batchSize: 3 },
      });
      worker.on('error', () => undefined);
      const good = await q.enqueueMany(
        ok,
        [1, 2, 3, 4, 5, 6, 7].map((n) => ({ input: { n } })),
      );
      const failed = await q.enqueue(bad, { n: 1 });
      await worker.start();
      const deadline = Date.now() + 10_000;
      // Rows gone, and the loop's pass that deleted them over (it counts at the end of a pass).
      const pruned = () => worker.retention?.totals.jobs.SUCCEEDED === 7;
      while (
        !pruned() ||
        (await Promise.all(good.map((j) => q.job(j.id)))).some((d) => d !== null)
      ) {
        if (Date.now() > deadline) throw new Error('the retention loop did not prune');
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(worker.retention?.totals.jobs.SUCCEEDED).toBe(7);
      await worker.stop();
      expect((await q.job(failed.id))?.job.state).toBe('FAILED');
    } finally {
      await q.close();
    }
  });
});

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

describe('retention settings', () => {
  it('parses ages and refuses what it would misread', () => {
    expect(parseAge('7d')).toBe(7 * 86_400_000);
    expect(parseAge('12h')).toBe(12 * 3_600_000);
    expect(parseAge('500ms')).toBe(500);
    expect(parseAge('off')).toBe('off');
    expect(() => parseAge('7 days')).toThrow(/duration/);
    expect(() => parseAge(-1)).toThrow();
    expect(retentionSettings(undefined)?.ages).toEqual({
      SUCCEEDED: 7 * 86_400_000,
      FAILED: 30 * 86_400_000,
      CANCELLED: 7 * 86_400_000,
    });
    expect(retentionSettings('off')).toBeNull();
    expect(
      retentionSettings({ ages: { SUCCEEDED: 'off', FAILED: 'off', CANCELLED: 'off' } }),
    ).toBeNull();
    expect(() => retentionSettings({ ages: { UNKNOWN: '1d' } as never })).toThrow(/terminal/);
    expect(() => retentionSettings({ batchSize: 0 })).toThrow(/batchSize/);
    expect(parseRetentionSpec('off')).toBe('off');
    expect(parseRetentionSpec('succeeded=3d, FAILED=off')).toEqual({
      ages: { SUCCEEDED: '3d', FAILED: 'off' },
    });
    expect(() => parseRetentionSpec('NEEDS_REVIEW=1d')).toThrow(/STATE=age/);
    expect(() => parseRetentionSpec('SUCCEEDED=soon')).toThrow(/duration/);
  });
});

describe('reckon prune (SQLite)', () => {
  it('counts with --dry-run, archives then deletes, and shrinks the file with --vacuum', async () => {
    const ts = tempSqliteStore();
    const store = await createStore(ts.url);
    await store.init();
    try {
      const ids = await jobsInEveryState(store, 40);
      await store.close();
      const url = ts.url;
      const dry = await reckon([
        'prune',
        '--older-than',
        '0s',
        '--dry-run',
        '--json',
        '--store',
        url,
      ]);
      expect(dry.code, dry.stderr).toBe(0);
      const d = JSON.parse(dry.stdout) as { jobs: number; dryRun: boolean };
      expect(d).toMatchObject({ jobs: 120, dryRun: true });

      const bad = await reckon([
        'prune',
        '--older-than',
        '0s',
        '--state',
        'UNKNOWN',
        '--store',
        url,
      ]);
      expect(bad.code).toBe(64);
      expect(bad.stderr).toMatch(/never deleted/);

      const archive = join(ts.url.slice('sqlite:'.length), '..', 'archive.jsonl');
      const path = url.slice('sqlite:'.length);
      const run = await reckon([
        'prune',
        '--older-than',
        '0s',
        '--state',
        'SUCCEEDED,FAILED',
        '--archive',
        archive,
        '--batch-size',
        '7',
        '--vacuum',
        '--json',
        '--store',
        url,
      ]);
      expect(run.code, run.stderr).toBe(0);
      const r = JSON.parse(run.stdout) as {
        jobs: number;
        batches: number;
        archive: { lines: number };
        vacuum: { bytesBefore: number; bytesAfter: number };
      };
      expect(r.jobs).toBe(80);
      expect(r.batches).toBe(Math.ceil(80 / 7));
      expect(r.archive.lines).toBe(80);
      expect(r.vacuum.bytesAfter).toBeLessThan(r.vacuum.bytesBefore);
      expect(statSync(path).size).toBe(r.vacuum.bytesAfter);
      const lines = readFileSync(archive, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as JobDetail);
      expect(lines.map((l) => l.job.id).sort()).toEqual([...ids.SUCCEEDED!, ...ids.FAILED!].sort());
      const after = await createStore(url);
      await after.init();
      try {
        for (const id of ids.CANCELLED!) expect(await after.jobGet({ id })).not.toBeNull();
        for (const id of ids.SUCCEEDED!) expect(await after.jobGet({ id })).toBeNull();
        for (const s of LIVE)
          for (const id of ids[s]!) expect((await after.jobGet({ id }))?.job.state).toBe(s);
      } finally {
        await after.close();
      }
    } finally {
      await store.close();
      await ts.drop();
    }
  });
});
