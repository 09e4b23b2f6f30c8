/**
 * The migrations `init` would apply to a PostgreSQL schema, read without changing anything.
 */
import pg from 'pg';
import { pendingOf, type PendingMigrations } from '../pending.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from './schema.js';

export async function pgPendingMigrations(p: {
  connectionString: string;
  schema: string;
  location: string;
}): Promise<PendingMigrations> {
  const client = new pg.Client({ connectionString: p.connectionString });
  await client.connect();
  try {
    const t = await client.query<{ exists: boolean }>(
      `SELECT to_regclass(format('%I.reckon_migrations', $1::text)) IS NOT NULL AS exists`,
      [p.schema],
    );
    let current = 0;
    const exists = t.rows[0]!.exists;
    if (exists) {
      const v = await client.query<{ v: number | null }>(
        `SELECT max(version) AS v FROM ${pg.escapeIdentifier(p.schema)}.reckon_migrations`,
      );
      current = Number(v.rows[0]?.v ?? 0);
    }
    return pendingOf({
      location: p.location,
      exists,
      current,
      latest: LATEST_SCHEMA_VERSION,
      migrations: MIGRATIONS,
      sqlOf: (m) => `SET search_path TO ${pg.escapeIdentifier(p.schema)};\n${m.sql.trim()}`,
    });
  } finally {
    await client.end();
  }
}
