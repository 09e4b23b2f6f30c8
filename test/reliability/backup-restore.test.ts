/**
 * Host replacement, end to end with real processes: workers (child processes) run on a
 * downstream, `reckon backup` copies the store mid-run, every process is killed with SIGKILL,
 * `reckon restore` brings the copy up in a new folder, and new workers (new ids) finish there.
 * The verdict is the business outcome at the downstream: every job settled, no effect twice;
 * the jobs the old host sent after the backup are reconciled (lookup) or in review, never
 * blindly sent again.
 *
 * The old host's workers may finish their queue before the backup's snapshot (the CLI takes
 * seconds to start on a loaded machine), so a backlog queue that no worker of the old host
 * works is enqueued too: QUEUED in the copy for certain, it is worked by a worker the old host
 * starts after the backup, and the kill waits until that worker has sent some of it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue, type Queue } from '../../src/index.js';
import { startDownstream, type Downstream } from '../../src/testkit/downstream.js';
import { startWorkerChild, type WorkerChild } from '../../src/testkit/fleet.js';
import { downstreamOperation, type Flavour } from '../../src/testkit/operations.js';
import { judge, waitUntilSettled } from '../../src/testkit/verdict.js';
import { expectKeptPromises, FAST, until } from './harness.js';
import { reckon } from '../helpers/cli.js';

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const COUNTS: Record<Flavour, number> = { lookup: 300, idempotent: 100, none: 60 };
/** Jobs of each flavour on the backlog queue, sent only after the backup. */
const BACKLOG: Record<Flavour, number> = { lookup: 20, idempotent: 10, none: 10 };

describe('backup mid-run, SIGKILL everything, restore on a new host', () => {
  it('settles every job with no effect twice; jobs sent after the backup are reconciled, not resent', async () => {
    const dirA = mkdtempSync(join(tmpdir(), 'reckon-host-a-'));
    const dirB = mkdtempSync(join(tmpdir(), 'reckon-host-b-'));
    cleanup.push(() => rmSync(dirA, { recursive: true, force: true }));
    cleanup.push(() => rmSync(dirB, { recursive: true, force: true }));
    const storeA = `sqlite:${join(dirA, 'reckon.db')}`;
    const storeB = `sqlite:${join(dirB, 'reckon.db')}`;
    const backup = join(dirB, 'backup.db');
    // Only the idempotent flavour's downstream deduplicates by key: a blind resend of any other
    // job would show in the ledger as a second effect.
    const downstream: Downstream = await startDownstream({
      honourIdempotencyKey: (key) => key.startsWith('idempotent-'),
      behaviour: () => ({ action: 'ok', delayMs: 50 }),
    });
    cleanup.push(() => downstream.close());
    const qA: Queue = await openQueue({ store: storeA });
    cleanup.push(() => qA.close());
    // Flavours interleaved, ten at a time, so that each is in flight throughout the run.
    for (let start = 0; start < Math.max(...Object.values(COUNTS)); start += 10)
      for (const [flavour, n] of Object.entries(COUNTS) as [Flavour, number][])
        if (start < n)
          await qA.enqueueMany(
            downstreamOperation(flavour, { url: downstream.url }),
            Array.from({ length: Math.min(10, n - start) }, (_, k) => ({
              input: { n: start + k },
              key: `${flavour}-${start + k}`,
            })),
          );
    const backlogKeys: string[] = [];
    for (const [flavour, n] of Object.entries(BACKLOG) as [Flavour, number][]) {
      const items = Array.from({ length: n }, (_, k) => ({
        input: { n: 1000 + k },
        key: `${flavour}-backlog-${k}`,
        queue: 'backlog',
      }));
      backlogKeys.push(...items.map((i) => i.key));
      await qA.enqueueMany(downstreamOperation(flavour, { url: downstream.url }), items);
    }
    const total =
      Object.values(COUNTS).reduce((a, b) => a + b, 0) +
      Object.values(BACKLOG).reduce((a, b) => a + b, 0);

    const children: WorkerChild[] = [];
    cleanup.push(() => Promise.all(children.map((c) => c.kill())));
    const child = (storeUrl: string, ownerId: string, queues = ['default']) => {
      const c = startWorkerChild(
        { storeUrl, downstreamUrl: downstream.url, ...FAST, concurrency: 4, ownerId, queues },
        { echoStderr: process.env.RECKON_TEST_ECHO === '1' },
      );
      children.push(c);
      return c;
    };
    const oldHost = [child(storeA, 'host-a/1'), child(storeA, 'host-a/2')];
    expect(await Promise.all(oldHost.map((c) => c.ready))).toEqual([true, true]);

    // Mid-run: a fifth of the effects done, workers writing at full speed.
    await until('a fifth of the effects', () => downstream.stats.effects >= total / 5, 30_000);
    const b = await reckon(['backup', backup, '--store', storeA, '--json']);
    expect(b.code, b.stderr).toBe(0);
    const backupReport = JSON.parse(b.stdout) as { check: { totalJobs: number } };
    expect(backupReport.check.totalJobs).toBe(total);
    // The old host runs on after the backup, and starts working the backlog, QUEUED in the
    // copy; once it has sent some of it, the host is lost: every process killed.
    const backlogWorker = child(storeA, 'host-a/3', ['backlog']);
    oldHost.push(backlogWorker);
    expect(await backlogWorker.ready).toBe(true);
    await until(
      'the old host sending the backlog after the backup',
      () => backlogKeys.filter((k) => downstream.effectsOf(k) > 0).length >= backlogKeys.length / 4,
      30_000,
    );
    await Promise.all(oldHost.map((c) => c.kill()));
    await qA.close();
    const ledgerAtLoss = downstream.ledger();

    const restoredAt = Date.now();
    const r = await reckon(['restore', backup, '--store', storeB, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const restored = JSON.parse(r.stdout) as {
      check: { jobs: Record<string, number> };
      reconciled: { leased: number; queued: number };
    };
    // Restoring again over it is refused.
    const again = await reckon(['restore', backup, '--store', storeB, '--json']);
    expect(again.code).toBe(1);
    expect(JSON.parse(again.stdout)).toMatchObject({ error: { code: 'TARGET_EXISTS' } });

    const qB = await openQueue({ store: storeB });
    cleanup.push(() => qB.close());
    // What the copy did not know: jobs not SUCCEEDED in it whose effect the old host committed.
    const inCopy = await qB.jobs({ limit: 10_000 });
    expect(inCopy).toHaveLength(total);
    const sentAfterBackup = inCopy.filter(
      (j) => j.state !== 'SUCCEEDED' && (ledgerAtLoss.get(j.requestKey) ?? 0) > 0,
    );
    const backlogSent = sentAfterBackup.filter((j) => backlogKeys.includes(j.requestKey));
    expect(backlogSent.length).toBeGreaterThanOrEqual(backlogKeys.length / 4);
    expect(restored.reconciled.queued).toBeGreaterThanOrEqual(backlogKeys.length);
    for (const j of sentAfterBackup) expect(j.state).not.toBe('QUEUED');
    const postsAtLoss = new Map(
      inCopy.map((j) => [j.requestKey, downstream.requestsOf(j.requestKey)]),
    );

    // The new host: new workers, new ids.
    const queues = ['default', 'backlog'];
    const newHost = [child(storeB, 'host-b/1', queues), child(storeB, 'host-b/2', queues)];
    expect(await Promise.all(newHost.map((c) => c.ready))).toEqual([true, true]);
    await waitUntilSettled(qB, { timeoutMs: 60_000 });
    const verdict = await judge(qB, downstream);
    expectKeptPromises(verdict);
    expect(verdict.jobs).toBe(total);
    // Sent after the backup: looked up (lookup), same-key retried (idempotent) or in review (none).
    for (const j of sentAfterBackup) {
      const d = (await qB.job(j.id))!;
      if (j.operation.endsWith('.lookup')) {
        expect(d.job.state).toBe('SUCCEEDED');
        expect(downstream.requestsOf(j.requestKey)).toBe(postsAtLoss.get(j.requestKey));
      }
      if (j.operation.endsWith('.none')) expect(d.job.state).toBe('NEEDS_REVIEW');
      expect(downstream.effectsOf(j.requestKey)).toBe(1);
    }
    expect(verdict.resolvedBy.lookup).toBeGreaterThan(0);
    // Nothing of the old host's reached the new store after the restore.
    for (const j of inCopy)
      for (const e of (await qB.job(j.id))!.events)
        if (e.at >= restoredAt) expect(e.actor).not.toContain('host-a/');
  }, 120_000);
});
