/**
 * Named API tokens on PostgreSQL (`reckon tokens`): rows of the tokens table, by their SHA-256
 * hash. Each function is one statement; times are the database's clock.
 */
import type pg from 'pg';
import { TokenNameTaken } from '../../core/errors.js';
import { tokenFromRow, type TokenRow } from '../rows.js';
import type { TokenInsert, TokenRecord } from '../store.js';
import { NOW, quoteIdent } from './sql-parts.js';

interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

const COLUMNS =
  'id, name, role, operations_json, grants_json, created_at, created_by, expires_at, revoked_at';

export async function tokenInsert(
  c: Queryable,
  schema: string,
  p: TokenInsert,
): Promise<TokenRecord> {
  try {
    const r = await c.query<TokenRow>(
      `INSERT INTO ${quoteIdent(schema)}.tokens
         (id, name, role, operations_json, grants_json, hash, created_at, created_by, expires_at)
       SELECT $1, $2, $3, $4, $5, $6, t, $7, t + $8::bigint * interval '1 millisecond'
       FROM (SELECT ${NOW} AS t) now
       RETURNING ${COLUMNS}`,
      [
        p.id,
        p.name,
        p.role,
        p.operations === null ? null : JSON.stringify(p.operations),
        JSON.stringify(p.grants),
        p.hash,
        p.createdBy,
        p.expiresInMs,
      ],
    );
    return tokenFromRow(r.rows[0]!);
  } catch (err) {
    // The live-name index: another live token has this name.
    if ((err as { code?: string }).code === '23505' && /tokens_live_name/.test(String(err)))
      throw new TokenNameTaken(p.name);
    throw err;
  }
}

export async function tokenList(
  c: Queryable,
  schema: string,
  p: { includeRevoked?: boolean },
): Promise<TokenRecord[]> {
  const where = p.includeRevoked ? '' : 'WHERE revoked_at IS NULL';
  const r = await c.query<TokenRow>(
    `SELECT ${COLUMNS} FROM ${quoteIdent(schema)}.tokens ${where} ORDER BY created_at DESC, id DESC`,
  );
  return r.rows.map(tokenFromRow);
}

export async function tokenFind(
  c: Queryable,
  schema: string,
  p: { hash: string } | { id: string },
): Promise<TokenRecord | null> {
  const [column, value] = 'hash' in p ? ['hash', p.hash] : ['id', p.id];
  const r = await c.query<TokenRow>(
    `SELECT ${COLUMNS} FROM ${quoteIdent(schema)}.tokens WHERE ${column} = $1`,
    [value],
  );
  return r.rows[0] ? tokenFromRow(r.rows[0]) : null;
}

export async function tokenRevoke(
  c: Queryable,
  schema: string,
  p: { name: string },
): Promise<TokenRecord | null> {
  const r = await c.query<TokenRow>(
    `UPDATE ${quoteIdent(schema)}.tokens SET revoked_at = ${NOW}
     WHERE name = $1 AND revoked_at IS NULL RETURNING ${COLUMNS}`,
    [p.name],
  );
  return r.rows[0] ? tokenFromRow(r.rows[0]) : null;
}
