/**
 * A browser step, killed at the worst moments. Two steps of one agent run place orders in a
 * shop through its web form (Chromium driven by playwright-core), each on a real worker process
 * that is SIGKILLed:
 *
 *   order-coffee: right after the click, before its outcome was written. The order exists and
 *     nobody knows: recovery reads the orders page for the request key, finds the order, and
 *     never clicks again.
 *   order-tea: with the form filled, before the click (before its dispatch marker). Nothing was
 *     sent: recovery opens the form again and places the order, once.
 *
 * The verdict is the shop's own count of submissions per key: exactly one each.
 *
 *   npm run build && node examples/browser/run.js
 */
/* global console */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { URL, fileURLToPath } from 'node:url';
import { openQueue } from 'reckon';
import { diedOfSigkill, startWorker, verdict } from '../shared/processes.js';
import { startShop } from './shop.js';

// Short waits before a lookup, set before the operations load: a job records its operation's
// timeoutMs and grace when it is enqueued, and every worker honours what the job recorded.
const env = { SHOP_TIMEOUT_MS: '15000', SHOP_GRACE_MS: '300' };
Object.assign(process.env, env);
const { CHROMIUM_PATH, placeOrder } = await import('./operations.js');

if (!existsSync(CHROMIUM_PATH)) {
  console.error(
    `no Chromium at ${CHROMIUM_PATH}: install it (Debian: apt-get install chromium) or set CHROMIUM_PATH`,
  );
  process.exit(1);
}

const OPERATIONS = fileURLToPath(new URL('./operations.js', import.meta.url));
const shop = await startShop();
Object.assign(env, { SHOP_URL: shop.url });
Object.assign(process.env, env);
const dir = mkdtempSync(join(tmpdir(), 'reckon-browser-'));
const store = `sqlite:${join(dir, 'reckon.db')}`;
const q = await openQueue({ store, operations: [placeOrder] });
const RUN = 'run-7';
// A lease long enough for Chromium to start on a busy machine; heartbeats renew it.
const LEASE = ['--lease-ms', '3000'];

try {
  // One queue per scenario, so that each doomed worker takes its own step.
  const coffee = await q.enqueue(
    placeOrder,
    { item: 'coffee beans', quantity: 2 },
    { runId: RUN, stepId: 'order-coffee', queue: 'after-click' },
  );
  const tea = await q.enqueue(
    placeOrder,
    { item: 'green tea', quantity: 1 },
    { runId: RUN, stepId: 'order-tea', queue: 'before-click' },
  );
  const afterClick = startWorker({
    store,
    operations: OPERATIONS,
    env,
    faults: 'after-response-before-commit=kill',
    args: [...LEASE, '--queue', 'after-click'],
  });
  // `lease-expired-while-alive` is inside ctx.dispatch, before the marker is written.
  const beforeClick = startWorker({
    store,
    operations: OPERATIONS,
    env,
    faults: 'lease-expired-while-alive=kill',
    args: [...LEASE, '--queue', 'before-click'],
  });
  await Promise.all([diedOfSigkill(afterClick, 90_000), diedOfSigkill(beforeClick, 90_000)]);
  const atKill = {
    coffee: shop.submissionsOf(coffee.requestKey),
    tea: shop.submissionsOf(tea.requestKey),
  };
  console.log(
    `both workers SIGKILLed; orders placed so far: coffee ${atKill.coffee}, tea ${atKill.tea}`,
  );

  const fresh = startWorker({
    store,
    operations: OPERATIONS,
    env,
    args: [...LEASE, '--queue', 'after-click,before-click'],
  });
  let outs;
  try {
    outs = await Promise.all([
      q.waitFor(coffee.id, { timeoutMs: 90_000 }),
      q.waitFor(tea.id, { timeoutMs: 90_000 }),
    ]);
  } finally {
    await fresh.stop();
  }
  const [coffeeOut, teaOut] = outs;
  const teaAttempts = (await q.job(tea.id)).attempts;
  const steps = await q.jobs({ runId: RUN });
  console.log('order-coffee:', coffeeOut.state, coffeeOut.result);
  console.log('order-tea:', teaOut.state, teaOut.result);
  console.log('orders in the shop:', shop.orders());

  verdict('browser: one click per step, through two kills', [
    ['order-coffee: the click had landed when the worker died', atKill.coffee === 1],
    ['order-coffee SUCCEEDED, found by the lookup', coffeeOut.result?.foundBy === 'lookup'],
    ['order-coffee: submitted exactly once', shop.submissionsOf(coffee.requestKey) === 1],
    ['order-tea: nothing was submitted when the worker died', atKill.tea === 0],
    [
      'order-tea: attempt 1 FAILED_BEFORE_SEND, attempt 2 SUCCEEDED',
      teaAttempts.map((a) => a.state).join() === 'FAILED_BEFORE_SEND,SUCCEEDED',
    ],
    ['order-tea: submitted exactly once', shop.submissionsOf(tea.requestKey) === 1],
    ['two orders in all', shop.orders().length === 2],
    ['the run lists both steps', steps.length === 2],
  ]);
} finally {
  await q.close();
  await shop.close();
  rmSync(dir, { recursive: true, force: true });
}
