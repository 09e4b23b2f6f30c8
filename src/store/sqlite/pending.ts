/**
 * The migrations `init` would apply to a SQLite store, read without changing anything.
 */
import { existsSync } from 'node:fs';
import Database from 'better-sqlite3';
import { pendingOf, type PendingMigrations } from '../pending.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from './schema.js';

export type { PendingMigration, PendingMigrations } from '../pending.js';

export function sqlitePendingMigrations(path: string): PendingMigrations {
  let current = 0;
  const exists = path !== ':memory:' && existsSync(path);
  if (exists) {
    const db = new Database(path, { readonly: true, fileMustExist: true });
    try {
      const table = db
        .prepare(`SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'reckon_migrations'`)
        .get();
      if (table)
        current =
          (
            db.prepare('SELECT max(version) AS v FROM reckon_migrations').get() as {
              v: number | null;
            }
          ).v ?? 0;
    } finally {
      db.close();
    }
  }
  return pendingOf({
    location: `sqlite:${path}`,
    exists,
    current,
    latest: LATEST_SCHEMA_VERSION,
    migrations: MIGRATIONS,
    sqlOf: (m) =>
      [m.sql.trim(), ...(m.rewrites ?? []).map((r) => `-- table ${r.table}: ${r.from} -> ${r.to}`)]
        .filter(Boolean)
        .join('\n'),
  });
}
