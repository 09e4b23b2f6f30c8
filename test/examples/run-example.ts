/**
 * Runs an example as a user would (`node examples/<name>/run.js`, on the build) and hands back
 * what it printed and how it exited: the example's own verdict is the business outcome.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { openQueue } from '../../src/index.js';
import { pgUnavailableReason, tempPgStore, type StoreKind } from '../helpers/stores.js';

export const ROOT = resolve(import.meta.dirname, '..', '..');

export interface ExampleRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function runExample(
  name: string,
  env: Record<string, string> = {},
  args: string[] = [],
): Promise<ExampleRun> {
  if (!existsSync(join(ROOT, 'dist', 'cli', 'main.js')))
    throw new Error('the examples run on the build: run `npm run build` (npm test does)');
  const child = spawn(process.execPath, [join(ROOT, 'examples', name, 'run.js'), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((res, rej) => {
    child.once('error', rej);
    child.once('close', (code, signal) => res({ code, signal, stdout, stderr }));
  });
}

/** The checks the example printed that did not hold. */
export function failedChecks(out: string): string[] {
  return out
    .split('\n')
    .filter((l) => l.trimStart().startsWith('FAIL '))
    .map((l) => l.trim());
}

/** Why PostgreSQL is not there (the examples' PostgreSQL runs skip), or null; throws in CI. */
export const pgReason = await pgUnavailableReason();

/**
 * Runs `fn` with the environment that points an example at a store of its own: the example's
 * temporary SQLite file, or a PostgreSQL database made for it (`RECKON_EXAMPLE_STORE`), checked
 * to hold the example's jobs afterwards (so a run that ignored it fails), and dropped after.
 */
export async function exampleStore<T>(
  kind: StoreKind,
  fn: (env: Record<string, string>) => Promise<T>,
): Promise<T> {
  if (kind === 'sqlite') return fn({});
  const store = await tempPgStore();
  try {
    const out = await fn({ RECKON_EXAMPLE_STORE: store.url });
    const q = await openQueue({ store: store.url });
    const jobs = await q.jobs({ limit: 1 }).finally(() => q.close());
    if (jobs.length === 0) throw new Error(`the example wrote no job to ${store.url}`);
    return out;
  } finally {
    await store.drop();
  }
}
