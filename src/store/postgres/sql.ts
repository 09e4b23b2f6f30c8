/**
 * The PostgreSQL store's statements, one per store step, each with a header naming its
 * parameters. Table names are qualified with reckon's schema, because some statements run on a
 * caller's connection (transactional enqueue) whose search_path is the caller's.
 *
 * Times: the database's clock (`clock_timestamp()`, not the transaction's `now()`), truncated to
 * milliseconds so that a time read back as a JS number is exactly what was stored. Times passed
 * in are epoch milliseconds (`bigint`), converted exactly by `fromMs`. Batches travel as one
 * JSON array parameter and are unpacked by `json_to_recordset`.
 */

/** The database's clock now, to the millisecond. */
export const NOW = `date_trunc('milliseconds', clock_timestamp())`;

/** An epoch-milliseconds expression as timestamptz (exact: no float seconds). */
function fromMs(ms: string): string {
  return `(timestamptz 'epoch' + (${ms})::bigint * interval '1 millisecond')`;
}

function millis(ms: string): string {
  return `((${ms})::bigint * interval '1 millisecond')`;
}

/** Unquoted lower-case identifiers only: they need no escaping and read the same everywhere. */
export const SCHEMA_NAME_RE = /^[a-z_][a-z0-9_]{0,47}$/;

export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The notification channel of a schema: every reckon store on that schema shares it. */
export function workChannel(schema: string): string {
  return `${schema}_work`;
}

export type Statements = ReturnType<typeof statements>;

export function statements(schema: string) {
  const s = quoteIdent(schema);
  const jobs = `${s}.jobs`;
  const attempts = `${s}.attempts`;
  const events = `${s}.events`;
  return {
    // ------------------------------------------------------------ lifecycle

    /** $1 lock namespace (int), $2 schema name. Serializes migrations of one schema across processes. */
    migrationLock: `SELECT pg_advisory_xact_lock($1::int, hashtext($2::text))`,

    schemaVersion: `SELECT coalesce(max(version), 0) AS v FROM ${s}.reckon_migrations`,

    /** $1 version, $2 name. */
    migrationRecord: `INSERT INTO ${s}.reckon_migrations (version, name) VALUES ($1, $2)`,

    clockNow: `SELECT ${NOW} AS now`,

    // ------------------------------------------------------------ shared writes

    /**
     * $1 JSON array of { job_id, attempt_no, request_fingerprint, kind, from_state, to_state,
     * actor, detail_json }, $2 now (ms). Appends them in array order.
     */
    eventInsert: `
INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
SELECT e.job_id, e.attempt_no, e.request_fingerprint, e.kind, e.from_state, e.to_state, e.actor, e.detail_json, ${fromMs('$2')}
FROM json_to_recordset($1::json) AS e(job_id text, attempt_no int, request_fingerprint text, kind text,
  from_state text, to_state text, actor text, detail_json text)`,

    /**
     * $1 JSON array of { job_id, attempt_no, kind, from_state, to_state, actor, detail_json }.
     * Appends each event of an existing job (skipping unknown jobs) at the database's now.
     */
    eventAppend: `
INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
SELECT e.job_id, e.attempt_no, e.fingerprint, e.kind, e.from_state, e.to_state, e.actor, e.detail_json, ${NOW}
FROM (
  SELECT x.*, (SELECT j.request_fingerprint FROM ${jobs} j WHERE j.id = x.job_id) AS fingerprint
  FROM json_to_recordset($1::json) AS x(job_id text, attempt_no int, kind text, from_state text,
    to_state text, actor text, detail_json text)
) e
WHERE e.fingerprint IS NOT NULL`,

    /**
     * $1 JSON array of job moves { id, state, updated_at, run_at, next_check_at, lookup_failures,
     * result_json, error_json, finished_at } (times in ms), decided by the store on the locked
     * row. A null run_at, lookup_failures, result_json or error_json keeps the column as it is.
     * Returns the updated rows.
     */
    jobUpdate: `
UPDATE ${jobs} j SET
  state = u.state,
  updated_at = ${fromMs('u.updated_at')},
  run_at = coalesce(${fromMs('u.run_at')}, j.run_at),
  next_check_at = ${fromMs('u.next_check_at')},
  lookup_failures = coalesce(u.lookup_failures, j.lookup_failures),
  result_json = coalesce(u.result_json, j.result_json),
  error_json = coalesce(u.error_json, j.error_json),
  finished_at = ${fromMs('u.finished_at')}
FROM json_to_recordset($1::json) AS u(id text, state text, updated_at bigint, run_at bigint,
  next_check_at bigint, lookup_failures int, result_json text, error_json text, finished_at bigint)
WHERE j.id = u.id
RETURNING j.*`,

    /**
     * $1 JSON array of { job_id, attempt_no, lease_token, state, finished_at (ms), result_json,
     * error_json, reason }. Ends LEASED attempts, each fenced on its token.
     */
    attemptEnd: `
UPDATE ${attempts} a SET
  state = u.state,
  finished_at = ${fromMs('u.finished_at')},
  result_json = u.result_json,
  error_json = u.error_json,
  reason = u.reason
FROM json_to_recordset($1::json) AS u(job_id text, attempt_no int, lease_token text, state text,
  finished_at bigint, result_json text, error_json text, reason text)
WHERE a.job_id = u.job_id AND a.attempt_no = u.attempt_no AND a.lease_token = u.lease_token
  AND a.state = 'LEASED'`,

    /** $1 queues (text[]), $2 channel. Wakes workers listening on the channel, one payload per queue. */
    notify: `SELECT pg_notify($2::text, q) FROM unnest($1::text[]) AS q`,

    // ------------------------------------------------------------ locks

    /**
     * $1 JSON array of { job_id, attempt_no }. Locks each job with that attempt, in job id order
     * (so concurrent batches never wait on each other in a cycle). `now` is read above the lock,
     * so after it is held: the last row's is the time at which every lock is held.
     */
    leaseLock: `
SELECT l.job, l.attempt, ${NOW} AS now
FROM (
  SELECT row_to_json(j) AS job, row_to_json(a) AS attempt
  FROM json_to_recordset($1::json) AS r(job_id text, attempt_no int)
  JOIN ${jobs} j ON j.id = r.job_id
  JOIN ${attempts} a ON a.job_id = r.job_id AND a.attempt_no = r.attempt_no
  ORDER BY j.id
  FOR UPDATE OF j, a
) l`,

    /** $1 job id. Locks the job; `now` is read after the lock is held. */
    jobLock: `SELECT l.*, ${NOW} AS now FROM (SELECT * FROM ${jobs} WHERE id = $1 FOR UPDATE) l`,

    /** $1 job id, $2 attempt no. Locks that attempt (after its job: same order as leaseLock). */
    attemptLock: `SELECT * FROM ${attempts} WHERE job_id = $1 AND attempt_no = $2 FOR UPDATE`,

    // ------------------------------------------------------------ jobs

    /**
     * $1 JSON array of new jobs { id, queue, operation, input_json, request_key,
     * request_fingerprint, run_id, step_id, priority, delay_ms, run_at (ms or null), max_attempts,
     * backoff_json, timeout_ms }, $2 actor. Inserts those whose request key is new, with their
     * `enqueued` events; returns the inserted rows. Existing keys are left to the caller.
     */
    jobInsert: `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t),
inserted AS (
  INSERT INTO ${jobs} (id, queue, operation, input_json, request_key, request_fingerprint, run_id, step_id,
    state, priority, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms)
  SELECT n.id, n.queue, n.operation, n.input_json, n.request_key, n.request_fingerprint, n.run_id, n.step_id,
    'QUEUED', n.priority, coalesce(${fromMs('n.run_at')}, now.t + ${millis('n.delay_ms')}), now.t, now.t,
    n.max_attempts, n.backoff_json, n.timeout_ms
  FROM json_to_recordset($1::json) AS n(id text, queue text, operation text, input_json text,
    request_key text, request_fingerprint text, run_id text, step_id text, priority int,
    delay_ms bigint, run_at bigint, max_attempts int, backoff_json text, timeout_ms bigint), now
  ON CONFLICT (request_key) DO NOTHING
  RETURNING *
),
enqueued AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, to_state, actor, at)
  SELECT i.id, NULL, i.request_fingerprint, 'enqueued', 'QUEUED', $2, i.created_at FROM inserted i
)
SELECT * FROM inserted`,

    /** $1 request keys (text[]). */
    jobByKeys: `SELECT * FROM ${jobs} WHERE request_key = ANY($1::text[])`,

    /** $1 job id. The job with its attempts and events, read in one snapshot. */
    jobDetail: `
SELECT row_to_json(j) AS job,
  (SELECT coalesce(json_agg(a ORDER BY a.attempt_no), '[]') FROM ${attempts} a WHERE a.job_id = j.id) AS attempts,
  (SELECT coalesce(json_agg(e ORDER BY e.id), '[]') FROM ${events} e WHERE e.job_id = j.id) AS events
FROM ${jobs} j WHERE j.id = $1`,

    /** Filters appended by the store; parameters numbered by it. */
    jobListBase: `SELECT * FROM ${jobs}`,

    /**
     * $1 operations (text[]), $2 limit, $3 hold (ms). Takes UNKNOWN jobs due for a check, skipping
     * rows another reconciler holds, and moves their next check $3 ms ahead so others pass them by.
     */
    jobReconcileClaim: `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t),
due AS (
  SELECT j.id, j.next_check_at AS due_at FROM ${jobs} j
  WHERE j.state = 'UNKNOWN' AND j.next_check_at <= (SELECT t FROM now) AND j.operation = ANY($1::text[])
  ORDER BY j.next_check_at, j.id
  LIMIT $2
  FOR UPDATE SKIP LOCKED
),
held AS (
  UPDATE ${jobs} j SET next_check_at = now.t + ${millis('$3')}
  FROM due, now
  WHERE j.id = due.id AND j.state = 'UNKNOWN'
  RETURNING j.*
)
SELECT row_to_json(h) AS job, row_to_json(a) AS attempt
FROM held h
JOIN due d ON d.id = h.id
LEFT JOIN ${attempts} a ON a.job_id = h.id AND a.attempt_no = h.attempt_count
ORDER BY d.due_at, h.id`,

    /**
     * $1 job id, $2 attempt no, $3 resolution, $4 source, $5 evidence (JSON text), $6 now (ms).
     * Adds a resolution to an UNKNOWN attempt that has none.
     */
    attemptResolve: `
UPDATE ${attempts} SET resolution = $3, resolution_source = $4, resolution_evidence_json = $5,
  resolved_at = ${fromMs('$6')}
WHERE job_id = $1 AND attempt_no = $2 AND state = 'UNKNOWN' AND resolution IS NULL`,

    // ------------------------------------------------------------ attempts

    /**
     * $1 queues (text[]), $2 operations (text[]), $3 limit, $4 owner id, $5 lease (ms).
     * Takes due QUEUED jobs by priority DESC, run_at, id, skipping rows other claimers hold, and
     * gives each a new LEASED attempt with a fresh token, expiring $5 ms after now on the
     * database's clock. One statement: one round trip, all or nothing.
     */
    attemptClaim: `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t),
picked AS (
  SELECT j.id FROM ${jobs} j
  WHERE j.state = 'QUEUED' AND j.run_at <= (SELECT t FROM now)
    AND j.queue = ANY($1::text[]) AND j.operation = ANY($2::text[])
  ORDER BY j.priority DESC, j.run_at, j.id
  LIMIT $3
  FOR UPDATE SKIP LOCKED
),
leased AS (
  UPDATE ${jobs} j SET state = 'LEASED', attempt_count = j.attempt_count + 1, updated_at = now.t,
    next_check_at = NULL
  FROM picked, now
  WHERE j.id = picked.id AND j.state = 'QUEUED'
  RETURNING j.*
),
attempt AS (
  INSERT INTO ${attempts} (job_id, attempt_no, request_key, request_fingerprint, state, owner_id,
    lease_token, leased_at, lease_expires_at)
  SELECT l.id, l.attempt_count, l.request_key, l.request_fingerprint, 'LEASED', $4,
    gen_random_uuid()::text, now.t, now.t + ${millis('$5')}
  FROM leased l, now
  RETURNING *
),
leased_event AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
  SELECT l.id, l.attempt_count, l.request_fingerprint, 'leased', 'QUEUED', 'LEASED', $4,
    json_build_object('leaseMs', $5::bigint)::text, now.t
  FROM leased l, now
)
SELECT row_to_json(l) AS job, row_to_json(a) AS attempt
FROM leased l JOIN attempt a ON a.job_id = l.id
ORDER BY l.priority DESC, l.run_at, l.id`,

    /** $1 JSON array of { job_id, attempt_no, lease_token }, $2 now (ms). Sets the dispatch markers. */
    attemptDispatch: `
UPDATE ${attempts} a SET dispatched_at = ${fromMs('$2')}
FROM json_to_recordset($1::json) AS u(job_id text, attempt_no int, lease_token text)
WHERE a.job_id = u.job_id AND a.attempt_no = u.attempt_no AND a.lease_token = u.lease_token
  AND a.state = 'LEASED' AND a.dispatched_at IS NULL`,

    /**
     * $1 JSON array of { job_id, attempt_no, lease_token }, $2 lease (ms). Extends each LEASED,
     * unexpired lease to now + $2; rows are locked in job order first (no deadlock with batches
     * of the reclaimer), and the clock is read per row after its lock. Returns those extended.
     */
    attemptHeartbeat: `
WITH held AS (
  SELECT a.job_id, a.attempt_no
  FROM ${attempts} a
  JOIN json_to_recordset($1::json) AS r(job_id text, attempt_no int, lease_token text)
    ON a.job_id = r.job_id AND a.attempt_no = r.attempt_no AND a.lease_token = r.lease_token
  WHERE a.state = 'LEASED'
  ORDER BY a.job_id
  FOR UPDATE OF a
)
UPDATE ${attempts} a SET lease_expires_at = ${NOW} + ${millis('$2')}
FROM held
WHERE a.job_id = held.job_id AND a.attempt_no = held.attempt_no AND a.state = 'LEASED'
  AND a.lease_expires_at > ${NOW}
RETURNING a.job_id, a.attempt_no, a.lease_expires_at`,

    /** $1 skew (ms), $2 limit. LEASED attempts whose expiry + $1 has passed, oldest first. */
    attemptExpiredList: `
SELECT row_to_json(a) AS attempt, row_to_json(j) AS job
FROM ${attempts} a JOIN ${jobs} j ON j.id = a.job_id
WHERE a.state = 'LEASED' AND a.lease_expires_at + ${millis('$1')} < ${NOW}
ORDER BY a.lease_expires_at
LIMIT $2`,

    // ------------------------------------------------------------ stats

    /** Counts by queue and state, the oldest due QUEUED job per queue, open cases by operation. */
    stats: `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t)
SELECT (SELECT t FROM now) AS now,
  (SELECT coalesce(json_agg(c), '[]') FROM (
     SELECT queue, state, count(*)::int AS n FROM ${jobs} GROUP BY queue, state) c) AS counts,
  (SELECT coalesce(json_agg(o), '[]') FROM (
     SELECT queue, min(run_at) AS t FROM ${jobs}
     WHERE state = 'QUEUED' AND run_at <= (SELECT t FROM now) GROUP BY queue) o) AS oldest,
  (SELECT coalesce(json_agg(b), '[]') FROM (
     SELECT operation,
       count(*) FILTER (WHERE state = 'UNKNOWN')::int AS unknown,
       count(*) FILTER (WHERE state = 'NEEDS_REVIEW')::int AS needs_review
     FROM ${jobs} WHERE state IN ('UNKNOWN', 'NEEDS_REVIEW') GROUP BY operation ORDER BY operation) b) AS by_operation,
  (SELECT count(*)::int FROM ${attempts}
     WHERE state = 'LEASED' AND lease_expires_at <= (SELECT t FROM now)) AS expired`,
  };
}
