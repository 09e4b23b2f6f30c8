/**
 * The example of docs/chaos.md runs: a chaos run against the user's own operations module and
 * downstream, judged by the user's ledger. It imports `reckon` and `reckon/testkit` as a user
 * would, so it runs on the build (`npm test` builds first).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { beforeAll, expect, it } from 'vitest';
import type { ChaosReport } from '../../src/testkit/chaos.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const EXAMPLE = join(ROOT, 'examples', 'chaos', 'run.js');

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist', 'testkit', 'chaos.js')))
    throw new Error('the example runs on the build: run `npm run build` (npm test does)');
});

function runExample(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; report: ChaosReport; stderr: string }> {
  const child = spawn(process.execPath, [EXAMPLE, ...args, '--json'], {
    cwd: ROOT,
    env: { ...process.env, ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((res, rej) => {
    child.once('error', rej);
    child.once('close', (code) => {
      try {
        res({ code, report: JSON.parse(stdout) as ChaosReport, stderr });
      } catch {
        rej(new Error(`no JSON report (exit ${code}):\n${stdout}\n${stderr}`));
      }
    });
  });
}

it('your own operations, downstream and ledger: every charge at most once, nothing lost', async () => {
  const { code, report, stderr } = await runExample(['80', '5']);
  expect(report.violations).toEqual([]);
  expect(code, stderr).toBe(0);
  expect(report).toMatchObject({ ok: true, scenario: 'custom', delivered: 80, effects: null });
  expect(report.succeeded + report.inReview + report.failed).toBe(80);
  expect(report.kills.total).toBeGreaterThan(0);
  // Answers lost after the charge were settled by asking the service.
  expect(report.reconciledByLookup).toBeGreaterThan(0);
});

it('and your ledger catches a broken build: UNKNOWN retried blindly charges twice', async () => {
  const { code, report } = await runExample(['80', '5'], {
    NODE_ENV: 'test',
    RECKON_UNSAFE_DISABLE_SAFEGUARD: 'unknown-retry',
  });
  expect(code).toBe(2);
  expect(report.ok).toBe(false);
  expect(report.duplicates).toBeGreaterThan(0);
  expect(report.violations.find((v) => v.kind === 'duplicate')?.requestKey).toMatch(
    /^order-.*:charge$/,
  );
});
