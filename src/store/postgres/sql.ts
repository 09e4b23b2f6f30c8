/**
 * The PostgreSQL store's statements, one per store step, each with a header naming its
 * parameters. Table names are qualified with reckon's schema, because some statements run on a
 * caller's connection (transactional enqueue) whose search_path is the caller's.
 *
 * Times: the database's clock (`clock_timestamp()`, not the transaction's `now()`), truncated to
 * milliseconds so that a time read back as a JS number is exactly what was stored. Times passed
 * in are epoch milliseconds (`bigint`), converted exactly by `fromMs`; the hot paths also send
 * times back as epoch milliseconds (`toMs`), which the driver reads as plain numbers. Batches
 * travel as one JSON array parameter unpacked by `json_to_recordset`, or, on the worker's hot
 * paths and the enqueue, as one array per column unpacked by `unnest`.
 *
 * The worker's hot writes (claim, dispatch marker, outcome) and the common enqueue are each ONE
 * statement: a data-modifying CTE that locks, judges the fence, writes and appends its events.
 * A single statement is its own transaction, atomic and durable when it returns (with
 * synchronous_commit on), so it needs no BEGIN/COMMIT round trips. A check that fails inside
 * such a statement aborts it whole (see `fail`), exactly as a thrown assert rolled back the
 * multi-statement transaction it replaces.
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

/** A timestamptz expression as epoch milliseconds (exact: times are whole milliseconds). */
function toMs(t: string): string {
  return `(extract(epoch FROM ${t}) * 1000)::float8`;
}

/**
 * Marks the message of an error raised by `fail`: the statement was aborted on purpose by a
 * check, and rolled back whole. The store reads what follows it (up to the closing quote).
 */
export const FAIL_MARK = 'reckon-fail:';

/**
 * An expression that aborts the statement, rolling back all of its writes, with `FAIL_MARK` and
 * the text of `message` in the error (SQLSTATE 22P02, "invalid input syntax for type integer").
 * Used inside CASE, so it is evaluated only when its condition holds; `message` must refer to a
 * column, so that the planner never folds it as a constant (which would fail every statement).
 */
function fail(message: string): string {
  return `(('${FAIL_MARK}' || (${message}))::int)`;
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

/** Every column of a jobs row (as `JobRow` names it) from `alias`, times as epoch ms. */
function jobColumns(alias: string): string {
  const a = alias;
  return [
    `${a}.id, ${a}.queue, ${a}.operation, ${a}.input_json, ${a}.request_key, ${a}.request_fingerprint`,
    `${a}.run_id, ${a}.step_id, ${a}.state, ${a}.priority`,
    `${toMs(`${a}.run_at`)} AS run_at, ${toMs(`${a}.created_at`)} AS created_at`,
    `${toMs(`${a}.updated_at`)} AS updated_at, ${toMs(`${a}.finished_at`)} AS finished_at`,
    `${a}.attempt_count, ${a}.max_attempts, ${a}.backoff_json, ${a}.timeout_ms`,
    `${toMs(`${a}.next_check_at`)} AS next_check_at, ${a}.lookup_failures, ${a}.result_json, ${a}.error_json`,
    `${a}.approval_reason, ${toMs(`${a}.approval_expires_at`)} AS approval_expires_at`,
  ].join(',\n  ');
}

/**
 * The hot paths' lock step, as CTEs `locked` and `now`: locks the job and the attempt of every
 * `input` row (columns job_id, attempt_no) in job id order, so that concurrent batches never wait
 * on each other in a cycle (the same order as every other fenced write). `now` is the clock once
 * every lock is held: it is read above the lock for each row, and the latest one is kept.
 *
 * The writes that follow find the locked rows by primary key, and test only what the lock step
 * did not already judge on rows nobody else can change while this statement holds them: a
 * `state = 'LEASED'` test on attempts let the planner read every LEASED attempt along the
 * partial indexes instead (attempts_expiry, attempts_one_lease), in a nested loop with the batch.
 */
function lockedLeases(jobs: string, attempts: string): string {
  return `
locked AS MATERIALIZED (
  SELECT l.*, ${NOW} AS t
  FROM (
    SELECT j.id, j.queue, j.state AS job_state, j.attempt_count, j.request_fingerprint,
      a.attempt_no, a.state, a.lease_token, a.lease_expires_at, a.dispatched_at, a.owner_id
    FROM ${jobs} j JOIN ${attempts} a ON a.job_id = j.id
    -- By primary key whatever the plan (a merge join walked attempts_pkey across other leases).
    WHERE a.job_id = ANY (ARRAY(SELECT i.job_id FROM input i))
      AND (a.job_id, a.attempt_no) IN (SELECT i.job_id, i.attempt_no FROM input i)
    ORDER BY j.id
    FOR UPDATE OF j, a
  ) l
),
now AS MATERIALIZED (SELECT coalesce(max(locked.t), ${NOW}) AS t FROM locked)`;
}

/**
 * SQL for rules.ts's `leaseHolds` on an `input` row `i` and its `locked` row `l` (absent when
 * the job or attempt does not exist), and for "first of its kind in the batch": a later
 * duplicate of a lease must see what the first one did.
 */
const LEASE_HOLDS = `coalesce(l.state = 'LEASED' AND l.lease_token = i.lease_token
      AND l.job_state = 'LEASED' AND l.attempt_count = i.attempt_no, false)`;
const FIRST_OF_LEASE = `i.ord = min(i.ord) OVER (PARTITION BY i.job_id, i.attempt_no, i.lease_token)`;

/**
 * Claims of at most this many jobs, or of a power of two up to CLAIM_LIMIT_INLINE_TOP, write
 * their limit into the statement, one prepared statement per limit. With `LIMIT $n` the planner
 * has to guess the limit (a tenth of the rows it expects), so the generic plan looks thousands of
 * times dearer than a custom one, and PostgreSQL planned the claim anew on every call: about
 * 0.25 ms, a fifth of a one-job claim. With the limit written in, the generic plan costs what a
 * custom one does and is kept after the fifth call. The powers of two cover a busy worker's
 * claims, which ask for a full batch (`claimBatchMax`, 32 by default) each time. Other claims
 * share one statement (limit $5) planned per call, a cost their rows share; the bound keeps the
 * plans each connection caches few (each about 0.3 MB of server memory).
 */
const CLAIM_LIMIT_INLINE_MAX = 8;
const CLAIM_LIMIT_INLINE_TOP = 1_024;

/** Whether a claim of `limit` jobs has a prepared statement of its own (see above). */
export function claimLimitInline(limit: number): boolean {
  return (
    Number.isSafeInteger(limit) &&
    limit >= 1 &&
    (limit <= CLAIM_LIMIT_INLINE_MAX ||
      (limit <= CLAIM_LIMIT_INLINE_TOP && (limit & (limit - 1)) === 0))
  );
}

/**
 * The columns of a new job that the jobs of one batch often share (one operation, one queue, one
 * retry policy …), each a pair of parameters (a scalar and an array, see `newJobs`), after the
 * four that are always arrays: $1 id, $2 request_key, $3 request_fingerprint, $4 input_json.
 * Times in epoch ms; a null run_at means delay_ms after now.
 */
export const NEW_JOB_SHARED = [
  ['queue', 'text'],
  ['operation', 'text'],
  ['run_id', 'text'],
  ['step_id', 'text'],
  ['priority', 'int'],
  ['delay_ms', 'bigint'],
  ['run_at', 'bigint'],
  ['max_attempts', 'int'],
  ['backoff_json', 'text'],
  ['timeout_ms', 'bigint'],
  // AWAITING_APPROVAL when true, expiring approval_expires_ms after now (null: never)
  ['approval', 'boolean'],
  ['approval_reason', 'text'],
  ['approval_expires_ms', 'bigint'],
] as const;

/** A new job's state (`n` a row of `input`). */
const QUEUED_OR_AWAITING = `CASE WHEN n.approval THEN 'AWAITING_APPROVAL' ELSE 'QUEUED' END`;

/** The `enqueued` event's detail of a new job awaiting approval (`n` of `input`, with `now`). */
const APPROVAL_DETAIL = `CASE WHEN n.approval THEN json_build_object('approval', json_build_object(
  'reason', n.approval_reason,
  'expiresAt', (extract(epoch FROM now.t) * 1000)::bigint + n.approval_expires_ms))::text END`;

/** How many parameters the new jobs take in `jobInsert` and `jobInsertAllNew`. */
export const NEW_JOB_PARAM_COUNT = 4 + 2 * NEW_JOB_SHARED.length;

export type Statements = ReturnType<typeof statements>;

export function statements(schema: string) {
  const s = quoteIdent(schema);
  const jobs = `${s}.jobs`;
  const attempts = `${s}.attempts`;
  const events = `${s}.events`;
  /**
   * CTEs `now` and `input` (the new jobs, one row per index of the id array): the parameters
   * `jobInsert` and `jobInsertAllNew` share (see `NEW_JOB_SHARED`), after which the next parameter
   * is the actor. A column that every job of the batch shares travels once, as a scalar (its
   * array empty); otherwise the scalar is null and the array holds one value per job. Each
   * column of `input` is therefore coalesce(scalar, array element): unnest pads an empty array
   * with nulls.
   */
  const newJobs = `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t),
input AS (
  SELECT u.id, u.request_key, u.request_fingerprint, u.input_json,
    ${NEW_JOB_SHARED.map(([name, type], k) => `coalesce($${5 + 2 * k}::${type}, u.${name}) AS ${name}`).join(',\n    ')}
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],
    ${NEW_JOB_SHARED.map(([, type], k) => `$${6 + 2 * k}::${type}[]`).join(', ')})
    AS u(id, request_key, request_fingerprint, input_json,
      ${NEW_JOB_SHARED.map(([name]) => name).join(', ')})
)`;
  /**
   * The INSERT of `input` (as `n`, with `now`) into jobs, in `state` with `attemptCount`, both SQL
   * expressions over `from`; an ON CONFLICT clause or RETURNING … may follow it.
   */
  const insertJobsAs = (state: string, attemptCount: string, from: string) => `
  INSERT INTO ${jobs} (id, queue, operation, input_json, request_key, request_fingerprint, run_id, step_id,
    state, priority, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms,
    attempt_count, approval_reason, approval_expires_at)
  SELECT n.id, n.queue, n.operation, n.input_json, n.request_key, n.request_fingerprint, n.run_id, n.step_id,
    ${state}, n.priority, coalesce(${fromMs('n.run_at')}, now.t + ${millis('n.delay_ms')}), now.t, now.t,
    n.max_attempts, n.backoff_json, n.timeout_ms, ${attemptCount},
    n.approval_reason, now.t + ${millis('n.approval_expires_ms')}
  FROM ${from}`;
  const insertJobs = insertJobsAs(QUEUED_OR_AWAITING, '0', 'input n, now');
  const actor = `$${NEW_JOB_PARAM_COUNT + 1}`;
  /** The claim statement around its `picked` CTE (the due jobs to lease, locked). */
  // The claim commits without waiting for its WAL flush (`synchronous_commit` off for its own
  // transaction only): nothing acts on a claim but its dispatch marker, a synchronous commit
  // after it, and WAL is flushed in order, so the marker is never durable without its claim. A
  // claim lost to a server crash was acted on by nobody: its job is simply QUEUED again.
  const claim = (picked: string) => `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t, set_config('synchronous_commit', 'off', true) AS async),${picked},
leased AS (
  UPDATE ${jobs} j SET state = 'LEASED', attempt_count = j.attempt_count + 1, updated_at = now.t,
    next_check_at = NULL
  FROM now
  -- By primary key whatever the plan: a generic plan must not guess picked is big and scan jobs.
  -- No state test: picked locked these rows as QUEUED (rechecked on their latest version), so
  -- they still are; with one, the planner could match the claim index's predicate and walk every
  -- waiting job filtering by id (seen with stale statistics: 20 ms a claim at 10,000 waiting).
  WHERE j.id = ANY (ARRAY(SELECT picked.id FROM picked))
  -- The new attempt's token and times, made here so that the answer needs no join of the job
  -- with its attempt (planned as a nested loop on the CTEs' guessed sizes: quadratic).
  RETURNING j.*, gen_random_uuid()::text AS a_lease_token, now.t AS a_leased_at,
    now.t + ${millis('$4')} AS a_lease_expires_at
),
attempt AS (
  INSERT INTO ${attempts} (job_id, attempt_no, request_key, request_fingerprint, state, owner_id,
    lease_token, leased_at, lease_expires_at)
  SELECT l.id, l.attempt_count, l.request_key, l.request_fingerprint, 'LEASED', $3,
    l.a_lease_token, l.a_leased_at, l.a_lease_expires_at
  FROM leased l
),
leased_event AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
  SELECT l.id, l.attempt_count, l.request_fingerprint, 'leased', 'QUEUED', 'LEASED', $3,
    json_build_object('leaseMs', $4::bigint)::text, now.t
  FROM leased l, now
)
SELECT ${jobColumns('l')},
  l.a_lease_token, ${toMs('l.a_leased_at')} AS a_leased_at,
  ${toMs('l.a_lease_expires_at')} AS a_lease_expires_at
FROM leased l
ORDER BY l.priority DESC, l.run_at, l.id`;
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
     * The new jobs (`NEW_JOB_SHARED`), then the actor and the channel. Inserts those whose request
     * key is new, with their `enqueued` events, and wakes their queues (at commit). Existing keys
     * are left to the caller, who must not name a key twice in one call. Returns one row: now
     * (epoch ms, the jobs' created_at) and the ids inserted.
     */
    jobInsert: `${newJobs},
inserted AS (${insertJobs}
  ON CONFLICT (request_key) DO NOTHING
  RETURNING id, queue, request_fingerprint, state
),
enqueued AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, to_state, actor, detail_json, at)
  SELECT i.id, NULL, i.request_fingerprint, 'enqueued', i.state, ${actor}, ${APPROVAL_DETAIL}, now.t
  FROM inserted i JOIN input n ON n.id = i.id, now
)
SELECT ${toMs('now.t')} AS now, ARRAY(SELECT i.id FROM inserted i) AS ids,
  (SELECT count(pg_notify($${NEW_JOB_PARAM_COUNT + 2}::text, q.queue))
     FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'QUEUED') q) AS woken
FROM now`,

    /**
     * The common enqueue in ONE statement, every request key new: the jobs (`NEW_JOB_SHARED`),
     * their `enqueued` events (actor next), and the wake-ups of the queues that follow ($+2 as
     * text[], $+3 the channel). A plain insert: a request key that exists (or that the batch
     * names twice) aborts it with a unique violation of `jobs_request_key_key` and nothing is
     * written; the caller then runs `jobInsert` and the dedup judgement in a transaction. (ON
     * CONFLICT would cost a speculative insertion per row, for the rare case.) Nothing is read
     * back: the store knows every value but the clock. Returns one row: now (epoch ms).
     */
    jobInsertAllNew: `${newJobs},
inserted AS (${insertJobs}
),
enqueued AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, to_state, actor, detail_json, at)
  SELECT n.id, NULL, n.request_fingerprint, 'enqueued', ${QUEUED_OR_AWAITING}, ${actor},
    ${APPROVAL_DETAIL}, now.t
  FROM input n, now
)
SELECT ${toMs('now.t')} AS now,
  (SELECT count(pg_notify($${NEW_JOB_PARAM_COUNT + 3}::text, q))
     FROM unnest($${NEW_JOB_PARAM_COUNT + 2}::text[]) AS q) AS woken
FROM now`,

    /**
     * `jobInsertAllNew` that also hands some of the new jobs straight to idle workers of this
     * process: the enqueue and the claim in one durable commit, one round trip fewer before the
     * job starts. After the actor: $+2 the channel, then the offers, one per index: $+3 job id
     * (text[]), $+4 owner (text[]), $+5 lease ms (bigint[]), $+6 lease token (text[], made by the
     * caller, as the SQLite store makes them). An offered job is leased (attempt 1,
     * its `leased` event after its `enqueued` one) only when it is due now and no due QUEUED job
     * of its queue, in the store or unoffered in this batch, ranks at least as high (priority):
     * a hand-off never overtakes a job the claim would take first. The other jobs are inserted
     * QUEUED and their queues notified. Returns one row: now (epoch ms) and the handed jobs' ids; a
     * handed lease expires at now + its lease ms.
     */
    jobInsertHandOff: `${newJobs},
offer AS MATERIALIZED (
  SELECT o.job_id, o.owner_id, o.lease_ms, o.lease_token
  FROM unnest($${NEW_JOB_PARAM_COUNT + 3}::text[], $${NEW_JOB_PARAM_COUNT + 4}::text[],
    $${NEW_JOB_PARAM_COUNT + 5}::bigint[], $${NEW_JOB_PARAM_COUNT + 6}::text[])
    AS o(job_id, owner_id, lease_ms, lease_token)
),
due AS MATERIALIZED (
  SELECT n.id, n.queue, n.priority, o.owner_id, o.lease_ms, o.lease_token,
    coalesce(${fromMs('n.run_at')}, now.t + ${millis('n.delay_ms')}) <= now.t AS due_now
  FROM input n CROSS JOIN now LEFT JOIN offer o ON o.job_id = n.id
),
handed AS MATERIALIZED (
  SELECT d.id, d.owner_id, d.lease_token,
    now.t + ${millis('d.lease_ms')} AS lease_expires_at
  FROM due d CROSS JOIN now
  WHERE d.owner_id IS NOT NULL AND d.due_now
    AND NOT EXISTS (
      SELECT 1 FROM ${jobs} j
      WHERE j.state = 'QUEUED' AND j.queue = d.queue AND j.run_at <= now.t
        AND j.priority >= d.priority)
    AND NOT EXISTS (
      SELECT 1 FROM due u
      WHERE u.owner_id IS NULL AND u.due_now AND u.queue = d.queue AND u.priority >= d.priority)
),
inserted AS (${insertJobsAs(
      `CASE WHEN h.id IS NULL THEN ${QUEUED_OR_AWAITING} ELSE 'LEASED' END`,
      'CASE WHEN h.id IS NULL THEN 0 ELSE 1 END',
      'input n CROSS JOIN now LEFT JOIN handed h ON h.id = n.id',
    )}
),
attempt AS (
  INSERT INTO ${attempts} (job_id, attempt_no, request_key, request_fingerprint, state, owner_id,
    lease_token, leased_at, lease_expires_at)
  SELECT n.id, 1, n.request_key, n.request_fingerprint, 'LEASED', h.owner_id, h.lease_token,
    now.t, h.lease_expires_at
  FROM handed h JOIN input n ON n.id = h.id CROSS JOIN now
),
logged AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
  SELECT e.job_id, e.attempt_no, e.request_fingerprint, e.kind, e.from_state, e.to_state, e.actor,
    e.detail_json, now.t
  FROM (
    SELECT n.id AS job_id, NULL::int AS attempt_no, n.request_fingerprint, 'enqueued' AS kind,
      NULL AS from_state, ${QUEUED_OR_AWAITING} AS to_state, ${actor} AS actor,
      ${APPROVAL_DETAIL} AS detail_json, 0 AS step
    FROM input n CROSS JOIN now
    UNION ALL
    SELECT n.id, 1, n.request_fingerprint, 'leased', 'QUEUED', 'LEASED', h.owner_id,
      json_build_object('leaseMs', d.lease_ms)::text, 1
    FROM handed h JOIN input n ON n.id = h.id JOIN due d ON d.id = h.id
  ) e CROSS JOIN now
  ORDER BY e.job_id, e.step
)
SELECT ${toMs('now.t')} AS now,
  ARRAY(SELECT h.id FROM handed h) AS handed_ids,
  (SELECT count(pg_notify($${NEW_JOB_PARAM_COUNT + 2}::text, q.queue))
     FROM (SELECT DISTINCT n.queue FROM input n WHERE n.id NOT IN (SELECT id FROM handed)) q) AS woken
FROM now`,

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
     * $1 queue (text), $2 operations (text[]), $3 owner id, $4 lease (ms); `limit` is the SQL of
     * the limit: a literal (up to CLAIM_LIMIT_INLINE_MAX) or $5.
     * Takes due QUEUED jobs by priority DESC, run_at, id, skipping rows other claimers hold, and
     * gives each a new LEASED attempt with a fresh token, expiring $4 ms after now on the
     * database's clock. One statement: one round trip, all or nothing. The queue is read along
     * the `jobs_claim` index in claim order, so a claim reads about `limit` rows however many
     * wait. Returns the job (times as epoch ms) and its new attempt's columns (prefixed `a_`).
     */
    attemptClaim: (limit: string) =>
      claim(`
picked AS MATERIALIZED (
  SELECT j.id FROM ${jobs} j
  WHERE j.state = 'QUEUED' AND j.queue = $1::text AND j.run_at <= (SELECT t FROM now)
    AND j.operation = ANY($2::text[])
  ORDER BY j.priority DESC, j.run_at, j.id
  LIMIT ${limit}
  FOR UPDATE SKIP LOCKED
)`),

    /**
     * `attemptClaim` over several queues: $1 queues (text[]). Each queue is read on its own along
     * the index, then the best `limit` of them are taken (rows locked beyond those are released
     * at once, unchanged).
     */
    attemptClaimQueues: (limit: string) =>
      claim(`
picked AS MATERIALIZED (
  SELECT c.id, c.priority, c.run_at
  FROM (SELECT DISTINCT q FROM unnest($1::text[]) AS q) qs
  CROSS JOIN LATERAL (
    SELECT j.id, j.priority, j.run_at FROM ${jobs} j
    WHERE j.state = 'QUEUED' AND j.queue = qs.q AND j.run_at <= (SELECT t FROM now)
      AND j.operation = ANY($2::text[])
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT ${limit}
    FOR UPDATE SKIP LOCKED
  ) c
  ORDER BY c.priority DESC, c.run_at, c.id
  LIMIT ${limit}
)`),

    /**
     * Invariant 3 in ONE statement. $1 job ids (text[]), $2 attempt nos (int[]), $3 lease tokens
     * (text[]), one lease per index. Locks every lease's job and attempt (`lockedLeases`), judges
     * each on the locked rows and the clock after the locks (rules.ts `leaseHolds`, then the
     * lease unexpired), sets `dispatched_at` of those that pass, fenced again on token, state and
     * expiry, and appends their `dispatched` events. Returns one row per lease, in order: status
     * ok | lease-lost | lease-expired, the lease's expiry and now (epoch ms). A held, unexpired
     * lease that is already marked (or named twice) aborts the statement, naming the first such
     * lease: dispatched twice is a bug.
     */
    attemptDispatch: `
WITH input AS MATERIALIZED (
  SELECT * FROM unnest($1::text[], $2::int[], $3::text[]) WITH ORDINALITY
    AS i(job_id, attempt_no, lease_token, ord)
),
${lockedLeases(jobs, attempts)},
judged AS MATERIALIZED (
  SELECT i.ord, i.job_id, i.attempt_no, i.lease_token, l.request_fingerprint, l.owner_id,
    l.lease_expires_at,
    CASE
      WHEN NOT ${LEASE_HOLDS} THEN 'lease-lost'
      WHEN l.lease_expires_at <= now.t THEN 'lease-expired'
      WHEN l.dispatched_at IS NOT NULL OR NOT ${FIRST_OF_LEASE} THEN 'twice'
      ELSE 'ok'
    END AS status
  FROM input i CROSS JOIN now
  LEFT JOIN locked l ON l.id = i.job_id AND l.attempt_no = i.attempt_no
),
first_bad AS MATERIALIZED (SELECT min(ord) AS ord FROM judged WHERE status = 'twice'),
marked AS (
  UPDATE ${attempts} a SET dispatched_at = now.t
  FROM judged g, now
  -- Judged LEASED on the locked row: no state test here (see lockedLeases).
  WHERE g.status = 'ok' AND a.job_id = g.job_id AND a.attempt_no = g.attempt_no
    AND a.lease_token = g.lease_token AND a.dispatched_at IS NULL
    AND a.lease_expires_at > now.t
  RETURNING a.job_id
),
dispatched_event AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, actor, at)
  SELECT g.job_id, g.attempt_no, g.request_fingerprint, 'dispatched', g.owner_id, now.t
  FROM judged g, now
  WHERE g.status = 'ok'
  ORDER BY g.ord
)
SELECT g.status, ${toMs('g.lease_expires_at')} AS lease_expires_at, ${toMs('now.t')} AS now,
  CASE
    WHEN g.ord = f.ord
      THEN ${fail(`'job ' || g.job_id || ' attempt ' || g.attempt_no || ' dispatched twice'`)}
    WHEN g.ord = 1 AND f.ord IS NULL
        AND (SELECT count(*) FROM marked) <> (SELECT count(*) FROM judged WHERE status = 'ok')
      THEN ${fail(`'not every held lease took its dispatch marker (batch of job ' || g.job_id || ')'`)}
  END AS violated
FROM judged g CROSS JOIN now CROSS JOIN first_bad f
ORDER BY g.ord`,

    /**
     * Outcomes in ONE statement. One finish per index of the arrays: $1 job id, $2 attempt no,
     * $3 lease token, $4 attempt state, $5 reason, $6 attempt result_json, $7 attempt error_json,
     * $8 job's next state, $9 QUEUED: run delay (ms), $10 UNKNOWN: next check this long after
     * the marker (ms), $11 job result_json, $12 job error_json (each null = keep the column),
     * $13 event kind, $14 actor, $15 event detail_json, $16 / $17: the outcome breaks an
     * invariant if the attempt has no marker / has one (rules.ts `assertFinishLegal`, judged by
     * the store beforehand for both cases); $18 the channel.
     * Locks like `attemptDispatch`; a finish applies when its lease holds (rules.ts `leaseHolds`)
     * and it is the first of that lease in the batch. Ends those attempts, moves their jobs
     * (as the transaction path's `finishAttempt` does), appends their events and wakes the
     * queues of requeued jobs. Returns `applied` per finish, in order, and `requeued`: the queue
     * of a job it put back in line (else null). A finish that applies but breaks an invariant
     * aborts the statement (`fail`: "finish <index> marked|unmarked", the first such finish),
     * and is never written even for a moment, so no constraint fires first.
     */
    attemptFinish: `
WITH input AS MATERIALIZED (
  SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[],
      $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::text[], $13::text[],
      $14::text[], $15::text[], $16::bool[], $17::bool[]) WITH ORDINALITY
    AS i(job_id, attempt_no, lease_token, state, reason, result_json, error_json, job_to,
      run_delay_ms, check_after_ms, job_result_json, job_error_json, kind, actor, detail_json,
      bad_unmarked, bad_marked, ord)
),
${lockedLeases(jobs, attempts)},
held AS MATERIALIZED (
  SELECT i.*, l.request_fingerprint, l.queue, l.dispatched_at,
    ${LEASE_HOLDS} AND ${FIRST_OF_LEASE} AS applies
  FROM input i
  LEFT JOIN locked l ON l.id = i.job_id AND l.attempt_no = i.attempt_no
),
judged AS MATERIALIZED (
  SELECT h.*,
    h.applies AND CASE WHEN h.dispatched_at IS NULL THEN h.bad_unmarked ELSE h.bad_marked END AS bad
  FROM held h
),
first_bad AS MATERIALIZED (SELECT min(ord) AS ord FROM judged WHERE bad),
ended AS (
  UPDATE ${attempts} a SET state = g.state, finished_at = now.t, result_json = g.result_json,
    error_json = g.error_json, reason = g.reason
  FROM judged g, now
  -- Judged LEASED on the locked row: no state test here (see lockedLeases).
  WHERE g.applies AND NOT g.bad AND a.job_id = g.job_id AND a.attempt_no = g.attempt_no
    AND a.lease_token = g.lease_token
  RETURNING a.job_id
),
moved AS (
  UPDATE ${jobs} j SET
    state = g.job_to,
    updated_at = now.t,
    run_at = CASE WHEN g.run_delay_ms IS NULL THEN j.run_at ELSE now.t + ${millis('g.run_delay_ms')} END,
    next_check_at = CASE WHEN g.check_after_ms IS NULL THEN NULL
      ELSE coalesce(g.dispatched_at, now.t) + ${millis('g.check_after_ms')} END,
    lookup_failures = CASE WHEN g.job_to = 'UNKNOWN' THEN 0 ELSE j.lookup_failures END,
    result_json = coalesce(g.job_result_json, j.result_json),
    error_json = coalesce(g.job_error_json, j.error_json),
    finished_at = CASE WHEN g.job_to IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN now.t END
  FROM judged g, now
  WHERE g.applies AND NOT g.bad AND j.id = g.job_id AND j.state = 'LEASED' AND j.attempt_count = g.attempt_no
  RETURNING j.id
),
finished_event AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
  SELECT g.job_id, g.attempt_no, g.request_fingerprint, g.kind, 'LEASED', g.job_to, g.actor,
    g.detail_json, now.t
  FROM judged g, now
  WHERE g.applies AND NOT g.bad
  ORDER BY g.ord
)
SELECT g.applies AS applied,
  CASE WHEN g.applies AND g.job_to = 'QUEUED' THEN g.queue END AS requeued,
  CASE
    WHEN g.ord = f.ord
      THEN ${fail(`'finish ' || g.ord || CASE WHEN g.dispatched_at IS NULL THEN ' unmarked' ELSE ' marked' END`)}
    WHEN g.ord = 1 AND f.ord IS NULL
        AND ((SELECT count(*) FROM ended) <> (SELECT count(*) FROM judged WHERE applies)
          OR (SELECT count(*) FROM moved) <> (SELECT count(*) FROM judged WHERE applies))
      THEN ${fail(`'not every held lease took its outcome (batch of job ' || g.job_id || ')'`)}
  END AS violated,
  (SELECT count(pg_notify($18::text, q.queue))
     FROM (SELECT DISTINCT queue FROM judged WHERE applies AND job_to = 'QUEUED') q) AS woken
FROM judged g CROSS JOIN first_bad f
ORDER BY g.ord`,

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
  -- By key whatever the plan (not along attempts_expiry, whose dead entries pile up).
  WHERE a.state = 'LEASED'
    AND a.job_id = ANY (ARRAY(SELECT k.job_id FROM json_to_recordset($1::json) AS k(job_id text)))
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
