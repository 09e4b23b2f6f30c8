/**
 * Where tests get their stores. Every test gets a store of its own: a temp SQLite file, or a
 * PostgreSQL database created for it and dropped after.
 *
 * PostgreSQL suites are required in CI (CI=true) or with RECKON_REQUIRE_PG=1: there a missing
 * server fails the run. Elsewhere they skip, saying why.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const PG_ADMIN_URL =
  process.env.RECKON_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const PG_REQUIRED = process.env.CI === 'true' || process.env.RECKON_REQUIRE_PG === '1';

let pgAvailable: Promise<string | null> | undefined;

/** null when PostgreSQL answers; otherwise why not. Throws where PostgreSQL is required. */
export function pgUnavailableReason(): Promise<string | null> {
  pgAvailable ??= (async () => {
    const client = new pg.Client({
      connectionString: PG_ADMIN_URL,
      connectionTimeoutMillis: 3_000,
    });
    try {
      await client.connect();
      await client.query('SELECT 1');
      return null;
    } catch (err) {
      const why = `PostgreSQL not reachable at ${PG_ADMIN_URL}: ${(err as Error).message}`;
      if (PG_REQUIRED) throw new Error(`${why} (required because CI=true or RECKON_REQUIRE_PG=1)`);
      return why;
    } finally {
      await client.end().catch(() => undefined);
    }
  })();
  return pgAvailable;
}

export interface TestStore {
  kind: 'sqlite' | 'postgres';
  url: string;
  /** Removes the database or file. */
  drop(): Promise<void>;
}

export function tempSqliteStore(): TestStore {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-test-'));
  return {
    kind: 'sqlite',
    url: `sqlite:${join(dir, 'reckon.db')}`,
    drop: () => Promise.resolve(rmSync(dir, { recursive: true, force: true })),
  };
}

export async function tempPgStore(): Promise<TestStore> {
  const name = `reckon_test_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    kind: 'postgres',
    url: url.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: PG_ADMIN_URL });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

export type StoreKind = 'sqlite' | 'postgres';

/** The store kinds a reliability or conformance suite runs on: SQLite always, PostgreSQL when it can. */
export const STORE_KINDS: StoreKind[] = ['sqlite', 'postgres'];

export async function makeTestStore(kind: StoreKind): Promise<TestStore> {
  return kind === 'sqlite' ? tempSqliteStore() : tempPgStore();
}
