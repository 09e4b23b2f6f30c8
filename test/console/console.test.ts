/**
 * The console in a real browser (Debian's Chromium, playwright-core): a person signs in with a
 * token, finds a job by its request key, reads why an UNKNOWN job is UNKNOWN, approves one job
 * and denies another, resolves a review, and watches a state change arrive without reloading.
 * A `<script>` in an input is shown as text; an input changed after it was shown is not approved.
 * A wrong token at sign-in gets the form again; an admin pauses and resumes a queue. Every page
 * passes axe-core (no serious or critical violation) and is photographed into docs/console/.
 * One browser per store; on SQLite and PostgreSQL (the photographs from SQLite).
 */
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineOperation, openQueue, type Queue } from '../../src/index.js';
import type { AnyOperation } from '../../src/core/operation.js';
import pg from 'pg';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type StoreKind,
  type TestStore,
} from '../helpers/stores.js';
import { until } from '../reliability/harness.js';
import {
  chromiumMissing,
  expectAccessible,
  launchChromium,
  makeToken,
  serveConsole,
  signIn,
  type Served,
} from './browser.js';

const missing = chromiumMissing();
// The docs' pictures are written only when asked (RECKON_SCREENSHOTS=1), so that a test run
// leaves the checkout as it found it; otherwise they go to a temporary directory.
const SHOTS =
  process.env.RECKON_SCREENSHOTS === '1'
    ? join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'console')
    : join(tmpdir(), 'reckon-console-shots');

/** A refund that a person must approve first. */
const refund = defineOperation({
  name: 'payments.refund',
  approval: (input: { amountCents: number }) =>
    input.amountCents >= 10_000 ? 'refunds of $100 or more need a person' : true,
  execute: (input: { amountCents: number; note?: string }, ctx) =>
    ctx.dispatch(() => Promise.resolve({ refunded: input.amountCents })),
});

/** A request that always leaves and never answers: UNKNOWN; its lookup waits an hour. */
const ledger = defineOperation({
  name: 'ledger.post',
  timeoutMs: 1_000,
  reconcile: { graceMs: 3_600_000 },
  lookup: () => Promise.resolve({ found: false as const }),
  execute: (_input: { entry: string }, ctx) =>
    ctx.dispatch(() => Promise.reject(new Error('socket hang up'))),
});

/** The same, with no lookup and no deduplicating downstream: a person must review it. */
const mail = defineOperation({
  name: 'mail.send',
  timeoutMs: 1_000,
  reconcile: { graceMs: 0 },
  execute: (_input: { to: string }, ctx) =>
    ctx.dispatch(() => Promise.reject(new Error('connection reset after the request was sent'))),
});

const OPS = [refund, ledger, mail] as AnyOperation[];

const pgMissing = missing === null ? await pgUnavailableReason() : null;

/** Changes a job's input behind the console's back (as another writer of the store could). */
async function setInput(ts: TestStore, id: string, inputJson: string): Promise<void> {
  if (ts.kind === 'sqlite') {
    const db = new Database(ts.url.slice('sqlite:'.length));
    db.prepare('UPDATE jobs SET input_json = ? WHERE id = ?').run(inputJson, id);
    db.close();
    return;
  }
  const c = new pg.Client({ connectionString: ts.url });
  await c.connect();
  try {
    await c.query('UPDATE reckon.jobs SET input_json = $1 WHERE id = $2', [inputJson, id]);
  } finally {
    await c.end();
  }
}

describe
  .skipIf(missing !== null)
  .each(STORE_KINDS.filter((k) => k === 'sqlite' || pgMissing === null))(
  `the console in Chromium${missing ? ` (skipped: ${missing})` : ''} on %s`,
  (kind: StoreKind) => {
    let ts: TestStore;
    let q: Queue;
    let served: Served;
    let browser: Browser;
    let approver: string;
    let reviewer: string;
    const contexts: BrowserContext[] = [];

    async function newPage(token?: string): Promise<Page> {
      const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      contexts.push(context);
      const page = await context.newPage();
      page.on('dialog', (d) => void d.accept());
      if (token) await signIn(page, served.url, token);
      return page;
    }

    async function shot(page: Page, name: string): Promise<void> {
      if (kind !== 'sqlite') return; // the docs' pictures: one store is enough
      mkdirSync(SHOTS, { recursive: true });
      await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
    }

    async function stateOf(id: string): Promise<string> {
      return (await q.job(id))!.job.state;
    }

    beforeAll(async () => {
      ts = await makeTestStore(kind);
      q = await openQueue({ store: ts.url });
      for (const op of OPS) q.register(op);
      served = await serveConsole(q);
      approver = await makeToken(q, 'ada', 'approver');
      reviewer = await makeToken(q, 'grace', 'reviewer');
      browser = await launchChromium();
    });

    afterAll(async () => {
      await Promise.all(contexts.map((c) => c.close()));
      await browser?.close();
      await served?.close();
      await q?.close();
      await ts?.drop();
    });

    it('signs in with a token; the overview passes axe', async () => {
      const page = await newPage();
      await page.goto(`${served.url}/`);
      await expect.poll(() => new URL(page.url()).pathname).toBe('/login');
      await expectAccessible(page, 'the sign-in page');
      await shot(page, 'sign-in');
      // A wrong token: the form again (401), saying so.
      await page.getByLabel('Token').fill('rk_not_a_token');
      const [answer] = await Promise.all([
        page.waitForResponse((r) => r.request().method() === 'POST'),
        page.getByRole('button', { name: 'Sign in' }).click(),
      ]);
      expect(answer.status()).toBe(401);
      expect(await page.textContent('[role=alert]')).toContain('That token was not accepted');
      await expect(page.getByLabel('Token').isVisible()).resolves.toBe(true);
      await signIn(page, served.url, approver);
      await page.goto(`${served.url}/`);
      await expect(page.getByRole('heading', { name: 'Overview' }).isVisible()).resolves.toBe(true);
      expect(await page.textContent('header')).toContain('ada');
    });

    it('finds a job by its request key and reads the evidence of its UNKNOWN', async () => {
      await q.enqueue(refund, { amountCents: 500 }, { key: 'refund-small-1' });
      const unknown = await q.enqueue(ledger, { entry: 'debit 42' }, { key: 'ledger-entry-7' });
      const w = q.worker({ operations: [ledger], concurrency: 1 });
      await w.start();
      await until(
        'the ledger job is UNKNOWN',
        async () => (await stateOf(unknown.id)) === 'UNKNOWN',
      );
      await w.stop();
      const page = await newPage(approver);
      await page.goto(`${served.url}/jobs`);
      await page.getByLabel('Search').fill('ledger-entry-7');
      await page.getByRole('button', { name: 'Apply' }).click();
      await page.waitForURL(/q=ledger-entry-7/);
      await expectAccessible(page, 'the jobs page');
      await shot(page, 'jobs');
      const rows = page.locator('table tr');
      expect(await rows.count()).toBe(2);
      await page.getByRole('link', { name: unknown.id }).click();
      await page.waitForURL(new RegExp(`/jobs/${unknown.id}$`));
      const evidence = page.locator('section', { hasText: 'Why UNKNOWN' });
      const text = await evidence.textContent();
      expect(text).toContain('ledger-entry-7');
      expect(text).toContain('Dispatch marker');
      expect(text).toContain('socket hang up');
      const owner = (await q.job(unknown.id))!.attempts[0]!.ownerId;
      expect(text).toMatch(new RegExp(`Marked UNKNOWN by\\s*${owner}`));
      expect(await page.locator('section', { hasText: 'Lookups' }).textContent()).toContain(
        'Next lookup due',
      );
      await expectAccessible(page, 'a job page');
      await shot(page, 'job-unknown');
    });

    it('approves one job and denies another; a <script> in an input is shown as text', async () => {
      const evil = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">';
      const a = await q.enqueue(
        refund,
        { amountCents: 25_000, note: evil },
        { key: 'refund-big-1' },
      );
      const b = await q.enqueue(refund, { amountCents: 12_000 }, { key: 'refund-big-2' });
      const page = await newPage(approver);
      await page.goto(`${served.url}/approvals`);
      expect(await page.locator('main').textContent()).toContain(evil.replaceAll('"', '\\"'));
      expect(
        await page.evaluate(() => (globalThis as { __pwned?: number }).__pwned),
      ).toBeUndefined();
      expect(await page.locator('main script, main img').count()).toBe(0);
      await expectAccessible(page, 'the approvals page');
      await shot(page, 'approvals');
      await page.getByLabel(`Select job ${a.id}`).check();
      await page.getByLabel('Note for the selected jobs').fill('customer verified');
      await page.getByRole('button', { name: 'Approve selected' }).click();
      await page.waitForURL(/notice=/);
      expect(await page.textContent('.notice')).toContain('Approved 1 job');
      await page.getByLabel(`Select job ${b.id}`).check();
      await page.getByRole('button', { name: 'Deny selected' }).click();
      await page.waitForURL(/notice=Denied/);
      expect(await stateOf(a.id)).toBe('QUEUED');
      expect(await stateOf(b.id)).toBe('CANCELLED');
      const approved = (await q.job(a.id))!.events.find((e) => e.kind === 'approved')!;
      expect(approved.actor).toBe('operator:ada');
      expect(JSON.stringify(approved.detail)).toContain('customer verified');
    });

    it('refuses an approval when the input changed after the page showed it', async () => {
      const job = await q.enqueue(refund, { amountCents: 50_000 }, { key: 'refund-big-3' });
      const page = await newPage(approver);
      await page.goto(`${served.url}/jobs/${job.id}`);
      // Live updates paused, so that no refresh redraws the form with the new input before the
      // click: the decision is the one made on what the page showed.
      await page.getByRole('button', { name: 'Pause live updates' }).click();
      await page.waitForSelector('#live-toggle[aria-pressed="true"]');
      // Behind the console's back: the journal's input is no longer what the page shows.
      await setInput(ts, job.id, '{"amountCents":5000000}');
      await page.getByRole('button', { name: 'Approve' }).click();
      await page.waitForURL(/error=/);
      expect(await page.textContent('[role=alert]')).toContain(
        'not the one this decision was made on',
      );
      expect(await stateOf(job.id)).toBe('AWAITING_APPROVAL');
    });

    it('a reviewer resolves a review, warned that a retry may repeat the effect', async () => {
      const job = await q.enqueue(mail, { to: 'ada@example.com' }, { key: 'mail-welcome-9' });
      const w = q.worker({ operations: [mail], concurrency: 1 });
      await w.start();
      await until(
        'the mail job needs review',
        async () => (await stateOf(job.id)) === 'NEEDS_REVIEW',
        30_000,
      );
      await w.stop();
      const page = await newPage(reviewer);
      await page.goto(`${served.url}/review`);
      const card = page.locator('article', { hasText: 'mail-welcome-9' });
      expect(await card.textContent()).toContain('Retrying may repeat the effect');
      expect(await card.textContent()).toContain('mail-welcome-9');
      await expectAccessible(page, 'the review page');
      await shot(page, 'review');
      await card.getByLabel('Note').fill('the mail provider shows it delivered');
      await card.getByRole('button', { name: 'Resolve: it succeeded' }).click();
      await page.waitForURL(/notice=/);
      expect(await stateOf(job.id)).toBe('SUCCEEDED');
      const resolved = (await q.job(job.id))!.events.find((e) => e.kind === 'resolved')!;
      expect(resolved.actor).toBe('operator:grace');
      // A reviewer sees no approval buttons (the server would refuse them too).
      await page.goto(`${served.url}/approvals`);
      expect(await page.getByRole('button', { name: /Approve/ }).count()).toBe(0);
    });

    it('shows a state change live, without a reload; the overview passes axe', async () => {
      const job = await q.enqueue(refund, { amountCents: 20_000 }, { key: 'refund-big-live' });
      const page = await newPage(approver);
      await page.goto(`${served.url}/jobs/${job.id}`);
      await page.evaluate(() => ((globalThis as { __same?: boolean }).__same = true));
      await page.waitForSelector('html[data-live-open]', { state: 'attached' });
      await q.cancel(job.id, { actor: 'test', reason: 'changed my mind' });
      await page.waitForFunction(
        () =>
          (
            globalThis as unknown as {
              document: { querySelector(s: string): { textContent: string | null } | null };
            }
          ).document.querySelector('#live .state')?.textContent === 'CANCELLED',
        undefined,
        { timeout: 20_000 },
      );
      expect(await page.evaluate(() => (globalThis as { __same?: boolean }).__same)).toBe(true);
      await page.goto(`${served.url}/`);
      await expectAccessible(page, 'the overview');
      await shot(page, 'overview');
      // The dark theme (prefers-color-scheme) passes too.
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.goto(`${served.url}/jobs/${job.id}`);
      await expectAccessible(page, 'a job page in the dark theme');
      await shot(page, 'job-dark');
    });

    it('an admin pauses and resumes a queue from the overview; the pause names the admin', async () => {
      const admin = await makeToken(q, 'olga', 'admin');
      const page = await newPage(admin);
      await page.goto(`${served.url}/`);
      await page.getByRole('button', { name: 'Pause default' }).click();
      await page.waitForURL(/notice=/);
      expect(await page.textContent('.notice')).toContain('Queue default paused');
      const row = page.locator('tr', { has: page.getByRole('link', { name: 'default' }) });
      expect(await row.textContent()).toContain('paused by operator:olga');
      expect((await q.queues.paused()).map((p) => [p.name, p.actor])).toEqual([
        ['default', 'operator:olga'],
      ]);
      await page.getByRole('button', { name: 'Resume default' }).click();
      await page.waitForURL(/notice=Queue\+default\+resumed|notice=Queue%20default%20resumed/);
      expect(await q.queues.paused()).toEqual([]);
    });
  },
);
