/**
 * What the store's free functions (reads.ts, attempts.ts, moves.ts) need of the open store: its
 * connections, statements, notification channel, commit observers and local wake-ups.
 */
import type { CommitObservers } from '../commit-observers.js';
import type { PgConnection } from './commit.js';
import type { Statements } from './statements.js';

export interface PgHandle {
  readonly db: PgConnection;
  readonly sql: Statements;
  /** The schema's work channel (LISTEN/NOTIFY). */
  readonly channel: string;
  readonly commits: CommitObservers;
  /** Work that a statement of ours made due, committed: wakes this process's subscribers. */
  wakeLocal(queues: Iterable<string>): void;
}
