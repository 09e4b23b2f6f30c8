/**
 * A harness that passes a broken build proves nothing. Here one safeguard is switched off in the
 * worker processes (RECKON_UNSAFE_DISABLE_SAFEGUARD, honoured only with NODE_ENV=test, see
 * src/runtime/unsafe.ts) and the same short chaos run that passes on the real build must report
 * the duplicates, with their jobs and request keys, and `ok: false`.
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { disabledSafeguardFrom } from '../../src/core/unsafe.js';
import { runChaos, type ChaosOptions, type ChaosReport } from '../../src/testkit/chaos.js';

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
  expect(dup).toMatchObject({ jobId: expect.any(String) as string, effects: 2 });
  expect(dup.requestKey).toMatch(/^lookup-/);
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
});

/** The scenarios of test/helpers/two-fleets.ts in a child process, with `safeguard` off. */
async function twoFleets(safeguard?: string): Promise<{
  duplicates: string[];
  early: unknown[];
  keyReuse: 'conflict' | 'swallowed';
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
