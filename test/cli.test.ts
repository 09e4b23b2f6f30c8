/**
 * The `reckon` CLI as a real process (`node --import tsx src/cli/main.ts …`, no build needed),
 * each test on a SQLite store of its own.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openQueue, type Queue } from '../src/index.js';
import { echo, slow, uncertain } from './fixtures/cli-ops.js';
import { tempSqliteStore, type TestStore } from './helpers/stores.js';

const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'src', 'cli', 'main.ts');
const OPS = 'test/fixtures/cli-ops.ts';

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

const children = new Set<ChildProcess>();

function start(args: string[], env: Record<string, string | undefined> = {}): ChildProcess {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete childEnv.RECKON_FAULTS;
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    env: childEnv,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

function finish(child: ChildProcess, stdin?: string): Promise<Run> {
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  if (stdin !== undefined) child.stdin!.end(stdin);
  else child.stdin!.end();
  return new Promise((res, rej) => {
    child.once('error', rej);
    child.once('close', (code, signal) => res({ code, signal, stdout, stderr }));
  });
}

let store: TestStore;

/** Runs `reckon <args>` on this test's store. */
function reckon(args: string[], options: { stdin?: string } = {}): Promise<Run> {
  return finish(start(args, { RECKON_STORE: store.url }), options.stdin);
}

function json<T = Record<string, unknown>>(run: Run): T {
  return JSON.parse(run.stdout) as T;
}

/** An expected error: the one-line message with its code, never a stack trace. */
function expectCleanError(run: Run, exitCode: number, code: string): void {
  expect(run.code, run.stderr).toBe(exitCode);
  expect(run.stderr).toMatch(/^reckon: /);
  expect(run.stderr).not.toMatch(/\n\s+at /);
  if (code !== 'USAGE') expect(run.stderr).toContain(`[${code}]`);
}

async function withApi<T>(fn: (q: Queue) => Promise<T>): Promise<T> {
  const q = await openQueue({ store: store.url, operations: [echo, uncertain, slow] });
  try {
    return await fn(q);
  } finally {
    await q.close();
  }
}

/** A NEEDS_REVIEW job made through the API: dispatch throws a plain Error, nothing can prove the outcome. */
function makeReviewJob(): Promise<string> {
  return withApi(async (q) => {
    const job = await q.enqueue(uncertain, { to: 'someone' }, { key: 'uncertain-1' });
    const worker = q.worker({
      operations: [uncertain],
      pollIntervalMs: 10,
      reconcileIntervalMs: 20,
      reclaimIntervalMs: 1_000,
    });
    const reviewed = new Promise<void>((res) => worker.once('review', () => res()));
    await worker.start();
    await reviewed;
    await worker.stop();
    return job.id;
  });
}

async function reckonInit(): Promise<void> {
  const r = await reckon(['init']);
  expect(r.code, r.stderr).toBe(0);
}

beforeEach(() => {
  store = tempSqliteStore();
});

afterEach(async () => {
  for (const c of children) c.kill('SIGKILL');
  children.clear();
  await store.drop();
});

describe('reckon CLI', () => {
  it('prints --help for every command with exit 0, and --version', async () => {
    const commands = [
      [],
      ['init'],
      ['enqueue'],
      ['work'],
      ['jobs'],
      ['jobs', 'list'],
      ['jobs', 'show'],
      ['jobs', 'cancel'],
      ['review'],
      ['review', 'list'],
      ['review', 'resolve'],
      ['status'],
      ['demo'],
    ];
    const runs = await Promise.all(commands.map((c) => reckon([...c, '--help'])));
    runs.forEach((r, i) => {
      expect(r.code, `${commands[i]!.join(' ')}: ${r.stderr}`).toBe(0);
      expect(r.stdout).toMatch(/^Usage: reckon/);
    });
    expect(runs[0]!.stdout).toContain('Exit codes:');
    expect(runs[5]!.stdout).toContain('--json');
    const v = await reckon(['--version']);
    expect(v.code).toBe(0);
    expect(v.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('init creates the store and reports its schema version; other commands need it to exist', async () => {
    const missing = await reckon(['jobs', 'list', '--json']);
    expectCleanError(missing, 1, 'STORE_NOT_FOUND');
    expect(json<{ error: { code: string } }>(missing).error.code).toBe('STORE_NOT_FOUND');
    const path = store.url.slice('sqlite:'.length);
    expect(existsSync(path)).toBe(false);

    const human = await reckon(['init']);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(path);
    expect(human.stdout).toMatch(/schema version \d+/);
    const again = await reckon(['init', '--json']);
    expect(again.code).toBe(0);
    expect(json(again)).toMatchObject({ store: store.url, kind: 'sqlite' });
    expect(json<{ schemaVersion: number }>(again).schemaVersion).toBeGreaterThan(0);
    expect(existsSync(path)).toBe(true);
  });

  it('enqueue prints the job id, deduplicates by key, and refuses a conflicting key with exit 1', async () => {
    await reckonInit();
    const args = ['enqueue', 'test.echo', '{"to":"a@b.c"}', '--operations', OPS, '--key', 'k1'];
    const first = await reckon(args);
    expect(first.code, first.stderr).toBe(0);
    const id = first.stdout.trim();
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(first.stderr).toContain('enqueued test.echo');

    const dup = await reckon([...args, '--json']);
    expect(dup.code, dup.stderr).toBe(0);
    expect(json(dup)).toMatchObject({ id, deduplicated: true, requestKey: 'k1', state: 'QUEUED' });

    const conflict = await reckon([
      'enqueue',
      'test.echo',
      '{"to":"other@b.c"}',
      '--operations',
      OPS,
      '--key',
      'k1',
      '--json',
    ]);
    expectCleanError(conflict, 1, 'REQUEST_KEY_CONFLICT');
    expect(json(conflict)).toMatchObject({
      error: { code: 'REQUEST_KEY_CONFLICT', details: { existingJobId: id, requestKey: 'k1' } },
    });

    // Input from stdin and from a file; a step of an agent run.
    const fromStdin = await reckon(
      [
        'enqueue',
        'test.echo',
        '-',
        '--operations',
        OPS,
        '--run-id',
        'r1',
        '--step-id',
        's1',
        '--json',
      ],
      { stdin: '{"n":1}' },
    );
    expect(fromStdin.code, fromStdin.stderr).toBe(0);
    expect(json(fromStdin)).toMatchObject({ requestKey: 'r1:s1', deduplicated: false });
    const file = join(store.url.slice('sqlite:'.length), '..', 'input.json');
    writeFileSync(file, '{"n":2}');
    const fromFile = await reckon([
      'enqueue',
      'test.echo',
      '--input-file',
      file,
      '--operations',
      OPS,
      '--queue',
      'other',
      '--priority',
      '5',
      '--delay-ms',
      '60000',
      '--json',
    ]);
    expect(fromFile.code, fromFile.stderr).toBe(0);
    expect(json(fromFile)).toMatchObject({ queue: 'other', deduplicated: false });

    const jobs = await withApi((q) => q.jobs());
    expect(jobs).toHaveLength(3);
    const delayed = jobs.find((j) => j.queue === 'other')!;
    expect(delayed.priority).toBe(5);
    expect(delayed.runAt).toBeGreaterThan(Date.now() + 30_000);
    expect(jobs.find((j) => j.requestKey === 'k1')!.input).toEqual({ to: 'a@b.c' });
  });

  it('rejects bad input with a clear error and writes nothing', async () => {
    await reckonInit();
    const enqueue = (...rest: string[]) => reckon(['enqueue', ...rest]);
    const cases: [Promise<Run>, number, string, RegExp][] = [
      [enqueue('test.echo', '{to:1}', '--operations', OPS), 1, 'INVALID_INPUT', /not valid JSON/],
      [
        enqueue('test.nope', '{}', '--operations', OPS),
        1,
        'UNKNOWN_OPERATION',
        /known: test\.echo/,
      ],
      [
        enqueue('test.echo', '{}', '--key', '', '--operations', OPS),
        1,
        'INVALID_INPUT',
        /key is empty/,
      ],
      [
        enqueue('test.echo', '{}', '--operations', 'test/fixtures/cli-no-ops.ts'),
        64,
        'NO_OPERATIONS',
        /exports no operations/,
      ],
      [
        enqueue('test.echo', '{}', '--operations', 'test/fixtures/none.ts'),
        64,
        'OPERATIONS_MODULE_NOT_FOUND',
        /not found/,
      ],
      [
        enqueue('test.echo', '{}', '--operations', OPS, '--priority', 'high'),
        64,
        'USAGE',
        /--priority/,
      ],
      [enqueue('test.echo', '{}', '--operations', OPS, '--run-id', 'r1'), 64, 'USAGE', /--step-id/],
      [enqueue('test.echo', '--operations', OPS), 64, 'USAGE', /no input/],
      [enqueue('test.echo', '{}'), 64, 'USAGE', /--operations/],
    ];
    for (const [pending, exit, code, message] of cases) {
      const r = await pending;
      expectCleanError(r, exit, code);
      expect(r.stderr).toMatch(message);
    }
    const usageJson = await reckon(['jobs', 'list', '--limit', '0', '--json']);
    expect(usageJson.code).toBe(64);
    expect(json(usageJson)).toMatchObject({ error: { code: 'USAGE' } });
    expect(await withApi((q) => q.jobs())).toEqual([]);
  });

  it('chaos refuses settings it cannot honour before it starts a worker', async () => {
    const chaos = (...rest: string[]) => reckon(['chaos', '--jobs', '5', ...rest]);
    const cases: [Promise<Run>, RegExp][] = [
      [chaos('--downstream', 'drop=x'), /drop must be a number of at least 0/],
      [chaos('--downstream', 'lost=5'), /names from ok, fail, error, reset, drop, delay/],
      [chaos('--downstream', 'ok=0,fail=0,error=0,reset=0,drop=0'), /every answer at weight 0/],
      [chaos('--fault-share', '1.5'), /--fault-share.*from 0 to 1/],
      [chaos('--kill-on-receipt', '-0.1'), /--kill-on-receipt.*from 0 to 1/],
      [
        chaos('--operations', OPS, '--ledger', OPS, '--downstream', 'drop=5'),
        /--downstream sets the built-in downstream/,
      ],
    ];
    for (const [pending, message] of cases) {
      const r = await pending;
      expectCleanError(r, 64, 'USAGE');
      expect(r.stderr).toMatch(message);
    }
  });

  it('work processes jobs, then stops gracefully on SIGTERM with a summary', async () => {
    await reckonInit();
    const ids = await withApi(async (q) => {
      const a = await q.enqueueMany(echo, [{ input: { n: 1 } }, { input: { n: 2 } }]);
      const b = await q.enqueue(echo, { n: 3 }, { queue: 'other' });
      return [...a.map((j) => j.id), b.id];
    });
    const child = start(
      [
        'work',
        '--operations',
        OPS,
        '--queue',
        'default',
        '--queue',
        'other',
        '--concurrency',
        '2',
        '--json',
      ],
      { RECKON_STORE: store.url },
    );
    const done = finish(child);
    const deadline = Date.now() + 20_000;
    for (;;) {
      const states = await withApi((q) =>
        Promise.all(ids.map(async (id) => (await q.job(id))!.job.state)),
      );
      if (states.every((s) => s === 'SUCCEEDED')) break;
      if (Date.now() > deadline) throw new Error(`jobs not done: ${states.join(', ')}`);
      await sleep(100);
    }
    child.kill('SIGTERM');
    const r = await done;
    expect(r.code, r.stderr).toBe(0);
    expect(json(r)).toMatchObject({ stoppedBy: 'SIGTERM', succeeded: 3, failed: 0, unknown: 0 });
    // Logs are JSON lines through the logger, on stderr.
    const logs = r.stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { msg: string });
    expect(logs.map((l) => l.msg)).toEqual(
      expect.arrayContaining(['worker started', 'worker stopped']),
    );
  });

  it('work exits at once on a second signal while a job is in flight', async () => {
    await reckonInit();
    const job = await withApi((q) => q.enqueue(slow, {}));
    const child = start(['work', '--operations', OPS, '--log-level', 'warn'], {
      RECKON_STORE: store.url,
    });
    const done = finish(child);
    const deadline = Date.now() + 20_000;
    while ((await withApi((q) => q.job(job.id)))!.attempts[0]?.dispatchedAt == null) {
      if (Date.now() > deadline) throw new Error('the slow job was never dispatched');
      await sleep(100);
    }
    // The first signal is taken (its line on stderr) and the worker waits for the job in flight.
    const heard = new Promise<void>((ok) => {
      let seen = '';
      child.stderr!.on('data', (d: string) => {
        seen += d;
        if (seen.includes('SIGTERM: stopping after jobs in flight')) ok();
      });
    });
    child.kill('SIGTERM');
    await heard;
    expect(child.exitCode).toBeNull();
    child.kill('SIGTERM');
    const r = await done;
    expect(r.code).toBe(143);
    expect(r.stderr).toContain('second SIGTERM');
    // Left LEASED with its dispatch marker: the next worker's reclaimer makes it UNKNOWN.
    expect((await withApi((q) => q.job(job.id)))!.job.state).toBe('LEASED');
  });

  it('jobs list, show and cancel, as tables and as JSON', async () => {
    await reckonInit();
    const [a, b] = await withApi((q) =>
      q.enqueueMany(echo, [
        { input: { n: 1 }, key: 'list-a' },
        { input: { n: 2 }, key: 'list-b', queue: 'other' },
      ]),
    );

    const table = await reckon(['jobs', 'list']);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain(a!.id);
    expect(table.stdout).toContain('QUEUED');
    const listed = json<{ jobs: { id: string }[] }>(await reckon(['jobs', 'list', '--json']));
    expect(listed.jobs.map((j) => j.id).sort()).toEqual([a!.id, b!.id].sort());
    expect(listed).toMatchObject({ nextBefore: null, scanStopped: false });
    const filtered = json<{ jobs: { id: string }[] }>(
      await reckon(['jobs', 'list', '--queue', 'other', '--state', 'queued', '--json']),
    );
    expect(filtered.jobs.map((j) => j.id)).toEqual([b!.id]);

    const show = await reckon(['jobs', 'show', a!.id]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain('list-a');
    expect(show.stdout).toContain('attempts (0)');
    expect(show.stdout).toMatch(/events \(1\)[\s\S]*enqueued/);
    const detail = json<{ job: { id: string }; attempts: unknown[]; events: { kind: string }[] }>(
      await reckon(['jobs', 'show', a!.id, '--json']),
    );
    expect(detail.job.id).toBe(a!.id);
    expect(detail.events.map((e) => e.kind)).toEqual(['enqueued']);

    expectCleanError(await reckon(['jobs', 'show', 'no-such-id']), 1, 'JOB_NOT_FOUND');

    const cancel = await reckon(['jobs', 'cancel', a!.id, '--reason', 'not needed']);
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(cancel.stdout).toContain('cancelled');
    const again = await reckon(['jobs', 'cancel', a!.id, '--json']);
    expectCleanError(again, 1, 'JOB_STATE_CONFLICT');
    expect(json(again)).toMatchObject({ error: { code: 'JOB_STATE_CONFLICT' } });
  });

  it('review lists a NEEDS_REVIEW job with its evidence and records a decision', async () => {
    await reckonInit();
    const id = await makeReviewJob();

    const table = await reckon(['review', 'list']);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain(id);
    expect(table.stdout).toContain('no-definitive-answer');
    const items = json<
      {
        job: { id: string };
        evidence: { dispatchedAt: number | null; why: string; lastAttemptState: string };
      }[]
    >(await reckon(['review', 'list', '--json']));
    expect(items).toHaveLength(1);
    expect(items[0]!.job.id).toBe(id);
    expect(items[0]!.evidence.dispatchedAt).toEqual(expect.any(Number));
    expect(items[0]!.evidence.lastAttemptState).toBe('UNKNOWN');
    expect(items[0]!.evidence.why).toMatch(/neither a lookup/);

    const noActor = await reckon(['review', 'resolve', id, '--as', 'succeeded']);
    expect(noActor.code).toBe(64);
    expect(noActor.stderr).toContain('--actor');

    const resolved = await reckon([
      'review',
      'resolve',
      id,
      '--as',
      'succeeded',
      '--actor',
      'alice',
      '--note',
      'seen in the mailbox',
      '--json',
    ]);
    expect(resolved.code, resolved.stderr).toBe(0);
    expect(json(resolved)).toMatchObject({ id, state: 'SUCCEEDED' });
    const detail = await withApi((q) => q.job(id));
    expect(detail!.attempts[0]).toMatchObject({
      resolution: 'succeeded',
      resolutionSource: 'operator:alice',
    });
    expect(detail!.events.at(-1)).toMatchObject({ kind: 'resolved', actor: 'operator:alice' });

    expectCleanError(
      await reckon(['review', 'resolve', id, '--as', 'retry', '--actor', 'bob']),
      1,
      'JOB_STATE_CONFLICT',
    );
    expect((await reckon(['review', 'list'])).stdout).toContain('nothing to review');
  });

  it('status shows the queues and operations paused, with who paused them and why; --help says so', async () => {
    await reckonInit();
    expect((await reckon(['status'])).stdout).not.toContain('paused');
    await withApi(async (q) => {
      await q.queues.pause('emails', { actor: 'ops', reason: 'provider outage' });
      await q.queues.pause('payments.charge', { operation: true, actor: 'ops' });
    });
    const human = await reckon(['status']);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toMatch(/^paused \(no worker claims their jobs until resumed\):$/m);
    expect(human.stdout).toMatch(
      /│ queue\s+│ emails\s+│ [\d.]+ m?s\s+│ ops\s+│ provider outage\s+│/,
    );
    expect(human.stdout).toMatch(
      /│ operation\s+│ payments\.charge\s+│ [\d.]+ m?s\s+│ ops\s+│ -\s+│/,
    );
    const report = json<{
      paused: { kind: string; name: string; actor: string; reason: string | null }[];
    }>(await reckon(['status', '--json']));
    expect(report.paused).toEqual([
      expect.objectContaining({
        kind: 'operation',
        name: 'payments.charge',
        actor: 'ops',
        reason: null,
      }),
      expect.objectContaining({
        kind: 'queue',
        name: 'emails',
        actor: 'ops',
        reason: 'provider outage',
      }),
    ]);
    const help = await reckon(['status', '--help']);
    expect(help.stdout).toMatch(/paused now/);
    expect(help.stdout).toContain('paused }');
    await withApi((q) => q.queues.resume('emails'));
    expect(json<{ paused: unknown[] }>(await reckon(['status', '--json'])).paused).toHaveLength(1);
  });

  it('status reports health and exits 2 when a threshold is crossed', async () => {
    await reckonInit();
    const healthy = await reckon([
      'status',
      '--max-unknown',
      '0',
      '--max-review',
      '0',
      '--max-queue-age',
      '60000',
    ]);
    expect(healthy.code, healthy.stderr).toBe(0);
    expect(healthy.stdout).toContain('no jobs yet');
    expect(healthy.stdout).toContain('healthy');

    await makeReviewJob();
    // Due for ten minutes: the oldest due age is about that.
    await withApi((q) => q.enqueue(echo, { late: true }, { runAt: Date.now() - 600_000 }));

    const unhealthy = await reckon([
      'status',
      '--max-review',
      '0',
      '--max-queue-age',
      '60000',
      '--max-unknown',
      '0',
    ]);
    expect(unhealthy.code).toBe(2);
    expect(unhealthy.stdout).toMatch(/FAIL\s+review/);
    expect(unhealthy.stdout).toMatch(/FAIL\s+queue-age/);
    expect(unhealthy.stdout).toMatch(/ok\s+unknown/);
    expect(unhealthy.stderr).toMatch(/^reckon: unhealthy: /);

    const report = await reckon(['status', '--max-review', '0', '--json']);
    expect(report.code).toBe(2);
    const body = json<{
      healthy: boolean;
      checks: { name: string; ok: boolean; value: number }[];
      queues: { queue: string; counts: Record<string, number>; oldestDueAgeMs: number | null }[];
      byOperation: { operation: string; needsReview: number }[];
      expiredLeases: number;
    }>(report);
    expect(body.healthy).toBe(false);
    expect(body.checks).toEqual([expect.objectContaining({ name: 'review', ok: false, value: 1 })]);
    expect(body.byOperation).toEqual([
      expect.objectContaining({ operation: 'test.uncertain', needsReview: 1 }),
    ]);
    const def = body.queues.find((q) => q.queue === 'default')!;
    expect(def.counts.QUEUED).toBe(1);
    expect(def.oldestDueAgeMs).toBeGreaterThanOrEqual(600_000);
    expect(body.expiredLeases).toBe(0);

    const lenient = await reckon([
      'status',
      '--max-review',
      '1',
      '--max-queue-age',
      '3600000',
      '--json',
    ]);
    expect(lenient.code).toBe(0);
    expect(json<{ healthy: boolean }>(lenient).healthy).toBe(true);
  });
});
