/**
 * examples/payments: cards charged through an Idempotency-Key API with the worker SIGKILLed after
 * the charge; the verdict is the API's ledger (charges and requests per key). On both stores.
 */
import { describe, expect, it } from 'vitest';
import { STORE_KINDS } from '../helpers/stores.js';
import { exampleStore, failedChecks, pgReason, runExample } from './run-example.js';

describe.each(STORE_KINDS)('examples/payments on %s', (kind) => {
  it.skipIf(kind === 'postgres' && pgReason !== null)(
    'each card is charged exactly once: by lookup, by same-key retry, a decline not retried',
    async () => {
      const run = await exampleStore(kind, (env) => runExample('payments', env));
      expect(failedChecks(run.stdout)).toEqual([]);
      expect(run.stdout).toContain('verdict: ok');
      expect(run.code, run.stderr).toBe(0);
    },
    90_000,
  );
});

it('and its verdict catches a build whose retry sends a fresh request key', async () => {
  const run = await runExample('payments', {
    NODE_ENV: 'test',
    RECKON_UNSAFE_DISABLE_SAFEGUARD: 'new-key-on-retry',
  });
  expect(failedChecks(run.stdout)).toEqual([
    'FAIL order-1002 resent with the same key (2 requests, 2 attempts)',
    'FAIL two charges in all, under no other key',
  ]);
  expect(run.code).toBe(1);
}, 90_000);
