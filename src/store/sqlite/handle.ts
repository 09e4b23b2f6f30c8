/**
 * What the store's free functions (reads.ts, attempts.ts, moves.ts) need of the open store: its
 * connection, cached statements, clock and writer.
 */
import type Database from 'better-sqlite3';
import type { SqliteWriter } from './commit.js';

export interface SqliteHandle {
  conn(): Database.Database;
  /** A cached prepared statement. */
  stmt(sql: string): Database.Statement;
  /** A cached statement whose rows come back as arrays (see the store's `rawStmt`). */
  rawStmt(sql: string): Database.Statement;
  now(): number;
  readonly writer: SqliteWriter;
  /** A read outside any transaction, its error classified. */
  read<T>(fn: () => T): Promise<T>;
  classify(err: unknown): Error;
}
