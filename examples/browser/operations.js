/**
 * A browser step of an agent run: place an order by filling and submitting the shop's form in
 * Chromium (playwright-core drives the system's Chromium; it never downloads a browser).
 *
 * The click is the side effect, so it is the only thing inside `ctx.dispatch`: the page is
 * opened and the form filled before it (a crash there sends nothing), and the request key goes
 * into the form's hidden `request_key` field so the shop stores it with the order. After a
 * crash with the click possibly made, `lookup` reads the shop's orders page for that key
 * before anything could click again: found, the order is the result and nobody clicks twice.
 *
 * Settings from the environment, read when the operation runs: SHOP_URL (required),
 * CHROMIUM_PATH (default /usr/bin/chromium), SHOP_TIMEOUT_MS and SHOP_GRACE_MS (the wait
 * before a lookup; the example shortens them).
 */
import process from 'node:process';
import { chromium } from 'playwright-core';
import { defineOperation } from 'reckon';
import { CHROMIUM_ARGS } from '../shared/chromium.js';

export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

const shop = () => {
  if (!process.env.SHOP_URL) throw new Error('set SHOP_URL (see startShop)');
  return process.env.SHOP_URL;
};

/** Runs `use` with a fresh browser page; the browser closes when it settles or `signal` aborts. */
async function withPage(signal, use) {
  const browser = await chromium.launch({
    executablePath: CHROMIUM_PATH,
    args: [...CHROMIUM_ARGS],
    headless: true,
  });
  const close = () => void browser.close().catch(() => undefined);
  signal.addEventListener('abort', close, { once: true });
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(20_000);
    return await use(page);
  } finally {
    signal.removeEventListener('abort', close);
    await browser.close().catch(() => undefined);
  }
}

export const placeOrder = defineOperation({
  name: 'shop.place-order',
  description: 'Place one order in the shop through its web form. Returns the order id.',
  fingerprint: (input) => ({ item: input.item, quantity: input.quantity }),
  timeoutMs: Number(process.env.SHOP_TIMEOUT_MS ?? 60_000),
  reconcile: { graceMs: Number(process.env.SHOP_GRACE_MS ?? 5_000), lookupBackoffMs: 500 },
  retry: { maxAttempts: 3, backoff: { initialMs: 200, factor: 2, maxMs: 2_000 } },

  async lookup(requestKey, _input, ctx) {
    return withPage(ctx.signal, async (page) => {
      const res = await page.goto(`${shop()}/orders`);
      if (!res?.ok()) throw new Error(`orders page answered HTTP ${res?.status()}`); // inconclusive
      const ids = await page.$$eval(
        'tr[data-request-key]',
        (rows, key) =>
          rows
            .filter((r) => r.getAttribute('data-request-key') === key)
            .map((r) => r.getAttribute('data-order-id')),
        requestKey,
      );
      if (ids.length === 0) return { found: false };
      return {
        found: true,
        outcome: 'succeeded',
        result: { orderId: Number(ids[0]), foundBy: 'lookup' },
      };
    });
  },

  async execute(input, ctx) {
    return withPage(ctx.signal, async (page) => {
      // Before the dispatch: opening the page and filling the form change nothing in the shop.
      await page.goto(`${shop()}/`);
      await page.fill('input[name=item]', input.item);
      await page.fill('input[name=quantity]', String(input.quantity));
      await page
        .locator('input[name=request_key]')
        .evaluate((el, key) => /** @type {HTMLInputElement} */ (el.value = key), ctx.requestKey);
      // The click is the side effect: it runs only after the dispatch marker is durable.
      return ctx.dispatch(async () => {
        await Promise.all([page.waitForURL(/\/orders\/\d+$/), page.click('button[type=submit]')]);
        return { orderId: Number(await page.textContent('#order-id')) };
      });
    });
  },
});
