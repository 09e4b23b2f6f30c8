/**
 * Charging a card through a payment API that honours `Idempotency-Key` (./api.js). Two ways to
 * recover a charge whose answer was lost, one operation each:
 *
 *  - `payments.charge` asks the API (`GET /charges?key=`) what happened to the request key:
 *    found, the charge is the result; not found, the charge never arrived and may be retried;
 *  - `payments.charge-by-key` has no lookup (use it when the provider's lookup is down or does
 *    not exist): it declares `idempotentWithKey: true`, so reckon resends the request with the
 *    SAME key, and the API answers with the charge it already made instead of charging again.
 *
 * A card decline (HTTP 402) is a `DefiniteFailure`: the provider said no, nothing to retry.
 * Where the API is comes from PAYMENTS_URL, read when the operation runs; PAYMENTS_TIMEOUT_MS
 * and PAYMENTS_GRACE_MS shorten the wait before a lookup (the example and its test).
 */
/* global fetch */
import process from 'node:process';
import { DefiniteFailure, defineOperation } from 'reckon';

const api = () => {
  if (!process.env.PAYMENTS_URL) throw new Error('set PAYMENTS_URL (see startPaymentsApi)');
  return process.env.PAYMENTS_URL;
};

/** @param {{ name: string; lookup: boolean }} p */
function chargeOperation({ name, lookup }) {
  return defineOperation({
    name,
    description: 'Charge a card once. Returns the charge.',
    // What identifies the request: the same key with another amount is a conflict, not a charge.
    fingerprint: (input) => ({
      customer: input.customer,
      amountCents: input.amountCents,
      card: input.card,
    }),
    idempotentWithKey: true,
    timeoutMs: Number(process.env.PAYMENTS_TIMEOUT_MS ?? 10_000),
    reconcile: { graceMs: Number(process.env.PAYMENTS_GRACE_MS ?? 2_000), lookupBackoffMs: 200 },
    retry: { maxAttempts: 3, backoff: { initialMs: 100, factor: 2, maxMs: 1_000 } },
    ...(lookup
      ? {
          async lookup(requestKey, _input, ctx) {
            const res = await fetch(`${api()}/charges?key=${encodeURIComponent(requestKey)}`, {
              signal: ctx.signal,
            });
            if (res.status === 404) return { found: false };
            const charge = await res.json();
            if (res.status === 402) return { found: true, outcome: 'failed', error: charge };
            if (!res.ok) throw new Error(`lookup answered HTTP ${res.status}`); // inconclusive
            return { found: true, outcome: 'succeeded', result: charge };
          },
        }
      : {}),
    async execute(input, ctx) {
      const body = JSON.stringify({
        customer: input.customer,
        amountCents: input.amountCents,
        card: input.card,
      });
      return ctx.dispatch(async () => {
        const res = await fetch(`${api()}/charges`, {
          method: 'POST',
          body,
          headers: { 'content-type': 'application/json', 'idempotency-key': ctx.requestKey },
          signal: ctx.signal,
        });
        const answer = await res.json();
        if (res.status === 402)
          throw new DefiniteFailure('card declined', { retryable: false, details: answer });
        // The API refused the request without acting on it: definite, and no retry can help.
        if (res.status === 422)
          throw new DefiniteFailure('key reused for another request', { details: answer });
        if (!res.ok) throw new Error(`HTTP ${res.status}: ${JSON.stringify(answer)}`); // UNKNOWN
        return answer;
      });
    },
  });
}

export const charge = chargeOperation({ name: 'payments.charge', lookup: true });
export const chargeByKey = chargeOperation({ name: 'payments.charge-by-key', lookup: false });
