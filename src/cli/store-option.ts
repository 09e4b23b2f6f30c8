/**
 * `--store <url>` (or RECKON_STORE, default sqlite:./reckon.db) and opening the queue on it.
 *
 * Only `init` creates a store: every other command refuses a SQLite file that does not exist,
 * so that a typo in the path does not start a worker on an empty journal of its own.
 */
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Option, type Command } from 'commander';
import { ReckonError, StoreUnavailable } from '../core/errors.js';
import type { Logger } from '../core/operation.js';
import type { AnyOperation } from '../core/operation.js';
import { openQueue } from '../index.js';
import type { RuntimeObserver } from '../runtime/observer.js';
import type { Queue } from '../runtime/queue.js';
import { DEFAULT_STORE_URL, redactStoreUrl } from '../store/open.js';

export interface StoreFlags {
  store: string;
}

export class StoreNotFound extends ReckonError {
  constructor(url: string) {
    super(
      'STORE_NOT_FOUND',
      `no store at ${url}; create it with \`reckon init --store ${url}\`, or point --store (or RECKON_STORE) at an existing one`,
    );
  }
}

export function addStoreOption(cmd: Command): Command {
  return cmd.addOption(
    new Option('--store <url>', 'the journal: sqlite:<file> or postgres://user@host/db')
      .env('RECKON_STORE')
      .default(DEFAULT_STORE_URL),
  );
}

export function addJsonOption(
  cmd: Command,
  what = 'print JSON on stdout instead of tables',
): Command {
  return cmd.option('--json', what);
}

/** The file behind a `sqlite:` URL, or null for `:memory:` and other stores. */
export function sqlitePath(url: string): string | null {
  if (!url.startsWith('sqlite:')) return null;
  let path = url.slice('sqlite:'.length);
  if (path.startsWith('//')) path = path.slice(2);
  return path === '' || path === ':memory:' ? null : path;
}

/** Where the store is, for people: an absolute SQLite path, a URL without its password. */
export function storeLabel(url: string): string {
  const path = sqlitePath(url);
  return path === null ? redactStoreUrl(url) : `sqlite:${resolve(path)}`;
}

export interface OpenOptions {
  /** Refuse a SQLite store that does not exist yet (all commands but `init`). */
  mustExist: boolean;
  operations?: AnyOperation[];
  logger?: Logger;
  observer?: RuntimeObserver;
}

export async function openCliQueue(url: string, options: OpenOptions): Promise<Queue> {
  const path = sqlitePath(url);
  if (options.mustExist && path !== null && !existsSync(path))
    throw new StoreNotFound(redactStoreUrl(url));
  // better-sqlite3 reports a missing directory as a bare TypeError; say it plainly instead.
  if (path !== null && !existsSync(dirname(resolve(path))))
    throw new StoreUnavailable(
      `cannot create ${url}: the directory ${dirname(resolve(path))} does not exist`,
    );
  return openQueue({
    store: url,
    actor: 'cli',
    ...(options.operations ? { operations: options.operations } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.observer ? { observer: options.observer } : {}),
  });
}

/** Opens the queue, runs `fn`, and closes the queue whatever happens. */
export async function withQueue<T>(
  url: string,
  options: OpenOptions,
  fn: (q: Queue) => Promise<T>,
): Promise<T> {
  const q = await openCliQueue(url, options);
  try {
    return await fn(q);
  } finally {
    await q.close();
  }
}
