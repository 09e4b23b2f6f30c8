/**
 * A PostgreSQL store is backed up with `pg_dump -n <schema>` and restored with `pg_restore` into
 * a new database, as docs/operations.md says; a worker then finishes the restored jobs there,
 * and retention works on the restored schema (its trigger function came along). `reckon backup`
 * on a PostgreSQL store prints those commands and exits 1.
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue } from '../src/index.js';
import { startDownstream } from '../src/testkit/downstream.js';
import { downstreamOperation } from '../src/testkit/operations.js';
import { waitUntilSettled } from '../src/testkit/verdict.js';
import { PG_REQUIRED, pgUnavailableReason, tempPgStore } from './helpers/stores.js';

const run = promisify(execFile);
const pgReason = await pgUnavailableReason();
/** pg_dump and pg_restore come with the PostgreSQL client package. */
const hasPgDump = spawnSync('pg_dump', ['--version']).status === 0;
const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'src', 'cli', 'main.ts');

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function reckon(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
      env: { ...process.env, RECKON_STORE: undefined },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => done({ code, stdout, stderr }));
  });
}

// Where PostgreSQL is required (CI), a missing pg_dump fails here instead of skipping the suite.
describe.runIf(PG_REQUIRED)('PostgreSQL backup tools', () => {
  it('pg_dump and pg_restore are installed (the PostgreSQL client package)', () => {
    expect(hasPgDump, 'pg_dump not found: install postgresql-client').toBe(true);
    expect(spawnSync('pg_restore', ['--version']).status, 'pg_restore not found').toBe(0);
  });
});

describe.skipIf(pgReason !== null || !hasPgDump)(
  'PostgreSQL backup: pg_dump -n, pg_restore, work on',
  () => {
    it('restores a dump of the schema into a new database, where a worker finishes the jobs', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'reckon-pgdump-'));
      cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
      const a = await tempPgStore();
      cleanup.push(() => a.drop());
      const b = await tempPgStore();
      cleanup.push(() => b.drop());
      const downstream = await startDownstream({ honourIdempotencyKey: false });
      cleanup.push(() => downstream.close());
      const op = downstreamOperation('lookup', { url: downstream.url });
      const dump = join(dir, 'reckon.dump');

      const qA = await openQueue({ store: a.url });
      try {
        const first = await qA.enqueueMany(
          op,
          Array.from({ length: 10 }, (_, i) => ({ input: { n: i }, key: `done-${i}` })),
        );
        const w = qA.worker({ operations: [op], pollIntervalMs: 10 });
        await w.start();
        await waitUntilSettled(qA, { timeoutMs: 20_000 });
        await w.stop();
        expect((await qA.job(first[0]!.id))?.job.state).toBe('SUCCEEDED');
        await qA.enqueueMany(
          op,
          Array.from({ length: 10 }, (_, i) => ({ input: { n: 100 + i }, key: `later-${i}` })),
        );
      } finally {
        await qA.close();
      }

      // What `reckon backup` prints for this store is what this test runs.
      const told = await reckon(['backup', dump, '--store', a.url, '--json']);
      expect(told.code).toBe(1);
      const error = (
        JSON.parse(told.stdout) as { error: { code: string; details: { command: string } } }
      ).error;
      expect(error.code).toBe('BACKUP_UNSUPPORTED');
      expect(error.details.command).toContain('--schema=reckon');
      await run('pg_dump', ['--format=custom', '--schema=reckon', `--file=${dump}`, a.url]);
      await run('pg_restore', [`--dbname=${b.url}`, dump]);

      const qB = await openQueue({ store: b.url });
      try {
        const jobs = await qB.jobs({ limit: 100 });
        expect(jobs).toHaveLength(20);
        expect(jobs.filter((j) => j.state === 'SUCCEEDED')).toHaveLength(10);
        expect(jobs.filter((j) => j.state === 'QUEUED')).toHaveLength(10);
        const done = (await qB.job(jobs.find((j) => j.state === 'SUCCEEDED')!.id))!;
        expect(done.events.map((e) => e.kind)).toContain('attempt-succeeded');
        const w = qB.worker({ operations: [op], pollIntervalMs: 10, ownerId: 'new-host/1' });
        await w.start();
        await waitUntilSettled(qB, { timeoutMs: 20_000 });
        await w.stop();
        for (const j of await qB.jobs({ limit: 100 })) {
          expect(j.state).toBe('SUCCEEDED');
          expect(downstream.effectsOf(j.requestKey)).toBe(1);
        }
        // Retention works on the restored schema: its events trigger came with the dump.
        const pruned = await qB.store.jobPruneMany({
          states: ['SUCCEEDED'],
          olderThanMs: 0,
          limit: 100,
        });
        expect(pruned.jobs.SUCCEEDED).toBe(20);
        expect(await qB.jobs({ limit: 100 })).toHaveLength(0);
      } finally {
        await qB.close();
      }
    }, 60_000);

    it('reckon restore: pg_restore into a new database, jobs sent after the dump looked up, not resent', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'reckon-pgrestore-'));
      cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
      const a = await tempPgStore();
      cleanup.push(() => a.drop());
      const b = await tempPgStore();
      cleanup.push(() => b.drop());
      // Nothing deduplicates downstream: a blind resend would be a second effect.
      const downstream = await startDownstream({ honourIdempotencyKey: false });
      cleanup.push(() => downstream.close());
      const op = downstreamOperation('lookup', { url: downstream.url, graceMs: 0, timeoutMs: 200 });
      const dump = join(dir, 'reckon.dump');

      const qA = await openQueue({ store: a.url });
      const jobs = await qA.enqueueMany(
        op,
        Array.from({ length: 12 }, (_, i) => ({ input: { n: i }, key: `k-${i}` })),
      );
      await run('pg_dump', ['--format=custom', '--schema=reckon', `--file=${dump}`, a.url]);
      // The old host runs on after the dump: half the jobs are sent, then it is gone.
      const w = qA.worker({
        operations: [op],
        pollIntervalMs: 10,
        claimBatchMax: 1,
        concurrency: 1,
      });
      await w.start();
      const deadline = Date.now() + 20_000;
      while (downstream.stats.effects < 6 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 5));
      await w.stop();
      await qA.close();
      const sentByOldHost = jobs.filter((j) => downstream.effectsOf(j.requestKey) > 0);
      expect(sentByOldHost.length).toBeGreaterThanOrEqual(6);

      const r = await reckon(['restore', dump, '--json', '--store', b.url]);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ reconciled: { leased: 0, queued: 12 } });
      const again = await reckon(['restore', dump, '--json', '--store', b.url]);
      expect(again.code).toBe(1);
      expect(JSON.parse(again.stdout)).toMatchObject({ error: { code: 'TARGET_EXISTS' } });

      const qB = await openQueue({ store: b.url });
      try {
        const posts = new Map(jobs.map((j) => [j.requestKey, downstream.requestsOf(j.requestKey)]));
        const wb = qB.worker({
          operations: [op],
          pollIntervalMs: 10,
          reconcileIntervalMs: 20,
          ownerId: 'new-host/1',
        });
        await wb.start();
        await waitUntilSettled(qB, { timeoutMs: 30_000 });
        await wb.stop();
        for (const j of jobs) {
          const d = (await qB.job(j.id))!;
          expect(d.job.state).toBe('SUCCEEDED');
          expect(downstream.effectsOf(j.requestKey)).toBe(1);
          if (sentByOldHost.includes(j)) {
            // Found by the lookup: not sent again.
            expect(downstream.requestsOf(j.requestKey)).toBe(posts.get(j.requestKey));
            expect(d.attempts[0]).toMatchObject({ ownerId: 'restore', resolutionSource: 'lookup' });
          }
        }
      } finally {
        await qB.close();
      }
    }, 90_000);
  },
);
