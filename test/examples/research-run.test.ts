/**
 * examples/research-run: three dependent steps of one agent run; the worker and the agent are
 * SIGKILLed mid-run and the run replayed; each service must have received each step once.
 */
import { expect, it } from 'vitest';
import { failedChecks, runExample } from './run-example.js';

it('a crash mid-run resumes at the right step and repeats none of the finished ones', async () => {
  const run = await runExample('research-run');
  expect(failedChecks(run.stdout)).toEqual([]);
  expect(run.stdout).toContain('verdict: ok');
  expect(run.stdout).toContain('research.draft');
  expect(run.code, run.stderr).toBe(0);
}, 90_000);
