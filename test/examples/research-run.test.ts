/**
 * examples/research-run: three dependent steps of one agent run; the worker and the agent are
 * SIGKILLed mid-run and the run replayed; each service must have received each step once.
 * On both stores.
 */
import { describe, expect, it } from 'vitest';
import { STORE_KINDS } from '../helpers/stores.js';
import { exampleStore, failedChecks, pgReason, runExample } from './run-example.js';

describe.each(STORE_KINDS)('examples/research-run on %s', (kind) => {
  it.skipIf(kind === 'postgres' && pgReason !== null)(
    'a crash mid-run resumes at the right step and repeats none of the finished ones',
    async () => {
      const run = await exampleStore(kind, (env) => runExample('research-run', env));
      expect(failedChecks(run.stdout)).toEqual([]);
      expect(run.stdout).toContain('verdict: ok');
      expect(run.stdout).toContain('research.draft');
      expect(run.code, run.stderr).toBe(0);
    },
    90_000,
  );
});
