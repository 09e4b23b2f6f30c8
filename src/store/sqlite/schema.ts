/**
 * SQLite migrations: append-only and numbered; never edit a released one.
 * Times are integer milliseconds since the epoch on the host clock.
 */
import Database from 'better-sqlite3';
export interface Migration {
  version: number;
  name: string;
  sql: string;
  /**
   * Edits of stored `CREATE TABLE` texts, for a change SQLite's ALTER TABLE cannot make and
   * that leaves every stored row valid: a CHECK constraint replaced by an equivalent one. Made
   * through `PRAGMA writable_schema` in the migration's transaction, the procedure SQLite
   * documents for CHECK constraints (no table rebuild). A `from` absent from its table (already
   * rewritten, or a table edited by hand) leaves that table as it is; found twice, it throws.
   * A `required` rewrite is one the code's writes depend on (a NOT NULL removed): absent, with
   * its `to` absent too (a table edited by hand), it throws instead.
   */
  rewrites?: readonly { table: string; from: string; to: string; required?: boolean }[];
  /**
   * Columns added (ALTER TABLE … ADD COLUMN) before `sql` runs, each only if its table lacks it:
   * SQLite has no ADD COLUMN IF NOT EXISTS, and a migration run again over its own work (a
   * migrations table rolled back by hand) must not fail on a column it already added.
   */
  columns?: readonly { table: string; column: string; type: string }[];
}

/**
 * The states as migrations 1 and 3 wrote them: copies, not core/states.ts's lists, because a
 * released migration's text never changes (migration 3 finds migration 1's texts by their exact
 * words); a state added later gets a migration of its own.
 */
const JOB_STATE_LIST = [
  'QUEUED',
  'LEASED',
  'UNKNOWN',
  'NEEDS_REVIEW',
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
];
const ATTEMPT_STATE_LIST = ['LEASED', 'SUCCEEDED', 'FAILED_BEFORE_SEND', 'FAILED', 'UNKNOWN'];
const RESOLUTION_LIST = ['succeeded', 'failed', 'not_found', 'retry'];
const quoted = (values: string[]) => values.map((v) => `'${v}'`).join(',');
const JOB_STATES = quoted(JOB_STATE_LIST);
const ATTEMPT_STATES = quoted(ATTEMPT_STATE_LIST);

/**
 * `column = 'a' OR column = 'b' …`: the same constraint as `column IN ('a', 'b', …)` (NULL
 * passes both), without what SQLite makes of an IN list of more than two values in a CHECK: an
 * ephemeral B-tree built and dropped on every row write.
 */
const anyOf = (column: string, values: string[]) =>
  values.map((v) => `${column} = '${v}'`).join(' OR ');

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'journal',
    sql: `
CREATE TABLE jobs (
  id                  TEXT PRIMARY KEY,
  queue               TEXT NOT NULL,
  operation           TEXT NOT NULL,
  input_json          TEXT NOT NULL,
  request_key         TEXT NOT NULL UNIQUE,
  request_fingerprint TEXT NOT NULL,
  run_id              TEXT,
  step_id             TEXT,
  state               TEXT NOT NULL CHECK (state IN (${JOB_STATES})),
  priority            INTEGER NOT NULL DEFAULT 0,
  run_at              INTEGER NOT NULL,
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL,
  finished_at         INTEGER,
  attempt_count       INTEGER NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
  max_attempts        INTEGER NOT NULL CHECK (max_attempts >= 1),
  backoff_json        TEXT NOT NULL,
  timeout_ms          INTEGER NOT NULL,
  next_check_at       INTEGER,
  lookup_failures     INTEGER NOT NULL DEFAULT 0,
  result_json         TEXT,
  error_json          TEXT,
  CHECK (state <> 'UNKNOWN' OR next_check_at IS NOT NULL)
) STRICT;
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id) WHERE state = 'QUEUED';
CREATE INDEX jobs_reconcile ON jobs (next_check_at) WHERE state = 'UNKNOWN';
CREATE INDEX jobs_state ON jobs (state, queue);

CREATE TABLE attempts (
  job_id                   TEXT NOT NULL REFERENCES jobs (id),
  attempt_no               INTEGER NOT NULL CHECK (attempt_no >= 1),
  request_key              TEXT NOT NULL,
  request_fingerprint      TEXT NOT NULL,
  state                    TEXT NOT NULL CHECK (state IN (${ATTEMPT_STATES})),
  owner_id                 TEXT NOT NULL,
  lease_token              TEXT NOT NULL,
  leased_at                INTEGER NOT NULL,
  lease_expires_at         INTEGER NOT NULL,
  dispatched_at            INTEGER,
  finished_at              INTEGER,
  result_json              TEXT,
  error_json               TEXT,
  reason                   TEXT,
  resolution               TEXT CHECK (resolution IN (${quoted(RESOLUTION_LIST)})),
  resolution_source        TEXT,
  resolution_evidence_json TEXT,
  resolved_at              INTEGER,
  PRIMARY KEY (job_id, attempt_no),
  -- invariant 5: UNKNOWN is a marker without an outcome
  CHECK (state <> 'UNKNOWN' OR dispatched_at IS NOT NULL),
  CHECK (resolution IS NULL OR state = 'UNKNOWN')
) STRICT;
-- invariant 2: at most one live attempt per job
CREATE UNIQUE INDEX attempts_one_lease ON attempts (job_id) WHERE state = 'LEASED';
CREATE INDEX attempts_expiry ON attempts (lease_expires_at) WHERE state = 'LEASED';

CREATE TABLE events (
  id                  INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id              TEXT NOT NULL,
  attempt_no          INTEGER,
  request_fingerprint TEXT NOT NULL,
  kind                TEXT NOT NULL,
  from_state          TEXT,
  to_state            TEXT,
  actor               TEXT NOT NULL,
  detail_json         TEXT,
  at                  INTEGER NOT NULL
) STRICT;
CREATE INDEX events_job ON events (job_id, id);
-- invariant 8: events are append-only
CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN SELECT RAISE(ABORT, 'reckon events are append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events BEGIN SELECT RAISE(ABORT, 'reckon events are append-only'); END;
`,
  },
  {
    // jobs_state (state, queue) took an index write on every state change, and with stale
    // statistics (a bulk enqueue not yet analyzed) the PostgreSQL planner chose it for the claim
    // and sorted every waiting job. What it served is served by the partial indexes: the claim
    // (QUEUED) and reconciler (UNKNOWN) have theirs, review gets one; counts scan the table.
    version: 2,
    name: 'partial state indexes only',
    sql: `
DROP INDEX jobs_state;
CREATE INDEX jobs_review ON jobs (id) WHERE state = 'NEEDS_REVIEW';
`,
  },
  {
    // Every job and attempt write checked its state against an IN list, which SQLite compiles
    // to an ephemeral B-tree built on each run of the statement: five or six per job
    // processed, ≈ 1.5 µs each. The same constraints as OR chains compile to comparisons.
    version: 3,
    name: 'state checks without IN lists',
    sql: '',
    rewrites: [
      {
        table: 'jobs',
        from: `CHECK (state IN (${JOB_STATES}))`,
        to: `CHECK (${anyOf('state', JOB_STATE_LIST)})`,
      },
      {
        table: 'attempts',
        from: `CHECK (state IN (${ATTEMPT_STATES}))`,
        to: `CHECK (${anyOf('state', ATTEMPT_STATE_LIST)})`,
      },
      {
        table: 'attempts',
        from: `CHECK (resolution IN (${quoted(RESOLUTION_LIST)}))`,
        to: `CHECK (${anyOf('resolution', RESOLUTION_LIST)})`,
      },
    ],
  },
  {
    // Ties in claim order (same queue, priority and run_at) are taken in the order the jobs were
    // inserted, which SQLite's index entries already end with (the rowid): the claim index no
    // longer carries the 36-character id, and every enqueue writes a smaller entry into it.
    version: 4,
    name: 'claim index without the id',
    sql: `
DROP INDEX jobs_claim;
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at) WHERE state = 'QUEUED';
`,
  },
  {
    // AWAITING_APPROVAL (a person allows the side effect before any claim): the state joins the
    // jobs CHECK (a wider constraint: every stored row stays valid), with the reason shown to
    // the approver and when the approval times out. The index serves listing and expiry.
    version: 5,
    name: 'approval before dispatch',
    columns: [
      { table: 'jobs', column: 'approval_reason', type: 'TEXT' },
      { table: 'jobs', column: 'approval_expires_at', type: 'INTEGER' },
    ],
    sql: `
CREATE INDEX IF NOT EXISTS jobs_approval ON jobs (approval_expires_at) WHERE state = 'AWAITING_APPROVAL';
`,
    rewrites: [
      {
        table: 'jobs',
        from: `CHECK (${anyOf('state', JOB_STATE_LIST)})`,
        to: `CHECK (${anyOf('state', ['AWAITING_APPROVAL', ...JOB_STATE_LIST])})`,
      },
    ],
  },
  {
    // Retention (invariant 8): a terminal job's whole history may be deleted at once. Events stay
    // append-only for every other job: a delete is refused unless the event's job is still there
    // and terminal (retention deletes events first, then attempts, then the job). The finished
    // index serves the retention query (finished_at is set only in a terminal state).
    version: 6,
    name: 'retention: terminal histories may be deleted',
    sql: `
DROP TRIGGER IF EXISTS events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
  WHEN NOT EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id
    AND (state = 'SUCCEEDED' OR state = 'FAILED' OR state = 'CANCELLED'))
  BEGIN SELECT RAISE(ABORT, 'reckon events are append-only (only a terminal job''s whole history may be deleted)'); END;
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
`,
  },
  {
    // The lookup horizon is the operation's policy recorded with the job (DESIGN §3), so a
    // process that does not know the operation never shortens it. Older jobs get the default
    // grace of the code that enqueued them (5,000 ms).
    version: 7,
    name: 'lookup grace recorded with the job',
    sql: '',
    columns: [
      { table: 'jobs', column: 'reconcile_grace_ms', type: 'INTEGER NOT NULL DEFAULT 5000' },
    ],
  },
  {
    // Named API tokens of `reckon serve` (reckon tokens create|list|revoke): only a SHA-256 hash
    // of each token is kept. A name belongs to one live token; a revoked one keeps its row, so
    // the decisions it made still name a token that existed.
    version: 8,
    name: 'named tokens',
    sql: `
CREATE TABLE IF NOT EXISTS tokens (
  id              TEXT PRIMARY KEY,
  name            TEXT NOT NULL,
  role            TEXT NOT NULL CHECK (${anyOf('role', ['viewer', 'producer', 'approver', 'reviewer', 'admin'])}),
  operations_json TEXT,
  grants_json     TEXT NOT NULL DEFAULT '[]',
  hash            TEXT NOT NULL UNIQUE,
  created_at      INTEGER NOT NULL,
  created_by      TEXT NOT NULL,
  expires_at      INTEGER,
  revoked_at      INTEGER
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS tokens_live_name ON tokens (name) WHERE revoked_at IS NULL;
`,
  },
  {
    // Flow control (issue #30). Each job carries the keys its operation's limits put it under,
    // computed at enqueue (NULL: no limit of that kind; '' the operation-wide key), so that a
    // claim counts and filters in SQL. Rate limits count starts in flow_starts (a sliding window:
    // at most max starts in any perMs); flow_holds pushes a key's next start out (a downstream's
    // Retry-After). flow_pauses: queues and operations whose jobs no claim takes. flow_schedules:
    // each schedule's last enqueued slot, so that a slot is judged once, whoever ticks.
    // jobs_flow_leased counts the leased jobs of a limited key: only limited jobs enter it.
    version: 9,
    name: 'flow control: limits, pauses, schedules',
    columns: [
      { table: 'jobs', column: 'rate_key', type: 'TEXT' },
      { table: 'jobs', column: 'concurrency_key', type: 'TEXT' },
    ],
    sql: `
CREATE INDEX IF NOT EXISTS jobs_flow_leased ON jobs (operation, concurrency_key)
  WHERE state = 'LEASED' AND concurrency_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS flow_starts (
  operation TEXT NOT NULL,
  rate_key  TEXT NOT NULL,
  at        INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS flow_starts_key ON flow_starts (operation, rate_key, at);
CREATE TABLE IF NOT EXISTS flow_holds (
  operation TEXT NOT NULL,
  rate_key  TEXT NOT NULL,
  until     INTEGER NOT NULL,
  PRIMARY KEY (operation, rate_key)
) STRICT;
CREATE TABLE IF NOT EXISTS flow_pauses (
  kind      TEXT NOT NULL CHECK (kind = 'queue' OR kind = 'operation'),
  name      TEXT NOT NULL,
  actor     TEXT NOT NULL,
  reason    TEXT,
  paused_at INTEGER NOT NULL,
  PRIMARY KEY (kind, name)
) STRICT;
CREATE TABLE IF NOT EXISTS flow_schedules (
  name         TEXT PRIMARY KEY,
  cron         TEXT NOT NULL,
  timezone     TEXT,
  operation    TEXT NOT NULL,
  last_slot_at INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL
) STRICT;
`,
  },
  {
    // The enqueuing code's trace context (W3C traceparent), so that a worker's spans join the
    // agent's trace (docs/tracing.md). NULL when no tracer was active at enqueue.
    version: 10,
    name: 'trace context recorded with the job',
    sql: '',
    columns: [{ table: 'jobs', column: 'trace_parent', type: 'TEXT' }],
  },
  {
    // Invariant 8: an attempt's routine steps are write-once columns, not events (see the
    // PostgreSQL migration 11 for what each column records; NULL: the step, if any, is an event).
    // The triggers run after the row is written (a CHECK still speaks first) and only for
    // updates that name the columns, so a heartbeat fires none.
    version: 11,
    name: 'routine steps as write-once columns',
    columns: [
      { table: 'jobs', column: 'enqueue_actor', type: 'TEXT' },
      { table: 'attempts', column: 'lease_ms', type: 'INTEGER' },
      {
        table: 'attempts',
        column: 'ended_job',
        type: `TEXT CHECK (ended_job = 'SUCCEEDED' OR ended_job = 'FAILED')`,
      },
    ],
    sql: `
DROP TRIGGER IF EXISTS jobs_facts_once;
CREATE TRIGGER jobs_facts_once AFTER UPDATE OF enqueue_actor, created_at ON jobs
  WHEN OLD.enqueue_actor IS NOT NEW.enqueue_actor OR OLD.created_at IS NOT NEW.created_at
  BEGIN SELECT RAISE(ABORT, 'reckon: a recorded step of jobs is write-once (invariant 8)'); END;
DROP TRIGGER IF EXISTS attempts_facts_once;
CREATE TRIGGER attempts_facts_once
  AFTER UPDATE OF lease_ms, leased_at, owner_id, dispatched_at, ended_job, state, finished_at,
    reason, result_json, error_json ON attempts
  WHEN OLD.lease_ms IS NOT NEW.lease_ms OR OLD.leased_at IS NOT NEW.leased_at
    OR OLD.owner_id IS NOT NEW.owner_id
    OR (OLD.dispatched_at IS NOT NULL AND NEW.dispatched_at IS NOT OLD.dispatched_at)
    OR (OLD.ended_job IS NOT NULL AND (NEW.ended_job IS NOT OLD.ended_job
      OR NEW.state IS NOT OLD.state OR NEW.finished_at IS NOT OLD.finished_at
      OR NEW.reason IS NOT OLD.reason OR NEW.result_json IS NOT OLD.result_json
      OR NEW.error_json IS NOT OLD.error_json))
    OR (OLD.state <> 'LEASED' AND NEW.ended_job IS NOT OLD.ended_job)
  BEGIN SELECT RAISE(ABORT, 'reckon: a recorded step of attempts is write-once (invariant 8)'); END;
`,
  },
  {
    // A job list or search by operation reads that operation's newest jobs in id order, however
    // rare the operation (issue #28: lists and searches with 1,000,000 jobs). Neither column ever
    // changes: one index entry per enqueue, nothing on the hot path's state changes.
    version: 12,
    name: 'jobs by operation, newest first',
    sql: `CREATE INDEX IF NOT EXISTS jobs_operation ON jobs (operation, id);`,
  },
  {
    // As the PostgreSQL migration 13 (see there): no attempts_one_lease, and new attempts do not
    // copy their job's request key and fingerprint. SQLite cannot drop a NOT NULL with ALTER
    // TABLE; removing one through the stored text is among the edits SQLite documents as safe
    // (every stored row stays valid), and needs no table rebuild.
    version: 13,
    name: 'attempts without the job copies or the one-lease index',
    sql: `DROP INDEX IF EXISTS attempts_one_lease;`,
    rewrites: [
      {
        table: 'attempts',
        from: 'request_key              TEXT NOT NULL',
        to: 'request_key              TEXT',
        required: true,
      },
      {
        table: 'attempts',
        from: 'request_fingerprint      TEXT NOT NULL',
        to: 'request_fingerprint      TEXT',
        required: true,
      },
    ],
  },
  {
    // PostgreSQL's migration 14 (see there) has no SQLite counterpart: its function gives the
    // one-statement claim a snapshot taken after its locks, and SQLite's claims are serialized by
    // its single writer. The number is kept so that a version names one schema on both stores.
    version: 14,
    name: 'flow: leases per concurrency key, counted fresh (PostgreSQL only)',
    sql: '',
  },
  {
    // PostgreSQL's migration 15 (see there) has no SQLite counterpart: it makes an attempt's
    // outcome and heartbeats HOT updates, and SQLite has none to gain. Its update of a row
    // rewrites the row's page whatever changes, and moves the entries of the indexes it
    // touches, so attempts_expiry costs the claim one entry and the outcome one removal, as an
    // index of LEASED jobs would. The number is kept so that a version names one schema on both
    // stores.
    version: 15,
    name: 'expired leases found from the job (PostgreSQL only)',
    sql: '',
  },
];

export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/**
 * Replaces text in stored CREATE TABLE statements (see `Migration.rewrites`), inside the caller's
 * transaction (a migration's): `writable_schema` for the edit, with better-sqlite3's defensive
 * mode lifted for it alone, then a new schema version, so that every other connection reloads
 * the schema before its next statement. Each new text is first created in a scratch in-memory
 * database: SQLite does not parse an edited schema until a connection loads it again, so a text
 * that did not parse would be committed and leave the file unreadable. A text that does not
 * parse, or a `from` found twice, throws, rolling the migration back.
 */
export function rewriteTables(
  db: Database.Database,
  rewrites: NonNullable<Migration['rewrites']>,
): void {
  const version = db.pragma('schema_version', { simple: true }) as number;
  db.unsafeMode(true);
  try {
    db.pragma('writable_schema = ON');
    const read = db.prepare(`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?`);
    const write = db.prepare(`UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?`);
    for (const r of rewrites) {
      const row = read.get(r.table) as { sql: string } | undefined;
      const found = row ? row.sql.split(r.from).length - 1 : 0;
      // Not there: already rewritten (a migrations table rolled back by hand), or a table edited
      // by hand. Its constraint is then left as it is: a rewrite only ever replaces a constraint
      // with an equivalent one, so leaving it changes no rule, only its cost.
      if (found === 0 && r.required && !row?.sql.includes(r.to))
        throw new Error(
          `migration: table ${r.table} has neither ${JSON.stringify(r.from)} nor ${JSON.stringify(r.to)}: edit it to the latter by hand`,
        );
      if (found === 0) continue;
      if (found > 1)
        throw new Error(
          `migration: ${JSON.stringify(r.from)} occurs ${found} times in table ${r.table}; expected once`,
        );
      const sql = row!.sql.replace(r.from, () => r.to);
      const scratch = new Database(':memory:');
      try {
        scratch.exec(sql);
      } catch (err) {
        throw new Error(`migration: the new text of table ${r.table} does not parse`, {
          cause: err,
        });
      } finally {
        scratch.close();
      }
      write.run(sql, r.table);
    }
    db.pragma(`schema_version = ${version + 1}`);
  } finally {
    db.pragma('writable_schema = OFF');
    db.unsafeMode(false);
  }
}

/** Adds each column its table lacks (see `Migration.columns`), inside the migration's transaction. */
export function addColumns(
  db: Database.Database,
  columns: NonNullable<Migration['columns']>,
): void {
  for (const c of columns) {
    const has = db
      .prepare(`SELECT 1 FROM pragma_table_info(?) WHERE name = ?`)
      .get(c.table, c.column);
    if (!has) db.exec(`ALTER TABLE ${c.table} ADD COLUMN ${c.column} ${c.type}`);
  }
}
