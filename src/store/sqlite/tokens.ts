/**
 * Named API tokens on SQLite (`reckon tokens`): rows of the tokens table, by their SHA-256 hash.
 * Writes run in the store's write transaction; `now` is the store's clock.
 */
import type Database from 'better-sqlite3';
import { TokenNameTaken } from '../../core/errors.js';
import { tokenFromRow, type TokenRow } from '../rows.js';
import type { TokenInsert, TokenRecord } from '../store.js';

const COLUMNS =
  'id, name, role, operations_json, grants_json, created_at, created_by, expires_at, revoked_at';

export function tokenInsert(db: Database.Database, p: TokenInsert, now: number): TokenRecord {
  const live = db.prepare('SELECT 1 FROM tokens WHERE name = ? AND revoked_at IS NULL').get(p.name);
  if (live) throw new TokenNameTaken(p.name);
  const row = db
    .prepare(
      `INSERT INTO tokens (id, name, role, operations_json, grants_json, hash, created_at, created_by, expires_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING ${COLUMNS}`,
    )
    .get(
      p.id,
      p.name,
      p.role,
      p.operations === null ? null : JSON.stringify(p.operations),
      JSON.stringify(p.grants),
      p.hash,
      now,
      p.createdBy,
      p.expiresInMs === null ? null : now + p.expiresInMs,
    ) as TokenRow;
  return tokenFromRow(row);
}

export function tokenList(db: Database.Database, p: { includeRevoked?: boolean }): TokenRecord[] {
  const where = p.includeRevoked ? '' : 'WHERE revoked_at IS NULL';
  const rows = db
    .prepare(`SELECT ${COLUMNS} FROM tokens ${where} ORDER BY created_at DESC, id DESC`)
    .all() as TokenRow[];
  return rows.map(tokenFromRow);
}

export function tokenFind(
  db: Database.Database,
  p: { hash: string } | { id: string },
): TokenRecord | null {
  const [column, value] = 'hash' in p ? ['hash', p.hash] : ['id', p.id];
  const row = db.prepare(`SELECT ${COLUMNS} FROM tokens WHERE ${column} = ?`).get(value) as
    TokenRow | undefined;
  return row ? tokenFromRow(row) : null;
}

export function tokenRevoke(
  db: Database.Database,
  p: { name: string },
  now: number,
): TokenRecord | null {
  const row = db
    .prepare(
      `UPDATE tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL RETURNING ${COLUMNS}`,
    )
    .get(now, p.name) as TokenRow | undefined;
  return row ? tokenFromRow(row) : null;
}
