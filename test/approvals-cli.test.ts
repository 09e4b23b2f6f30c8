/**
 * Approvals from outside the process: `reckon approvals list|approve|deny` and `reckon status
 * --max-approval-age` as real processes, and `/api/approvals` of a real `reckon serve`, each on a
 * SQLite store of its own (the store-side paths run on both stores in approvals.test.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openQueue, type JobRecord } from '../src/index.js';
import { refund } from './fixtures/approval-ops.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  tempSqliteStore,
  type TestStore,
} from './helpers/stores.js';

const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'src', 'cli', 'main.ts');
const children = new Set<ChildProcess>();
let store: TestStore;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function start(args: string[]): ChildProcess {
  const env: NodeJS.ProcessEnv = { ...process.env, RECKON_STORE: store.url };
  delete env.RECKON_FAULTS;
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

function reckon(args: string[]): Promise<Run> {
  const child = start(args);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((res, rej) => {
    child.once('error', rej);
    child.once('close', (code) => res({ code, stdout, stderr }));
  });
}

/** Enqueues awaiting jobs, one per amount, in the test process. */
async function awaiting(...amounts: number[]): Promise<JobRecord[]> {
  const q = await openQueue({ store: store.url });
  try {
    const jobs: JobRecord[] = [];
    for (const amount of amounts) jobs.push(await q.enqueue(refund, { amount }));
    return jobs;
  } finally {
    await q.close();
  }
}

beforeEach(() => {
  store = tempSqliteStore();
});

afterEach(async () => {
  for (const c of children) c.kill('SIGKILL');
  children.clear();
  await store.drop();
});

describe('reckon approvals', () => {
  it('lists awaiting jobs, approves and denies them with exit codes and --json', async () => {
    const [a, b] = await awaiting(10, 20);
    const table = await reckon(['approvals', 'list']);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain('refund of 10 EUR');
    expect(table.stdout).toContain('2 job(s) await approval');
    const listed = JSON.parse((await reckon(['approvals', 'list', '--json'])).stdout) as {
      id: string;
      input: unknown;
      approvalReason: string;
      ageMs: number;
      expiresInMs: number;
    }[];
    expect(listed.map((j) => [j.id, j.input, j.approvalReason])).toEqual([
      [a!.id, { amount: 10 }, 'refund of 10 EUR'],
      [b!.id, { amount: 20 }, 'refund of 20 EUR'],
    ]);
    expect(listed[0]!.expiresInMs).toBeGreaterThan(0);
    const shown = await reckon(['jobs', 'show', a!.id]);
    expect(shown.stdout).toMatch(/state\s+│ AWAITING_APPROVAL/);
    expect(shown.stdout).toMatch(/approval reason\s+│ refund of 10 EUR/);

    // Missing --actor: a usage error.
    const noActor = await reckon(['approvals', 'approve', a!.id]);
    expect(noActor.code).toBe(64);

    const approved = await reckon([
      'approvals',
      'approve',
      a!.id,
      '--actor',
      'alice',
      '--note',
      'agreed',
      '--json',
    ]);
    expect(approved.code, approved.stderr).toBe(0);
    expect(JSON.parse(approved.stdout)).toMatchObject({ id: a!.id, state: 'QUEUED' });
    const denied = await reckon(['approvals', 'deny', b!.id, '--actor', 'bob']);
    expect(denied.code, denied.stderr).toBe(0);
    expect(denied.stdout).toContain(`job ${b!.id} denied by operator:bob; now CANCELLED`);

    // Decided already: JOB_STATE_CONFLICT, exit 1, as JSON too.
    const again = await reckon(['approvals', 'deny', a!.id, '--actor', 'carol', '--json']);
    expect(again.code).toBe(1);
    expect(JSON.parse(again.stdout)).toMatchObject({ error: { code: 'JOB_STATE_CONFLICT' } });
    const missing = await reckon(['approvals', 'approve', 'nope', '--actor', 'carol']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('[JOB_NOT_FOUND]');

    expect((await reckon(['approvals', 'list'])).stdout).toContain('nothing awaits approval');
    const listedByState = await reckon(['jobs', 'list', '--state', 'CANCELLED', '--json']);
    expect(
      (JSON.parse(listedByState.stdout) as { jobs: { id: string }[] }).jobs.map((j) => j.id),
    ).toEqual([b!.id]);
  });

  it('enqueue says the job awaits approval; jobs list --state AWAITING_APPROVAL; status --max-approval-age turns unhealthy', async () => {
    expect((await reckon(['init'])).code).toBe(0);
    const enqueued = await reckon([
      'enqueue',
      'payments.refund',
      '{"amount":5}',
      '--operations',
      'test/fixtures/approval-ops.ts',
    ]);
    expect(enqueued.code, enqueued.stderr).toBe(0);
    const a = { id: enqueued.stdout.trim() };
    expect(enqueued.stderr).toContain(`it awaits approval (reckon approvals approve|deny ${a.id}`);
    const byState = await reckon(['jobs', 'list', '--state', 'AWAITING_APPROVAL', '--json']);
    expect(byState.code, byState.stderr).toBe(0);
    expect(
      (JSON.parse(byState.stdout) as { jobs: { id: string }[] }).jobs.map((j) => j.id),
    ).toEqual([a.id]);

    const healthy = await reckon(['status', '--max-approval-age', '3600000']);
    expect(healthy.code, healthy.stderr).toBe(0);
    expect(healthy.stdout).toMatch(/payments\.refund\s+│ 1 /);
    expect(healthy.stdout).toMatch(/ok\s+approval-age/);
    // The job has waited at least as long as the processes above took to start.
    const report = await reckon(['status', '--max-approval-age', '0', '--json']);
    expect(report.code).toBe(2);
    const body = JSON.parse(report.stdout) as {
      healthy: boolean;
      checks: unknown[];
      approvals: unknown[];
    };
    expect(body.healthy).toBe(false);
    expect(body.checks).toEqual([
      expect.objectContaining({ name: 'approval-age', ok: false, limit: 0 }),
    ]);
    expect(body.approvals).toEqual([
      expect.objectContaining({ operation: 'payments.refund', awaiting: 1 }),
    ]);
  });
});

describe.each(STORE_KINDS)('two approver processes at once on %s', (kind) => {
  it('one decision is recorded; the other process gets JOB_STATE_CONFLICT', async (ctx) => {
    if (kind === 'postgres') {
      const why = await pgUnavailableReason();
      if (why) ctx.skip(why);
      await store.drop();
      store = await makeTestStore('postgres');
    }
    const [job] = await awaiting(99);
    const runs = await Promise.all([
      reckon(['approvals', 'approve', job!.id, '--actor', 'alice', '--json']),
      reckon(['approvals', 'deny', job!.id, '--actor', 'bob', '--json']),
    ]);
    expect(runs.map((r) => r.code).sort()).toEqual([0, 1]);
    const loser = runs.find((r) => r.code === 1)!;
    expect(JSON.parse(loser.stdout)).toMatchObject({ error: { code: 'JOB_STATE_CONFLICT' } });
    const winner = JSON.parse(runs.find((r) => r.code === 0)!.stdout) as JobRecord;
    const q = await openQueue({ store: store.url });
    try {
      const detail = (await q.job(job!.id))!;
      expect(detail.job.state).toBe(winner.state);
      expect(detail.events.filter((e) => e.fromState === 'AWAITING_APPROVAL')).toHaveLength(1);
    } finally {
      await q.close();
    }
  });
});

describe('/api/approvals of reckon serve', () => {
  it('lists for anyone who may read, and takes a decision only with the token', async () => {
    const [a, b] = await awaiting(7, 8);
    const child = start(['serve', '--port', '0', '--token', 's3cret', '--max-approval-age', '0']);
    const url = await new Promise<string>((res, rej) => {
      let err = '';
      child.stderr!.setEncoding('utf8').on('data', (d: string) => {
        err += d;
        const m = /at (http:\/\/[^/\s]+)\//.exec(err);
        if (m) res(m[1]!);
      });
      child.once('exit', (code) => rej(new Error(`exited ${code}: ${err}`)));
    });
    const listed = (await (await fetch(`${url}/api/approvals`)).json()) as {
      jobs: { id: string; approvalReason: string }[];
    };
    expect(listed.jobs.map((j) => [j.id, j.approvalReason])).toEqual([
      [a!.id, 'refund of 7 EUR'],
      [b!.id, 'refund of 8 EUR'],
    ]);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/^reckon_awaiting_approval_jobs\{operation="payments.refund"\} 2$/m);
    expect(metrics).toMatch(
      /^reckon_awaiting_approval_oldest_age_seconds\{operation="payments.refund"\} [0-9.e-]+$/m,
    );
    expect(await (await fetch(`${url}/`)).text()).toContain('Awaiting approval');
    const status = (await (await fetch(`${url}/api/status`)).json()) as {
      healthy: boolean;
      checks: unknown[];
      approvals: unknown[];
    };
    expect(status.healthy).toBe(false);
    expect(status.checks).toEqual([expect.objectContaining({ name: 'approval-age', ok: false })]);
    expect(status.approvals).toEqual([
      expect.objectContaining({ operation: 'payments.refund', awaiting: 2 }),
    ]);

    const decide = (id: string, body: unknown, token?: string) =>
      fetch(`${url}/api/approvals/${id}`, {
        method: 'POST',
        body: JSON.stringify(body),
        headers: token ? { authorization: `Bearer ${token}` } : {},
      });
    expect((await decide(a!.id, { approve: true, actor: 'eve' })).status).toBe(401);
    expect((await decide(a!.id, { approve: true, actor: 'eve' }, 'wrong')).status).toBe(401);
    // The decider is the token's principal; a body without the decision itself is refused.
    expect((await decide(a!.id, { actor: 'dana' }, 's3cret')).status).toBe(400);
    const ok = await decide(a!.id, { approve: true, actor: 'dana', note: 'fine' }, 's3cret');
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { job: JobRecord }).job).toMatchObject({ state: 'QUEUED' });
    const conflict = await decide(a!.id, { approve: false, actor: 'dana' }, 's3cret');
    expect(conflict.status).toBe(409);
    const denied = await decide(b!.id, { approve: false, actor: 'dana' }, 's3cret');
    expect(((await denied.json()) as { job: JobRecord }).job).toMatchObject({
      state: 'CANCELLED',
      error: { name: 'ApprovalDenied' },
    });
    expect((await decide('nope', { approve: true, actor: 'dana' }, 's3cret')).status).toBe(404);
  });
});
