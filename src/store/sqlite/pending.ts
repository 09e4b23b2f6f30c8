/**
 * The migrations `init` would apply to a SQLite store, read without changing anything.
 */
import { existsSync } from 'node:fs';
import Database from 'better-sqlite3';
import { SchemaTooNew } from '../../core/errors.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from './schema.js';

export interface PendingMigration {
  version: number;
  name: string;
  /** What it runs (SQLite: the SQL, and the CHECK constraints it rewrites). */
  sql: string;
}

export interface PendingMigrations {
  exists: boolean;
  current: number;
  latest: number;
  pending: PendingMigration[];
}

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
  if (current > LATEST_SCHEMA_VERSION)
    throw new SchemaTooNew(`sqlite:${path}`, current, LATEST_SCHEMA_VERSION);
  return {
    exists,
    current,
    latest: LATEST_SCHEMA_VERSION,
    pending: MIGRATIONS.filter((m) => m.version > current).map((m) => ({
      version: m.version,
      name: m.name,
      sql: [
        m.sql.trim(),
        ...(m.rewrites ?? []).map((r) => `-- table ${r.table}: ${r.from} -> ${r.to}`),
      ]
        .filter(Boolean)
        .join('\n'),
    })),
  };
}
