/**
 * The migrations `init` would apply, as both stores' pending.ts report them: read without changing
 * anything; a store newer than this build throws `SchemaTooNew`.
 */
import { SchemaTooNew } from '../core/errors.js';

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

/** The report for a store at `current` (0: no migrations table), given its migrations. */
export function pendingOf<M extends { version: number; name: string }>(p: {
  location: string;
  exists: boolean;
  current: number;
  latest: number;
  migrations: readonly M[];
  /** What a migration runs, as shown to the user. */
  sqlOf: (m: M) => string;
}): PendingMigrations {
  if (p.current > p.latest) throw new SchemaTooNew(p.location, p.current, p.latest);
  return {
    exists: p.exists,
    current: p.current,
    latest: p.latest,
    pending: p.migrations
      .filter((m) => m.version > p.current)
      .map((m) => ({ version: m.version, name: m.name, sql: p.sqlOf(m) })),
  };
}
