/**
 * YOUR operations, as every worker process of the chaos run loads them: a module that exports
 * what defineOperation made. Settings come from the environment (`workerEnv` in runChaos),
 * read when the operation runs.
 */
/* global fetch */
import process from 'node:process';
import { defineOperation } from 'reckon';

const service = () => process.env.PAYMENTS_URL;

export const charge = defineOperation({
  name: 'example.charge',
  fingerprint: (input) => ({ customer: input.customer, amountCents: input.amountCents }),
  // The service answers by key, so an UNKNOWN charge is settled by asking, never by charging again.
  async lookup(requestKey, _input, ctx) {
    const res = await fetch(`${service()}/charges/${encodeURIComponent(requestKey)}`, {
      signal: ctx.signal,
    });
    if (res.status === 404) return { found: false };
    if (!res.ok) throw new Error(`lookup answered HTTP ${res.status}`);
    return { found: true, outcome: 'succeeded', result: await res.json() };
  },
  execute: (input, ctx) =>
    ctx.dispatch(async () => {
      const res = await fetch(`${service()}/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': ctx.requestKey },
        body: JSON.stringify({ key: ctx.requestKey, ...input }),
        signal: ctx.signal,
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`); // not definitive: UNKNOWN
      return res.json();
    }),
  timeoutMs: 1_000,
  reconcile: { graceMs: 300 },
  retry: { maxAttempts: 6, backoff: { initialMs: 50, factor: 2, maxMs: 500 } },
});
