/**
 * Restores (issue #33 items 2 and 6). On both stores, a job AWAITING_APPROVAL in the backup may
 * have been approved and sent, or denied, on the old host after it: restored, it is in review
 * with that doubt as its event, never silently decidable again, and `q.call` answers pending
 * with the doubt. On PostgreSQL the restore is one transaction: nothing is visible before the
 * jobs are marked, a failure between loading and marking leaves nothing (a second restore
 * works), and the password never appears on a command line.
 */
import { execFile, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import {
  JobStateConflict,
  OutcomePending,
  defineOperation,
  openQueue,
  type Queue,
} from '../src/index.js';
import { restorePg } from '../src/store/postgres/restore.js';
import { backupSqlite, restoreSqlite } from '../src/store/sqlite/backup.js';
import { STORE_KINDS, pgUnavailableReason, tempPgStore, type StoreKind } from './helpers/stores.js';

const run = promisify(execFile);
const pgReason = await pgUnavailableReason();
const hasPgTools =
  spawnSync('pg_dump', ['--version']).status === 0 && spawnSync('psql', ['--version']).status === 0;
const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-restore-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Sends recorded per request key: what the downstream saw. */
function mailOperation(sent: string[]) {
  return defineOperation({
    name: 'mail.send',
    approval: true,
    execute: (_input: { to: string }, ctx) =>
      ctx.dispatch(() => {
        sent.push(ctx.requestKey);
        return Promise.resolve({ ok: true });
      }),
  });
}

/** A backup of a store (SQLite file or pg_dump) restored into a new one; its URL. */
async function backupAndRestore(
  kind: StoreKind,
  source: string,
  afterBackup: () => Promise<void>,
): Promise<{ url: string; reconciled: { approvals: number } }> {
  const dir = tempDir();
  if (kind === 'sqlite') {
    const copy = join(dir, 'copy.db');
    await backupSqlite({ source: source.slice('sqlite:'.length), target: copy });
    await afterBackup();
    const target = join(dir, 'restored.db');
    const r = restoreSqlite({ backup: copy, target, reconcile: 'unfinished' });
    return { url: `sqlite:${target}`, reconciled: r.reconciled };
  }
  const dump = join(dir, 'reckon.dump');
  await run('pg_dump', ['--format=custom', '--schema=reckon', `--file=${dump}`, source]);
  await afterBackup();
  const b = await tempPgStore();
  cleanup.push(() => b.drop());
  const r = await restorePg({
    dump,
    connectionString: b.url,
    schema: 'reckon',
    location: 'test',
    reconcile: 'unfinished',
  });
  return { url: b.url, reconciled: r.reconciled };
}

async function sourceStore(kind: StoreKind): Promise<string> {
  if (kind === 'sqlite') return `sqlite:${join(tempDir(), 'reckon.db')}`;
  const a = await tempPgStore();
  cleanup.push(() => a.drop());
  return a.url;
}

async function settle(q: Queue, id: string, sent: string[], key: string): Promise<void> {
  const w = q.worker({ operations: [mailOperation(sent)], pollIntervalMs: 10 });
  await w.start();
  try {
    await q.waitFor(id, { timeoutMs: 30_000 });
  } finally {
    await w.stop();
  }
  expect(sent.filter((k) => k === key)).toHaveLength(1);
}

describe.each(STORE_KINDS)('restore of jobs awaiting approval: %s', (kind) => {
  it.skipIf(kind === 'postgres' && (pgReason !== null || !hasPgTools))(
    'an approval decided on the old host after the backup is in review, with the doubt, after the restore',
    async () => {
      const sent: string[] = [];
      const op = mailOperation(sent);
      const src = await sourceStore(kind);
      const qa = await openQueue({ store: src });
      const approved = await qa.enqueue(op, { to: 'a@b.c' }, { key: 'approved-later' });
      const denied = await qa.enqueue(op, { to: 'd@e.f' }, { key: 'denied-later' });
      expect(approved.state).toBe('AWAITING_APPROVAL');
      const restored = await backupAndRestore(kind, src, async () => {
        // The old host goes on: one approved and sent, one denied, after the backup.
        await qa.approvals.decide(approved.id, { approve: true, actor: 'dana' });
        await qa.approvals.decide(denied.id, { approve: false, actor: 'dana' });
        await settle(qa, approved.id, sent, 'approved-later');
        await qa.close();
      });
      expect(restored.reconciled.approvals).toBe(2);

      const qb = await openQueue({ store: restored.url });
      cleanup.push(() => qb.close());
      expect(await qb.approvals.list()).toHaveLength(0);
      for (const job of [approved, denied]) {
        const d = (await qb.job(job.id))!;
        expect(d.job.state).toBe('NEEDS_REVIEW');
        expect(d.events.at(-1)).toMatchObject({
          kind: 'restored-approval-in-doubt',
          fromState: 'AWAITING_APPROVAL',
          toState: 'NEEDS_REVIEW',
          actor: 'restore',
        });
        // Approving again is not possible without reading the doubt: the decision conflicts.
        await expect(qb.approvals.decide(job.id, { approve: true, actor: 'erin' })).rejects.toThrow(
          JobStateConflict,
        );
      }
      // The agent replaying its call is told: may have been sent, a person is reviewing it.
      const pending = await qb
        .call(op, { to: 'a@b.c' }, { key: 'approved-later', timeoutMs: 200 })
        .catch((e: unknown) => e);
      expect(pending).toBeInstanceOf(OutcomePending);
      expect((pending as OutcomePending).state).toBe('NEEDS_REVIEW');
      expect((pending as OutcomePending).message).toMatch(/may have reached the downstream/);
      expect((pending as OutcomePending).evidence.events.map((e) => e.kind)).toContain(
        'restored-approval-in-doubt',
      );
      const review = await qb.review.list();
      expect(review.map((r) => r.job.id).sort()).toEqual([approved.id, denied.id].sort());
      // The person who checked the downstream records what happened; nothing is sent again.
      await qb.review.resolve(approved.id, { as: 'succeeded', actor: 'erin', note: 'seen' });
      await qb.review.resolve(denied.id, { as: 'failed', actor: 'erin', note: 'was denied' });
      expect(sent).toEqual(['approved-later']);
    },
    90_000,
  );
});

describe.each(STORE_KINDS)('restore of flow control: %s', (kind) => {
  it.skipIf(kind === 'postgres' && (pgReason !== null || !hasPgTools))(
    'pauses survive; rate windows and holds are cleared; schedules skip the slots the old host may have run',
    async () => {
      const sent: string[] = [];
      const limited = defineOperation({
        name: 'flow.once-a-minute',
        rateLimit: { max: 1, perMs: 60_000 },
        execute: (_input: { n: number }, ctx) =>
          ctx.dispatch(() => {
            sent.push(ctx.requestKey);
            return Promise.resolve({ ok: true });
          }),
      });
      const src = await sourceStore(kind);
      const qa = await openQueue({ store: src });
      await qa.queues.pause('emails', { actor: 'ops', reason: 'provider outage' });
      await qa.queues.pause('payments.charge', { operation: true, actor: 'ops' });
      // The limit's window is full for a minute, and a downstream asked for an hour's rest.
      const w = qa.worker({ operations: [limited], pollIntervalMs: 10 });
      await w.start();
      const first = await qa.enqueue(limited, { n: 0 }, { key: 'before-backup' });
      await qa.waitFor(first.id, { timeoutMs: 30_000 });
      await w.stop();
      await qa.store.flowBackoff({ operation: limited.name, rateKey: '', delayMs: 3_600_000 });
      const registered = await qa.store.scheduleRegister({
        name: 'digest',
        cron: '* * * * * *',
        timezone: null,
        operation: 'digest.send',
      });
      const restoredAt = Date.now();
      const restored = await backupAndRestore(kind, src, () => qa.close());

      const qb = await openQueue({ store: restored.url });
      cleanup.push(() => qb.close());
      expect(
        (await qb.queues.paused()).map(({ kind, name, actor, reason }) => ({
          kind,
          name,
          actor,
          reason,
        })),
      ).toEqual([
        { kind: 'operation', name: 'payments.charge', actor: 'ops', reason: null },
        { kind: 'queue', name: 'emails', actor: 'ops', reason: 'provider outage' },
      ]);
      const [digest] = await qb.store.scheduleList();
      expect(digest).toMatchObject({ name: 'digest', cron: '* * * * * *' });
      expect(digest!.lastSlotAt).toBeGreaterThanOrEqual(restoredAt);
      expect(digest!.lastSlotAt).toBeGreaterThan(registered.lastSlotAt);
      // A new job of the limited operation starts at once on the restored store.
      const next = await qb.enqueue(limited, { n: 1 }, { key: 'after-restore' });
      const wb = qb.worker({ operations: [limited], pollIntervalMs: 10 });
      await wb.start();
      try {
        await expect(qb.waitFor(next.id, { timeoutMs: 10_000 })).resolves.toMatchObject({
          state: 'SUCCEEDED',
        });
      } finally {
        await wb.stop();
      }
      expect(sent).toEqual(['before-backup', 'after-restore']);
    },
    90_000,
  );
});

describe.skipIf(pgReason !== null || !hasPgTools)('PostgreSQL restore is one transaction', () => {
  async function dumpOfJobs(): Promise<string> {
    const a = await tempPgStore();
    cleanup.push(() => a.drop());
    const q = await openQueue({ store: a.url });
    const op = defineOperation({ name: 'op.a', execute: () => Promise.resolve(null) });
    await q.enqueueMany(
      op,
      Array.from({ length: 20 }, (_, i) => ({ input: { n: i }, key: `k-${i}` })),
    );
    await q.close();
    const dump = join(tempDir(), 'reckon.dump');
    await run('pg_dump', ['--format=custom', '--schema=reckon', `--file=${dump}`, a.url]);
    return dump;
  }
  const visible = async (c: pg.Client) =>
    (await c.query<{ v: boolean }>(`SELECT to_regclass('reckon.jobs') IS NOT NULL AS v`)).rows[0]!
      .v;

  /** A dump of 20 jobs, an empty target database and a client watching it. */
  async function dumpAndProbedTarget() {
    const dump = await dumpOfJobs();
    const b = await tempPgStore();
    cleanup.push(() => b.drop());
    const probe = new pg.Client({ connectionString: b.url });
    await probe.connect();
    cleanup.push(() => probe.end());
    return { dump, b, probe };
  }

  it('a failure between loading and marking leaves nothing; a second restore works', async () => {
    const { dump, b, probe } = await dumpAndProbedTarget();
    const target = { dump, connectionString: b.url, schema: 'reckon', location: 'test' };
    let sawDuringLoad: boolean | undefined;
    await expect(
      restorePg({
        ...target,
        reconcile: 'unfinished',
        hooks: {
          afterLoad: async () => {
            sawDuringLoad = await visible(probe);
            throw new Error('injected: the host dies between loading and marking');
          },
        },
      }),
    ).rejects.toThrow(/injected/);
    expect(sawDuringLoad).toBe(false);
    expect(await visible(probe)).toBe(false);
    const r = await restorePg({ ...target, reconcile: 'unfinished' });
    expect(r.reconciled).toEqual({ leased: 0, queued: 20, approvals: 0 });
    expect(r.jobs).toEqual({ UNKNOWN: 20 });
  }, 60_000);

  it('a worker polling during the restore never claims an unmarked job', async () => {
    const { dump, b, probe } = await dumpAndProbedTarget();
    let ran = 0;
    let firstSight: Record<string, number> | undefined;
    let stop = false;
    // A worker that starts the moment the restored tables are visible.
    const poller = (async () => {
      while (!stop && !(await visible(probe))) await new Promise((r) => setTimeout(r, 2));
      if (stop) return;
      const states = await probe.query<{ state: string; n: number }>(
        'SELECT state, count(*)::int AS n FROM reckon.jobs GROUP BY state',
      );
      firstSight = Object.fromEntries(states.rows.map((s) => [s.state, s.n]));
      const q = await openQueue({ store: b.url });
      const op = defineOperation({
        name: 'op.a',
        execute: (_i, ctx) => ctx.dispatch(() => Promise.resolve((ran++, null))),
      });
      const w = q.worker({ operations: [op], pollIntervalMs: 10 });
      await w.start();
      await w.stop();
      await q.close();
    })();
    await restorePg({
      dump,
      connectionString: b.url,
      schema: 'reckon',
      location: 'test',
      reconcile: 'unfinished',
      hooks: { afterLoad: () => new Promise((r) => setTimeout(r, 300)) },
    });
    await poller;
    stop = true;
    expect(firstSight).toEqual({ UNKNOWN: 20 });
    expect(ran).toBe(0);
  }, 60_000);

  it('the password reaches psql in PGPASSWORD, never on a command line', async () => {
    const dump = await dumpOfJobs();
    const b = await tempPgStore();
    cleanup.push(() => b.drop());
    const bin = tempDir();
    const log = join(bin, 'argv.log');
    for (const tool of ['psql', 'pg_restore']) {
      const real = spawnSync('sh', ['-c', `command -v ${tool}`])
        .stdout.toString()
        .trim();
      writeFileSync(
        join(bin, tool),
        `#!/bin/sh\necho "${tool} $* PGPASSWORD=$PGPASSWORD" >> '${log}'\nexec '${real}' "$@"\n`,
      );
      chmodSync(join(bin, tool), 0o755);
    }
    const url = new URL(b.url);
    url.password = 'sekret-pw';
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    try {
      await restorePg({
        dump,
        connectionString: url.toString(),
        schema: 'reckon',
        location: 'test',
        reconcile: 'none',
      });
    } finally {
      process.env.PATH = path;
    }
    const lines = readFileSync(log, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      const [argv] = line.split(' PGPASSWORD=');
      expect(argv).not.toContain('sekret-pw');
    }
    expect(lines.find((l) => l.startsWith('psql'))).toMatch(/PGPASSWORD=sekret-pw$/);
  }, 60_000);
});
