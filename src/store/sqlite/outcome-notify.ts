/**
 * Outcome notifications for the SQLite store (`jobChangeSubscribe`, `jobStateMany`): what wakes
 * `q.call` and `q.waitFor` waiters.
 *
 * Two sources, both best effort (waiters still poll):
 *  - this connection's own writes: a TEMP trigger (it exists on this connection only, and only
 *    while someone subscribes) calls a function of ours with the id of every job that reaches a
 *    terminal or waiting state; the ids are delivered once the writing turn is over, by which
 *    time the transaction has committed (or rolled back: the waiter then reads the old state);
 *  - other processes' writes: `PRAGMA data_version`, which moves when another connection
 *    commits, checked every few milliseconds; it cannot say which jobs, so it delivers `[]`
 *    ("check every job you wait for").
 */
import type Database from 'better-sqlite3';
import type { ErrorInfo } from '../../core/errors.js';
import type { Json } from '../../core/json.js';
import type { JobState } from '../../core/states.js';
import type { JobStateRow } from '../store.js';

/** The states a job change is reported for: terminal, or waiting for something outside reckon. */
export const OUTCOME_STATES = [
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
  'UNKNOWN',
  'NEEDS_REVIEW',
  'AWAITING_APPROVAL',
] as const;

/** How often other processes' commits are looked for: a read of shared memory, a few µs. */
export const OUTCOME_CHECK_INTERVAL_MS = 5;

const FUNCTION = 'reckon_job_changed';
const TRIGGER_SQL = `CREATE TEMP TRIGGER IF NOT EXISTS ${FUNCTION} AFTER UPDATE OF state ON jobs
  WHEN NEW.state IS NOT OLD.state AND NEW.state IN (${OUTCOME_STATES.map((s) => `'${s}'`).join(',')})
  BEGIN SELECT ${FUNCTION}(NEW.id); END`;

const STATES_SQL = `SELECT id, state,
    CASE WHEN state IN ('SUCCEEDED','FAILED','CANCELLED') THEN result_json END AS result_json,
    CASE WHEN state IN ('SUCCEEDED','FAILED','CANCELLED') THEN error_json END AS error_json
  FROM jobs WHERE id IN (SELECT value FROM json_each(?))`;

const statements = new WeakMap<Database.Database, Database.Statement>();

/** The states of these jobs in one read; unknown ids are left out. */
export function jobStatesRead(db: Database.Database, ids: string[]): JobStateRow[] {
  if (ids.length === 0) return [];
  let stmt = statements.get(db);
  if (!stmt) {
    stmt = db.prepare(STATES_SQL);
    statements.set(db, stmt);
  }
  const rows = stmt.all(JSON.stringify(ids)) as {
    id: string;
    state: string;
    result_json: string | null;
    error_json: string | null;
  }[];
  return rows.map((r) => ({
    id: r.id,
    state: r.state as JobState,
    result: r.result_json === null ? null : (JSON.parse(r.result_json) as Json),
    error: r.error_json === null ? null : (JSON.parse(r.error_json) as ErrorInfo),
  }));
}

/** The subscribers of one connection, and the ids its trigger reported since the last delivery. */
interface Hub {
  listeners: Set<(ids: string[]) => void>;
  pending: Set<string>;
  scheduled: boolean;
}

const hubs = new WeakMap<Database.Database, Hub>();

function deliver(hub: Hub): void {
  hub.scheduled = false;
  const ids = [...hub.pending];
  hub.pending.clear();
  if (ids.length === 0) return;
  for (const l of hub.listeners) l(ids);
}

function hubOf(db: Database.Database): Hub {
  const hub = hubs.get(db);
  if (hub) return hub;
  const h: Hub = { listeners: new Set(), pending: new Set(), scheduled: false };
  db.function(FUNCTION, { deterministic: false, varargs: false }, (id: unknown) => {
    if (typeof id === 'string') h.pending.add(id);
    if (!h.scheduled) {
      h.scheduled = true;
      // After the writing turn: its transaction has ended by then (writes are synchronous).
      setImmediate(() => deliver(h));
    }
    return null;
  });
  hubs.set(db, h);
  return h;
}

/**
 * Subscribes to job changes on this connection (its own writes, through the TEMP trigger) and
 * of other processes (`data_version`). `isOpen` says whether the store is still open.
 */
export function jobChangesSubscribe(p: {
  db: Database.Database;
  isOpen: () => boolean;
  onChange: (jobIds: string[]) => void;
  checkIntervalMs?: number;
}): Promise<{ close(): Promise<void> }> {
  const { db } = p;
  const hub = hubOf(db);
  const listener = (ids: string[]) => call(p.onChange, ids);
  if (hub.listeners.size === 0) db.exec(TRIGGER_SQL);
  hub.listeners.add(listener);
  const version = db.prepare('PRAGMA data_version').pluck();
  let last = version.get() as number;
  const timer = setInterval(() => {
    if (!p.isOpen()) return;
    const now = version.get() as number;
    if (now === last) return;
    last = now;
    call(p.onChange, []);
  }, p.checkIntervalMs ?? OUTCOME_CHECK_INTERVAL_MS);
  timer.unref();
  return Promise.resolve({
    close: () => {
      clearInterval(timer);
      if (hub.listeners.delete(listener) && hub.listeners.size === 0 && p.isOpen())
        db.exec(`DROP TRIGGER IF EXISTS temp.${FUNCTION}`);
      return Promise.resolve();
    },
  });
}

function call(onChange: (jobIds: string[]) => void, ids: string[]): void {
  try {
    onChange(ids);
  } catch {
    // A subscriber's failure is its own; the others are still told.
  }
}
