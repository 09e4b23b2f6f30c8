/**
 * Charging cards through a payment API with Idempotency-Key semantics, with the worker killed
 * (SIGKILL) after the charge and before its outcome was written: the worst case, the card
 * was charged and nobody knows. Four charges, each judged at the API by its ledger:
 *
 *   1. answer lost, recovered by lookup: one charge, one request (never resent);
 *   2. answer lost while the API's lookup is down, recovered by a same-key retry: one charge,
 *      two requests under one key (the API replays the first answer);
 *   3. a declined card: FAILED at once, one request, no retry;
 *   4. the same key with another amount: refused by reckon before anything is sent, and by
 *      the API too (422) if a client sent it anyway.
 *
 *   npm run build && node examples/payments/run.js
 */
/* global console, fetch */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { URL, fileURLToPath } from 'node:url';
import { openQueue, RequestKeyConflict } from 'reckon';
import { diedOfSigkill, startWorker, verdict } from '../shared/processes.js';
import { DECLINED_CARD, startPaymentsApi } from './api.js';

// Short waits before a lookup, set before the operations load: a job records its operation's
// timeoutMs and grace when it is enqueued, and every worker honours what the job recorded.
const env = { PAYMENTS_TIMEOUT_MS: '2000', PAYMENTS_GRACE_MS: '200' };
Object.assign(process.env, env);
const { charge, chargeByKey } = await import('./operations.js');

const OPERATIONS = fileURLToPath(new URL('./operations.js', import.meta.url));
const CARD = '4242424242424242';

const api = await startPaymentsApi();
Object.assign(env, { PAYMENTS_URL: api.url });
Object.assign(process.env, env);
const dir = mkdtempSync(join(tmpdir(), 'reckon-payments-'));
// RECKON_EXAMPLE_STORE names another store to run on, e.g. an empty PostgreSQL database.
const store = process.env.RECKON_EXAMPLE_STORE ?? `sqlite:${join(dir, 'reckon.db')}`;
const q = await openQueue({ store, operations: [charge, chargeByKey] });

/** Runs one job on a worker that dies after the charge, then on a fresh one; the outcome. */
async function chargeThroughACrash(op, input, key) {
  const job = await q.enqueue(op, input, { key });
  const doomed = startWorker({
    store,
    operations: OPERATIONS,
    env,
    faults: 'after-response-before-commit=kill',
  });
  await diedOfSigkill(doomed);
  console.log(`${key}: the worker was SIGKILLed after the API answered`);
  const fresh = startWorker({ store, operations: OPERATIONS, env });
  try {
    const out = await q.waitFor(job.id, { timeoutMs: 30_000 });
    const { attempts, events } = await q.job(job.id);
    return { out, attempts, events };
  } finally {
    await fresh.stop();
  }
}

try {
  const byLookup = await chargeThroughACrash(
    charge,
    { customer: 'cus_1', amountCents: 1999, card: CARD },
    'order-1001:charge',
  );
  console.log('order-1001:charge:', byLookup.out.state, byLookup.out.result);

  api.lookupDown(true);
  const byKey = await chargeThroughACrash(
    chargeByKey,
    { customer: 'cus_2', amountCents: 4900, card: CARD },
    'order-1002:charge',
  );
  api.lookupDown(false);
  console.log('order-1002:charge:', byKey.out.state, byKey.out.result);

  const worker = startWorker({ store, operations: OPERATIONS, env });
  const declined = await q.call(
    charge,
    { customer: 'cus_3', amountCents: 500, card: DECLINED_CARD },
    { key: 'order-1003:charge', timeoutMs: 30_000 },
  );
  await worker.stop();
  console.log('order-1003:charge:', declined.state, declined.error?.message);

  // Counted before the direct request below, which reuses order-1001's key on purpose.
  const sent1001 = api.requestsOf('order-1001:charge');
  let conflict = null;
  try {
    await q.enqueue(
      charge,
      { customer: 'cus_1', amountCents: 2999, card: CARD },
      { key: 'order-1001:charge' },
    );
  } catch (err) {
    conflict = err;
  }
  const direct = await fetch(`${api.url}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': 'order-1001:charge' },
    body: JSON.stringify({ customer: 'cus_1', amountCents: 2999, card: CARD }),
  });

  verdict('payments: each card charged exactly once', [
    ['order-1001 SUCCEEDED after the crash', byLookup.out.state === 'SUCCEEDED'],
    ['order-1001 charged once', api.chargesOf('order-1001:charge') === 1],
    ['order-1001 sent once: the lookup found the charge', sent1001 === 1],
    ['order-1001 settled by a lookup', byLookup.attempts[0]?.resolutionSource === 'lookup'],
    ['order-1002 SUCCEEDED after the crash', byKey.out.state === 'SUCCEEDED'],
    ['order-1002 charged once', api.chargesOf('order-1002:charge') === 1],
    [
      'order-1002 resent with the same key (2 requests, 2 attempts)',
      api.requestsOf('order-1002:charge') === 2 && byKey.attempts.length === 2,
    ],
    ['order-1003 declined: FAILED', declined.state === 'FAILED'],
    [
      'order-1003 sent once, never retried',
      api.requestsOf('order-1003:charge') === 1 && api.chargesOf('order-1003:charge') === 0,
    ],
    ['two charges in all, under no other key', api.totalCharges() === 2],
    ['another amount under a used key: refused by reckon', conflict instanceof RequestKeyConflict],
    ['... and by the API (422)', direct.status === 422],
  ]);
} finally {
  await q.close();
  await api.close();
  rmSync(dir, { recursive: true, force: true });
}
