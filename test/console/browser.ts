/**
 * What the console's browser tests share: Debian's Chromium driven by playwright-core (never a
 * downloaded browser), a reckon app served on loopback over a real store, named tokens, and an
 * axe-core check run in the page.
 *
 * In CI (CI=true) a missing /usr/bin/chromium fails the run; elsewhere the suites skip, saying why.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { createServer, type Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { chromium, type Browser, type Page } from 'playwright-core';
import { CHROMIUM_ARGS } from '../../examples/shared/chromium.js';
import { expect } from 'vitest';
import type { Queue } from '../../src/runtime/queue.js';
import { createReckonApp } from '../../src/server/app.js';
import { newToken, tokenHash } from '../../src/server/auth.js';

export const CHROMIUM = process.env.RECKON_CHROMIUM ?? '/usr/bin/chromium';
const REQUIRED = process.env.CI === 'true';

/** null when Chromium is there; otherwise why the suite skips. Throws in CI. */
export function chromiumMissing(): string | null {
  if (existsSync(CHROMIUM)) return null;
  const why = `no Chromium at ${CHROMIUM} (install Debian's chromium package)`;
  if (REQUIRED) throw new Error(`${why}: required because CI=true`);
  return why;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [...CHROMIUM_ARGS],
  });
}

export interface Served {
  url: string;
  close(): Promise<void>;
}

/** The reckon app over `queue` (reads need a token), on a loopback port of its own. */
export async function serveConsole(queue: Queue): Promise<Served> {
  const app = createReckonApp({ queue, protectReads: true });
  const server: Server = createServer(app.listener);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A named token of `role` in the queue's store; returns the secret to sign in with. */
export async function makeToken(
  queue: Queue,
  name: string,
  role: string,
  operations: string[] | null = null,
): Promise<string> {
  const token = newToken();
  await queue.store.tokenInsert({
    id: randomUUID(),
    name,
    role,
    operations,
    grants: [],
    hash: tokenHash(token),
    createdBy: 'test',
    expiresInMs: null,
  });
  return token;
}

/** Signs in through the sign-in page, as a person would. */
export async function signIn(page: Page, url: string, token: string): Promise<void> {
  await page.goto(`${url}/login`);
  await page.getByLabel('Token').fill(token);
  await Promise.all([
    page.waitForURL((u) => !u.pathname.endsWith('/login')),
    page.getByRole('button', { name: 'Sign in' }).click(),
  ]);
}

const require = createRequire(import.meta.url);
const AXE_SOURCE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

/**
 * Runs axe-core in the page (through the DevTools protocol, so the page's CSP stays as served)
 * and fails on any serious or critical violation, naming the rule and the elements.
 */
export async function expectAccessible(page: Page, what: string): Promise<void> {
  await page.evaluate(AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run(): Promise<{ violations: unknown[] }> } })
      .axe;
    const r = await axe.run();
    return r.violations as {
      id: string;
      impact: string | null;
      help: string;
      nodes: { target: unknown }[];
    }[];
  });
  const bad = violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map(
      (v) => `${v.id} (${v.impact}): ${v.help} at ${JSON.stringify(v.nodes.map((n) => n.target))}`,
    );
  expect(bad, `accessibility of ${what}`).toEqual([]);
}
