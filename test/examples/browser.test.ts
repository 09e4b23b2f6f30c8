/**
 * examples/browser: orders placed through a web form in Chromium, the worker SIGKILLed right
 * after the click and, for another step, before it; the verdict is the shop's count of
 * submissions per key. In CI a missing Chromium fails this test; elsewhere it is skipped.
 */
import { existsSync } from 'node:fs';
import { expect, it } from 'vitest';
import { failedChecks, runExample } from './run-example.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const present = existsSync(CHROMIUM);
const required = process.env.CI === 'true' || process.env.CI === '1';

it.skipIf(!present && !required)(
  `one order per step through kills after and before the click (needs Chromium at ${CHROMIUM}${present ? '' : ': not installed, skipped'})`,
  async () => {
    if (!present)
      throw new Error(`CI needs Chromium at ${CHROMIUM} (Debian: apt-get install chromium)`);
    const run = await runExample('browser');
    expect(failedChecks(run.stdout)).toEqual([]);
    expect(run.stdout).toContain('verdict: ok');
    expect(run.code, run.stderr).toBe(0);
  },
  150_000,
);
