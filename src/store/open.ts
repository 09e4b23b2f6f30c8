/**
 * Store URLs: `sqlite:<path>` (or `sqlite::memory:`), `postgres://…` / `postgresql://…`.
 * The PostgreSQL driver is loaded only when a PostgreSQL store is opened.
 */
import { InvalidStoreUrl } from '../core/errors.js';
import { SqliteStore } from './sqlite/store.js';
import type { Store } from './store.js';

export const DEFAULT_STORE_URL = 'sqlite:./reckon.db';

export interface StoreOpenOptions {
  /** PostgreSQL: the schema that holds reckon's tables. Default `reckon` (or `?schema=` in the URL). */
  schema?: string;
  /** SQLite: the store's clock, for tests. */
  clock?: () => number;
  /** PostgreSQL: most connections in the pool. */
  poolMax?: number;
}

export async function createStore(url: string, options: StoreOpenOptions = {}): Promise<Store> {
  if (typeof url !== 'string' || url.trim() === '') throw new InvalidStoreUrl(String(url));
  if (url.startsWith('sqlite:')) {
    let path = url.slice('sqlite:'.length);
    if (path.startsWith('//')) path = path.slice(2);
    if (path === '') throw new InvalidStoreUrl(url);
    return new SqliteStore({ path, ...(options.clock ? { clock: options.clock } : {}) });
  }
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    const { PostgresStore } = await import('./postgres/store.js');
    return new PostgresStore({ connectionString: url, ...options });
  }
  throw new InvalidStoreUrl(url);
}

/** Where a store is, without a password, for messages and logs. */
export function redactStoreUrl(url: string): string {
  return url.replace(/(\/\/[^:/@]+):[^@/]*@/, '$1:***@');
}
