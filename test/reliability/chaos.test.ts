/**
 * The bounded chaos run of CI, on each store: a few hundred jobs, dozens of kills (random
 * SIGKILLs, fault points, kills as requests arrive), pauses past the lease, a downstream that
 * drops responses; the business outcome of every job must hold. And `reckon chaos` itself.
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { runChaos, type ChaosOptions, type ChaosReport } from '../../src/testkit/chaos.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type StoreKind,
  type TestStore,
} from '../helpers/stores.js';

/** Throughput and kill rate chosen so that 300 jobs take 15–25 s with 30+ kills on 2 cores. */
export const CI_CHAOS: ChaosOptions = {
  jobs: 300,
  workers: 3,
  scenario: 'mixed',
  kills: { everyMs: 350 },
  worker: { concurrency: 4 },
  downstream: {
    ok: 86,
    fail: 2,
    error: 3,
    reset: 3,
    drop: 6,
    delayProbability: 1,
    delayMsMax: 250,
  },
  deadlineMs: 60_000,
};

export async function chaosStore(ctx: TestContext, kind: StoreKind): Promise<TestStore> {
  if (kind === 'postgres') {
    const why = await pgUnavailableReason();
    if (why) ctx.skip(why);
  }
  const store = await makeTestStore(kind);
  ctx.onTestFinished(() => store.drop());
  return store;
}

/** The report, with the violations in the failure message when it is not ok. */
export function expectOk(report: ChaosReport): void {
  expect(report.violations, JSON.stringify(report.violations.slice(0, 10), null, 1)).toEqual([]);
  expect(report).toMatchObject({ ok: true, lost: 0, duplicates: 0, settled: true });
}

describe.each(STORE_KINDS)('chaos on %s', (kind) => {
  it('300 jobs, dozens of kills: every effect at most once, every job settled', async (ctx) => {
    const store = await chaosStore(ctx, kind);
    const report = await runChaos({ ...CI_CHAOS, storeUrl: store.url, seed: 20_240_601 });
    expectOk(report);
    expect(report.delivered).toBe(300);
    expect(report.succeeded + report.failed + report.inReview).toBe(300);
    expect(report.kills.total).toBeGreaterThanOrEqual(24);
    // The chaos did reach every recovery path, not only the easy ones.
    expect(report.reconciledByLookup).toBeGreaterThan(0);
    expect(report.retriedWithSameKey).toBeGreaterThan(0);
    expect(report.inReview).toBeGreaterThan(0);
    expect(report.downstreamActions!.drop).toBeGreaterThan(0);
    expect(report.effects).toBeLessThanOrEqual(300);
  });
});

describe.each(STORE_KINDS)('chaos with follow-ups on %s', (kind) => {
  it('every job enqueued by an idle worker under kills (handed off on PostgreSQL): every effect at most once, every job settled', async (ctx) => {
    const store = await chaosStore(ctx, kind);
    // An agent's pattern: each worker enqueues its next job when it has nothing to do, so on
    // PostgreSQL most of them are leased to it in the enqueue's own commit, and the kills (and
    // the fault points: killed right after that commit, before the marker, ...) land on those.
    const report = await runChaos({
      ...CI_CHAOS,
      jobs: 90,
      followUps: 90,
      kills: { everyMs: 500 },
      chaosMs: 12_000,
      storeUrl: store.url,
      seed: 20_261_204,
    });
    expectOk(report);
    expect(report).toMatchObject({ jobs: 90, delivered: 90, followUps: 90 });
    expect(report.succeeded + report.failed + report.inReview).toBe(90);
    expect(report.kills.total).toBeGreaterThanOrEqual(8);
    if (kind === 'postgres') expect(report.handOffs).toBeGreaterThan(10);
    else expect(report.handOffs).toBe(0);
  });
});

const ROOT = resolve(import.meta.dirname, '..', '..');

function reckonChaos(
  args: string[],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), 'chaos', ...args],
    { cwd: ROOT, env: { ...process.env, RECKON_STORE: 'sqlite:/nonexistent/never-used.db' } },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((res, rej) => {
    child.once('error', rej);
    child.once('close', (code) => res({ code, stdout, stderr }));
  });
}

it('reckon chaos --json: one JSON report on stdout, progress on stderr, exit 0, never RECKON_STORE', async () => {
  const run = await reckonChaos([
    '--jobs',
    '30',
    '--follow-ups',
    '6',
    '--workers',
    '2',
    '--seed',
    '11',
    '--scenario',
    'lookup',
    '--kill-every-ms',
    '400',
    '--json',
  ]);
  expect(run.code, run.stderr).toBe(0);
  const report = JSON.parse(run.stdout) as ChaosReport;
  expect(report).toMatchObject({
    ok: true,
    seed: 11,
    scenario: 'lookup',
    delivered: 30,
    followUps: 6,
    handOffs: 0,
  });
  expect(report.storeUrl).toMatch(/^sqlite:.*reckon-chaos-/);
  expect(run.stderr).toContain('seed 11');
  expect(run.stderr).toMatch(/settled .* \d+\/30/);
});
