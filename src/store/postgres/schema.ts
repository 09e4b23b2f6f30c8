/**
 * PostgreSQL migrations: append-only and numbered; never edit a released one.
 *
 * The tables, columns, CHECKs and partial indexes mirror the SQLite schema
 * (../sqlite/schema.ts). Times are `timestamptz` truncated to milliseconds, read on the
 * database's clock, so that the store and the runtime agree to the millisecond. Migration SQL is
 * unqualified: it runs with `search_path` set to reckon's own schema.
 */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

const JOB_STATES = `'QUEUED','LEASED','UNKNOWN','NEEDS_REVIEW','SUCCEEDED','FAILED','CANCELLED'`;
const ATTEMPT_STATES = `'LEASED','SUCCEEDED','FAILED_BEFORE_SEND','FAILED','UNKNOWN'`;

/**
 * The write-once triggers of the recorded steps (invariant 8): migration 11 made them BEFORE
 * UPDATE, migration 13 AFTER UPDATE (a BEFORE row trigger makes PostgreSQL log a row lock even
 * when its WHEN is false). One text, so the two migrations guard the same columns.
 */
function factsOnceTriggers(timing: 'BEFORE' | 'AFTER'): string {
  return `DROP TRIGGER IF EXISTS jobs_facts_once ON jobs;
CREATE TRIGGER jobs_facts_once ${timing} UPDATE ON jobs FOR EACH ROW
  WHEN (OLD.enqueue_actor IS DISTINCT FROM NEW.enqueue_actor
    OR OLD.created_at IS DISTINCT FROM NEW.created_at)
  EXECUTE FUNCTION facts_write_once();
DROP TRIGGER IF EXISTS attempts_facts_once ON attempts;
CREATE TRIGGER attempts_facts_once ${timing} UPDATE ON attempts FOR EACH ROW
  WHEN (OLD.lease_ms IS DISTINCT FROM NEW.lease_ms
    OR OLD.leased_at IS DISTINCT FROM NEW.leased_at
    OR OLD.owner_id IS DISTINCT FROM NEW.owner_id
    OR (OLD.dispatched_at IS NOT NULL AND NEW.dispatched_at IS DISTINCT FROM OLD.dispatched_at)
    OR (OLD.ended_job IS NOT NULL AND (NEW.ended_job, NEW.state, NEW.finished_at, NEW.reason,
      NEW.result_json, NEW.error_json) IS DISTINCT FROM (OLD.ended_job, OLD.state,
      OLD.finished_at, OLD.reason, OLD.result_json, OLD.error_json))
    OR (OLD.state <> 'LEASED' AND NEW.ended_job IS DISTINCT FROM OLD.ended_job))
  EXECUTE FUNCTION facts_write_once();`;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'journal',
    sql: `
CREATE TABLE jobs (
  id                  text PRIMARY KEY,
  queue               text NOT NULL,
  operation           text NOT NULL,
  input_json          text NOT NULL,
  request_key         text NOT NULL UNIQUE,
  request_fingerprint text NOT NULL,
  run_id              text,
  step_id             text,
  state               text NOT NULL CHECK (state IN (${JOB_STATES})),
  priority            integer NOT NULL DEFAULT 0,
  run_at              timestamptz NOT NULL,
  created_at          timestamptz NOT NULL,
  updated_at          timestamptz NOT NULL,
  finished_at         timestamptz,
  attempt_count       integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
  max_attempts        integer NOT NULL CHECK (max_attempts >= 1),
  backoff_json        text NOT NULL,
  timeout_ms          bigint NOT NULL,
  next_check_at       timestamptz,
  lookup_failures     integer NOT NULL DEFAULT 0,
  result_json         text,
  error_json          text,
  CHECK (state <> 'UNKNOWN' OR next_check_at IS NOT NULL)
);
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id) WHERE state = 'QUEUED';
CREATE INDEX jobs_reconcile ON jobs (next_check_at) WHERE state = 'UNKNOWN';
CREATE INDEX jobs_state ON jobs (state, queue);

CREATE TABLE attempts (
  job_id                   text NOT NULL REFERENCES jobs (id),
  attempt_no               integer NOT NULL CHECK (attempt_no >= 1),
  request_key              text NOT NULL,
  request_fingerprint      text NOT NULL,
  state                    text NOT NULL CHECK (state IN (${ATTEMPT_STATES})),
  owner_id                 text NOT NULL,
  lease_token              text NOT NULL,
  leased_at                timestamptz NOT NULL,
  lease_expires_at         timestamptz NOT NULL,
  dispatched_at            timestamptz,
  finished_at              timestamptz,
  result_json              text,
  error_json               text,
  reason                   text,
  resolution               text CHECK (resolution IN ('succeeded','failed','not_found','retry')),
  resolution_source        text,
  resolution_evidence_json text,
  resolved_at              timestamptz,
  PRIMARY KEY (job_id, attempt_no),
  -- invariant 5: UNKNOWN is a marker without an outcome
  CHECK (state <> 'UNKNOWN' OR dispatched_at IS NOT NULL),
  CHECK (resolution IS NULL OR state = 'UNKNOWN')
);
-- invariant 2: at most one live attempt per job
CREATE UNIQUE INDEX attempts_one_lease ON attempts (job_id) WHERE state = 'LEASED';
CREATE INDEX attempts_expiry ON attempts (lease_expires_at) WHERE state = 'LEASED';

CREATE TABLE events (
  id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id              text NOT NULL,
  attempt_no          integer,
  request_fingerprint text NOT NULL,
  kind                text NOT NULL,
  from_state          text,
  to_state            text,
  actor               text NOT NULL,
  detail_json         text,
  at                  timestamptz NOT NULL
);
CREATE INDEX events_job ON events (job_id, id);
-- invariant 8: events are append-only
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'reckon events are append-only' USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
  FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
  FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();
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
    // Ids, keys, queue and operation names are compared byte by byte: under a database's
    // linguistic collation (en_US.UTF-8, even C.UTF-8 before PostgreSQL 17) every index
    // comparison of these columns went through strcoll. Their order was never linguistic
    // anyway (ids sort by time, keys are identifiers). Rebuilds the indexes on them.
    // Events are only ever read by job, in order: their primary key becomes (job_id, id), one
    // index written per event instead of two (the id alone was never looked up).
    version: 3,
    name: 'byte-order collation for identifiers; events keyed by job',
    sql: `
ALTER TABLE jobs
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN queue TYPE text COLLATE "C",
  ALTER COLUMN operation TYPE text COLLATE "C",
  ALTER COLUMN request_key TYPE text COLLATE "C",
  ALTER COLUMN request_fingerprint TYPE text COLLATE "C",
  ALTER COLUMN run_id TYPE text COLLATE "C",
  ALTER COLUMN step_id TYPE text COLLATE "C";
ALTER TABLE attempts
  ALTER COLUMN job_id TYPE text COLLATE "C",
  ALTER COLUMN request_key TYPE text COLLATE "C",
  ALTER COLUMN request_fingerprint TYPE text COLLATE "C",
  ALTER COLUMN owner_id TYPE text COLLATE "C",
  ALTER COLUMN lease_token TYPE text COLLATE "C";
ALTER TABLE events
  DROP CONSTRAINT events_pkey,
  ALTER COLUMN job_id TYPE text COLLATE "C",
  ALTER COLUMN request_fingerprint TYPE text COLLATE "C",
  ADD PRIMARY KEY (job_id, id);
DROP INDEX events_job;
`,
  },
  {
    // Outcome notifications (outcome-notify.ts): a job that someone waits for (`q.call`,
    // `q.waitFor` put its id in outcome_waits) NOTIFYs "<schema>_outcome" with its id when it
    // reaches a terminal or waiting state (with its state, result and error when they fit), so
    // waiters in any process wake without polling and no statement of the hot path changes. The
    // trigger runs once per statement, not per row. Only waited jobs notify: a transaction that
    // NOTIFYs takes a database-wide lock at commit, which made concurrent single-row commits
    // 4x slower (pgbench) when every finished job notified. A terminal job's row is removed.
    version: 4,
    name: 'outcome notifications',
    sql: `
CREATE TABLE outcome_waits (
  job_id text COLLATE "C" PRIMARY KEY
);
CREATE FUNCTION jobs_notify_outcome() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
  -- One call per statement: a batch of finishes costs one join with outcome_waits (empty when
  -- nobody waits), not a function call per row. The outcome itself rides in the notification
  -- when it fits (8000 bytes): no read needed.
  PERFORM pg_notify(TG_TABLE_SCHEMA || '_outcome',
      CASE WHEN octet_length(p.payload) > 7900 THEN json_build_object('id', p.id)::text
           ELSE p.payload END)
    FROM (SELECT n.id, json_build_object('id', n.id, 'state', n.state,
            'result', n.result_json, 'error', n.error_json)::text AS payload
          FROM new_rows n JOIN outcome_waits w ON w.job_id = n.id
          JOIN old_rows o ON o.id = n.id
          WHERE n.state IS DISTINCT FROM o.state AND n.state IN
            ('SUCCEEDED', 'FAILED', 'CANCELLED', 'UNKNOWN', 'NEEDS_REVIEW', 'AWAITING_APPROVAL')) p;
  DELETE FROM outcome_waits w USING new_rows n
    WHERE w.job_id = n.id AND n.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED');
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_outcome AFTER UPDATE ON jobs
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_outcome();
`,
  },
  {
    // AWAITING_APPROVAL (a person allows the side effect before any claim): the state joins the
    // jobs CHECK (a wider constraint: every stored row stays valid), with the reason shown to
    // the approver and when the approval times out. The index serves listing and expiry.
    version: 5,
    name: 'approval before dispatch',
    sql: `
ALTER TABLE jobs
  ADD COLUMN IF NOT EXISTS approval_reason text,
  ADD COLUMN IF NOT EXISTS approval_expires_at timestamptz,
  DROP CONSTRAINT IF EXISTS jobs_state_check,
  ADD CONSTRAINT jobs_state_check CHECK (state IN ('AWAITING_APPROVAL',${JOB_STATES}));
CREATE INDEX IF NOT EXISTS jobs_approval ON jobs (approval_expires_at) WHERE state = 'AWAITING_APPROVAL';
`,
  },
  {
    // Retention (invariant 8): a terminal job's whole history may be deleted at once. Events stay
    // append-only for every other job: a delete is refused unless the event's job is still there
    // and terminal (retention deletes events first, then attempts, then the job); updates and
    // truncation are refused as before. The finished index serves the retention query.
    version: 6,
    name: 'retention: terminal histories may be deleted',
    sql: `
CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id
      AND state IN ('SUCCEEDED','FAILED','CANCELLED')) THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'reckon events are append-only (only a terminal job''s whole history may be deleted)'
    USING ERRCODE = 'restrict_violation';
END
$$;
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
`,
  },
  {
    // The lookup horizon is the operation's policy recorded with the job (DESIGN §3), so a
    // process that does not know the operation never shortens it. Older jobs get the default
    // grace of the code that enqueued them (5,000 ms).
    version: 7,
    name: 'lookup grace recorded with the job',
    sql: `ALTER TABLE jobs ADD COLUMN IF NOT EXISTS reconcile_grace_ms bigint NOT NULL DEFAULT 5000;`,
  },
  {
    // Named API tokens of `reckon serve` (reckon tokens create|list|revoke): only a SHA-256 hash
    // of each token is kept. A name belongs to one live token; a revoked one keeps its row, so
    // the decisions it made still name a token that existed.
    version: 8,
    name: 'named tokens',
    sql: `
CREATE TABLE IF NOT EXISTS tokens (
  id              text PRIMARY KEY,
  name            text NOT NULL,
  role            text NOT NULL CHECK (role IN ('viewer','producer','approver','reviewer','admin')),
  operations_json text,
  grants_json     text NOT NULL DEFAULT '[]',
  hash            text NOT NULL UNIQUE,
  created_at      timestamptz NOT NULL,
  created_by      text NOT NULL,
  expires_at      timestamptz,
  revoked_at      timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS tokens_live_name ON tokens (name) WHERE revoked_at IS NULL;
`,
  },
  {
    // Flow control (issue #30): as SQLite's migration 9 (see there). Claims of limited
    // operations serialize per key with transaction-scoped advisory locks, taken with
    // pg_try_advisory_xact_lock so that a claimer skips a busy key instead of queueing on it.
    version: 9,
    name: 'flow control: limits, pauses, schedules',
    sql: `
ALTER TABLE jobs
  ADD COLUMN IF NOT EXISTS rate_key text,
  ADD COLUMN IF NOT EXISTS concurrency_key text;
CREATE INDEX IF NOT EXISTS jobs_flow_leased ON jobs (operation, concurrency_key)
  WHERE state = 'LEASED' AND concurrency_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS flow_starts (
  operation text NOT NULL,
  rate_key  text NOT NULL,
  at        timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS flow_starts_key ON flow_starts (operation, rate_key, at);
CREATE TABLE IF NOT EXISTS flow_holds (
  operation text NOT NULL,
  rate_key  text NOT NULL,
  until     timestamptz NOT NULL,
  PRIMARY KEY (operation, rate_key)
);
CREATE TABLE IF NOT EXISTS flow_pauses (
  kind      text NOT NULL CHECK (kind IN ('queue', 'operation')),
  name      text NOT NULL,
  actor     text NOT NULL,
  reason    text,
  paused_at timestamptz NOT NULL,
  PRIMARY KEY (kind, name)
);
CREATE TABLE IF NOT EXISTS flow_schedules (
  name         text PRIMARY KEY,
  cron         text NOT NULL,
  timezone     text,
  operation    text NOT NULL,
  last_slot_at timestamptz NOT NULL,
  updated_at   timestamptz NOT NULL
);
`,
  },
  {
    // The enqueuing code's trace context (W3C traceparent), so that a worker's spans join the
    // agent's trace (docs/tracing.md). NULL when no tracer was active at enqueue.
    version: 10,
    name: 'trace context recorded with the job',
    sql: `ALTER TABLE jobs ADD COLUMN IF NOT EXISTS trace_parent text;`,
  },
  {
    // Invariant 8: an attempt's routine steps are write-once columns, not events. A job's
    // enqueue_actor is its `enqueued` step (QUEUED at created_at); an attempt's lease_ms its
    // `leased` step (at leased_at, by owner_id), which also makes its dispatch marker the
    // `dispatched` step; ended_job the outcome that ended the job SUCCEEDED or FAILED (at
    // finished_at). NULL: the step, if any, is an event (every older row). Readers rebuild one
    // trail from both (src/store/trail.ts). The triggers refuse changing a recorded fact; their
    // WHEN is judged without a function call, so an update that keeps them costs no call.
    // Attempt and job pages keep half free (fillfactor 50): the dispatch marker changes no
    // indexed column, so with room on its page it is a HOT update (no new entry in the
    // attempts' three indexes), and the claim's and outcome's new versions of a row land on its
    // own page (a version moved to another page costs a lock record and a full-size image).
    version: 11,
    name: 'routine steps as write-once columns',
    sql: `
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS enqueue_actor text;
ALTER TABLE attempts
  ADD COLUMN IF NOT EXISTS lease_ms bigint,
  ADD COLUMN IF NOT EXISTS ended_job text CHECK (ended_job IN ('SUCCEEDED','FAILED'));
ALTER TABLE attempts SET (fillfactor = 50);
ALTER TABLE jobs SET (fillfactor = 50);
CREATE OR REPLACE FUNCTION facts_write_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'reckon: a recorded step of % is write-once (invariant 8)', TG_TABLE_NAME
    USING ERRCODE = 'restrict_violation';
END
$$;
${factsOnceTriggers('BEFORE')}
-- Outcome notifications cost only the jobs someone waits for: \`watched\` is set when a waiter
-- watches the job (outcome-notify.ts), and the row trigger's WHEN tests it, so an update of any
-- other job calls no function and builds no transition table (migration 4's statement trigger
-- ran once per UPDATE of jobs, and captured every updated row twice, waited for or not).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS watched boolean NOT NULL DEFAULT false;
UPDATE jobs j SET watched = true FROM outcome_waits w WHERE w.job_id = j.id;
DROP TRIGGER IF EXISTS jobs_outcome ON jobs;
DROP FUNCTION IF EXISTS jobs_notify_outcome();
DROP TABLE IF EXISTS outcome_waits;
CREATE OR REPLACE FUNCTION jobs_notify_watched() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  -- The outcome rides in the notification when it fits (8000 bytes): no read needed.
  payload text := json_build_object('id', NEW.id, 'state', NEW.state,
    'result', NEW.result_json, 'error', NEW.error_json)::text;
BEGIN
  PERFORM pg_notify(TG_TABLE_SCHEMA || '_outcome',
    CASE WHEN octet_length(payload) > 7900 THEN json_build_object('id', NEW.id)::text
         ELSE payload END);
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_outcome AFTER UPDATE ON jobs FOR EACH ROW
  WHEN (NEW.watched AND NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN
    ('SUCCEEDED', 'FAILED', 'CANCELLED', 'UNKNOWN', 'NEEDS_REVIEW', 'AWAITING_APPROVAL'))
  EXECUTE FUNCTION jobs_notify_watched();
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
    // What the hot path wrote for no reader (issue #29). attempts_one_lease: no statement reads
    // through it, and invariant 2 does not rest on it: a claim leases only QUEUED jobs, each row
    // locked, with one new attempt each; every move that takes a job off its attempt ends that
    // attempt in the same commit; and every fenced write judges the job's state and attempt count
    // with the token, so a LEASED attempt is always its job's current one (the conformance,
    // fencing and chaos tests check it). It cost an index entry per claim.
    // An attempt's request key and fingerprint were copies of its job's, which never change
    // (invariant 6): new attempts leave them NULL and reads take the job's (rows.ts
    // `attemptFromRow`); older rows keep their copies. Made nullable rather than dropped: a
    // restore of an older backup, and a process of the previous version still running during an
    // upgrade, keep writing them; PostgreSQL changes only its catalog either way.
    // The write-once triggers of migration 11 run AFTER the update, as SQLite's do: a BEFORE row
    // trigger locks the row it is given (a WAL record of its own) even when its WHEN is false,
    // which cost the dispatch marker a row lock, and an outcome without its lock step one more.
    // They refuse the same changes: the statement aborts, its writes undone.
    version: 13,
    name: 'attempts without the job copies or the one-lease index',
    sql: `
DROP INDEX IF EXISTS attempts_one_lease;
ALTER TABLE attempts
  ALTER COLUMN request_key DROP NOT NULL,
  ALTER COLUMN request_fingerprint DROP NOT NULL;
${factsOnceTriggers('AFTER')}
`,
  },
  {
    // The claim of an operation limited by concurrency alone is one statement (issue #30): it
    // locks its candidates and their keys, then must count the key's leases in a snapshot taken
    // after the key locks, which the statement's own is not. A VOLATILE function's query takes
    // one of its own: this is that count. Along jobs_flow_leased.
    version: 14,
    name: 'flow: leases per concurrency key, counted fresh',
    sql: `
CREATE OR REPLACE FUNCTION flow_leased(op text, keys text[])
RETURNS TABLE (key text, n bigint) LANGUAGE plpgsql VOLATILE ROWS 10
SET search_path FROM CURRENT AS $$
BEGIN
  RETURN QUERY SELECT j.concurrency_key, count(*) FROM jobs j
    WHERE j.state = 'LEASED' AND j.concurrency_key IS NOT NULL AND j.operation = op
      AND j.concurrency_key = ANY (keys)
    GROUP BY j.concurrency_key;
END $$;
`,
  },
  {
    // What the hot path wrote for its expired-lease scan (issue #29). attempts_expiry
    // (lease_expires_at) WHERE state = 'LEASED' made every change of an attempt's state or expiry
    // a non-HOT update: the outcome's and every heartbeat's new version took a primary-key entry
    // too. The scan now starts from the job: the claim records in a LEASED job's next_check_at
    // when its lease first expires (a column the claim's update writes anyway; a new column at
    // the end of the row lengthened the claim's WAL record by the whole unchanged tail of the
    // row, 94 bytes, this one by the columns up to it, about 70), and jobs_lease_check indexes
    // LEASED jobs by it. Heartbeats only extend a lease, so a job whose next_check_at + skew has
    // not passed has no expired lease: the scan reads only leases past their first expiry (and
    // any leased by a process of an older version, which leaves it NULL: indexed as -infinity,
    // so that one range of the index holds every candidate), then judges each by its attempt.
    // Attempts keep one index, their key: the outcome and heartbeats become HOT updates.
    // (Measured and not taken before: an index of every LEASED job, with which each worker's
    // scan, every second, read every leased job.)
    version: 15,
    name: 'expired leases found from the job',
    sql: `
CREATE INDEX IF NOT EXISTS jobs_lease_check
  ON jobs ((coalesce(next_check_at, '-infinity'::timestamptz))) WHERE state = 'LEASED';
DROP INDEX IF EXISTS attempts_expiry;
`,
  },
];

export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/** Lives outside the migrations: it records them. */
export const MIGRATIONS_TABLE_SQL = `CREATE TABLE IF NOT EXISTS reckon_migrations (
  version    integer PRIMARY KEY,
  name       text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`;
