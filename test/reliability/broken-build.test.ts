/**
 * A harness that passes a broken build proves nothing. Here one safeguard is switched off in the
 * worker processes (RECKON_UNSAFE_DISABLE_SAFEGUARD, honoured only with NODE_ENV=test, see
 * src/core/unsafe.ts) and the same short chaos run that passes on the real build must report
 * the duplicates, with their jobs and request keys, and `ok: false`.
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { disabledSafeguardFrom } from '../../src/core/unsafe.js';
import { runChaos, type ChaosOptions, type ChaosReport } from '../../src/testkit/chaos.js';
import type { ViolationKind } from '../../src/testkit/verdict.js';
import { scripted } from '../../src/testkit/downstream.js';
import { STORE_KINDS } from '../helpers/stores.js';
import { Rig, expectKeptPromises, until } from './harness.js';

/**
 * `lookup` jobs only: that downstream does not deduplicate, so a second request is a second
 * effect. Workers freeze for 1 s right before the dispatch-marker write, twice their lease and
 * less than the operation's timeout (whose abort would stop the send by itself): when they wake,
 * the fence must stop them. Random SIGKILLs restart workers, each armed anew. The downstream loses
 * 15% of its answers after committing: UNKNOWN, which the lookup must settle, never a blind retry.
 */
const BROKEN_BUILD_RUN: ChaosOptions = {
  jobs: 120,
  workers: 3,
  seed: 8_128,
  scenario: 'lookup',
  kills: {
    everyMs: 800,
    onReceipt: 0,
    faultShare: 1,
    faultMenu: ['lease-expired-while-alive=pause:1000%0.5'],
  },
  worker: { concurrency: 4, leaseMs: 500 },
  downstream: { ok: 85, drop: 15, delayProbability: 1, delayMsMax: 100 },
  calmAt: 0.9,
  deadlineMs: 40_000,
};

function sabotaged(safeguard: string): ChaosOptions {
  return {
    ...BROKEN_BUILD_RUN,
    workerEnv: { NODE_ENV: 'test', RECKON_UNSAFE_DISABLE_SAFEGUARD: safeguard },
  };
}

function expectCaught(report: ChaosReport): void {
  expect(report.ok).toBe(false);
  expect(report.duplicates).toBeGreaterThan(0);
  const dup = report.violations.find((v) => v.kind === 'duplicate')!;
  expect(dup.jobId).toEqual(expect.any(String));
  expect(dup.effects).toBeGreaterThanOrEqual(2);
  expect(dup.requestKey).toMatch(/^lookup-/);
}

/** The run failed, and said why with at least one finding of these kinds. */
function expectCaughtAs(report: ChaosReport, kinds: ViolationKind[]): void {
  expect(report.ok).toBe(false);
  const found = report.violations.map((v) => v.kind);
  expect(
    found.some((k) => kinds.includes(k)),
    JSON.stringify(report.violations.slice(0, 5)),
  ).toBe(true);
}

describe('the harness catches a broken build', () => {
  it('the real build passes the run', async () => {
    const report = await runChaos(BROKEN_BUILD_RUN);
    expect(report.violations).toEqual([]);
    expect(report.ok).toBe(true);
    // The run did exercise both safeguards.
    expect(report.faultsFired['lease-expired-while-alive:pause']).toBeGreaterThan(0);
    expect(report.reconciledByLookup).toBeGreaterThan(0);
  });

  it('without the fence on the dispatch marker, a worker that lost its lease sends a duplicate', async () => {
    const report = await runChaos(sabotaged('dispatch-fence'));
    expectCaught(report);
  });

  it('with UNKNOWN taken for a retryable failure, a lost answer becomes a duplicate', async () => {
    const report = await runChaos(sabotaged('unknown-retry'));
    expectCaught(report);
  });

  it('with the side effect started before its marker, a worker that lost its lease has sent anyway', async () => {
    const report = await runChaos(sabotaged('marker-after-dispatch'));
    expectCaught(report);
  });

  it('with a fresh request key on each retry, the effects land under keys the journal does not know', async () => {
    const report = await runChaos(sabotaged('new-key-on-retry'));
    expectCaughtAs(report, ['effect-under-unknown-key']);
    const orphan = report.violations.find((v) => v.kind === 'effect-under-unknown-key')!;
    expect(orphan.requestKey).toMatch(/^lookup-.*~\d+$/);
  });
});

/**
 * A fenced-out outcome only does harm while another worker holds the job, a moment a random
 * run rarely meets (the retried job usually waits its turn): this test makes it. A worker
 * freezes before its marker, a rescuer retries the job, and the frozen one wakes (resumed by
 * the test) while the rescuer's request is in flight at the downstream.
 */
describe.each(STORE_KINDS)("a fenced-out worker's outcome, on %s", (kind) => {
  async function run(ctx: TestContext, env: Record<string, string>) {
    const rig = await Rig.open(ctx, kind, {
      downstream: { behaviour: scripted({ 'none-0': [{ action: 'ok', delayMs: 1_500 }] }) },
    });
    const [id] = await rig.enqueue('none', 1);
    const pause = rig.pauseControl();
    rig.child(
      {
        faults: 'lease-expired-while-alive=pause:60000',
        ownerId: 'frozen',
        concurrency: 1,
        timeoutMs: 10_000,
      },
      { ...pause.env, ...env },
    );
    await until(
      'the claim by the frozen worker',
      async () => (await rig.job(id!)).job.state === 'LEASED',
    );
    rig.child({ ownerId: 'rescuer', timeoutMs: 10_000 }, env);
    await until(
      'the rescuer has sent the request',
      () => rig.downstream.requestsOf('none-0') === 1,
    );
    pause.resume();
    return { rig, id: id! };
  }

  it('the real build keeps it as late evidence: one effect', async (ctx) => {
    const { rig, id } = await run(ctx, {});
    await rig.settle();
    expectKeptPromises(await rig.verdict([id]));
    expect(rig.downstream.effectsOf('none-0')).toBe(1);
  });

  it('written anyway (unfenced-outcome), the verdict flags the job moved on under its owner', async (ctx) => {
    const { rig, id } = await run(ctx, {
      NODE_ENV: 'test',
      RECKON_UNSAFE_DISABLE_SAFEGUARD: 'unfenced-outcome',
    });
    // The moment the frozen worker's outcome lands on the job the rescuer holds.
    await until('the outcome written past the fence', async () =>
      (await rig.job(id)).events.some((e) => e.kind === 'unfenced-outcome'),
    );
    const v = await rig.verdict([id]);
    const kinds = v.findings.map((f) => f.kind);
    expect(kinds, v.violations.join('\n')).toContain('attempt-left-leased');
  });
});

/** The scenarios of test/helpers/two-fleets.ts in a child process, with `safeguard` off. */
async function twoFleets(safeguard?: string): Promise<{
  duplicates: string[];
  early: unknown[];
  keyReuse: 'conflict' | 'swallowed' | 'created';
}> {
  const root = resolve(import.meta.dirname, '..', '..');
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(root, 'test', 'fixtures', 'two-fleets.ts')],
    {
      cwd: root,
      env: {
        ...process.env,
        NODE_ENV: 'test',
        RECKON_UNSAFE_DISABLE_SAFEGUARD: safeguard ?? '',
      },
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const code = await new Promise<number | null>((res) => child.once('close', res));
  expect(code, stderr).toBe(0);
  return JSON.parse(stdout) as Awaited<ReturnType<typeof twoFleets>>;
}

describe('the horizon and key-reuse checks catch a broken build', () => {
  it('the real build: no early lookup, no duplicate charge, the reused key refused', async () => {
    expect(await twoFleets()).toEqual({ duplicates: [], early: [], keyReuse: 'conflict' });
  }, 30_000);

  it('with lookups before the horizon, the lagging downstream is charged twice', async () => {
    const r = await twoFleets('lookup-before-horizon');
    expect(r.early.length).toBeGreaterThan(0);
    expect(r.duplicates).toEqual(['early-1', 'early-2']);
  }, 30_000);

  it('with dedup ignoring the operation, a refund under a charge’s key is swallowed', async () => {
    const r = await twoFleets('dedup-ignores-operation');
    expect(r.keyReuse).toBe('swallowed');
  }, 30_000);
});

describe('the sabotage switch', () => {
  it('is honoured only with NODE_ENV=test, and knows its safeguards', () => {
    const unsafe = { RECKON_UNSAFE_DISABLE_SAFEGUARD: 'dispatch-fence' };
    expect(disabledSafeguardFrom({ ...unsafe, NODE_ENV: 'test' })).toBe('dispatch-fence');
    expect(disabledSafeguardFrom({ ...unsafe, NODE_ENV: 'production' })).toBeNull();
    expect(disabledSafeguardFrom(unsafe)).toBeNull();
    expect(() =>
      disabledSafeguardFrom({ RECKON_UNSAFE_DISABLE_SAFEGUARD: 'fences', NODE_ENV: 'test' }),
    ).toThrow(/unknown safeguard/);
  });

  it('reckon chaos exits 2 on a violation and prints the seed that replays it', async () => {
    const root = resolve(import.meta.dirname, '..', '..');
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(root, 'src', 'cli', 'main.ts'),
        'chaos',
        '--jobs',
        '60',
        '--scenario',
        'none',
        // No kills, no pauses: each dropped answer (one request in five, decided by the seed
        // from key and attempt) is an UNKNOWN that the sabotaged build retries blindly.
        '--kill-every-ms',
        '0',
        '--fault-share',
        '0',
        '--kill-on-receipt',
        '0',
        '--downstream',
        'drop=20',
        '--seed',
        '5',
      ],
      {
        cwd: root,
        env: { ...process.env, NODE_ENV: 'test', RECKON_UNSAFE_DISABLE_SAFEGUARD: 'unknown-retry' },
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const code = await new Promise<number | null>((res) => child.once('close', res));
    expect(code, stderr).toBe(2);
    expect(stdout).toContain('BROKEN PROMISE');
    expect(stdout).toMatch(/duplicate: job \S+ key none-/);
    expect(stderr).toContain('replay with --seed 5');
  });
});
