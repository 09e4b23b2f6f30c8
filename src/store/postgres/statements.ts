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
import { NOW, fromMs, millis, quoteIdent, toMs, type Tables } from './sql-parts.js';
import { handOffStatements, insertStatements } from './statements-insert.js';
import { claimStatements, dispatchStatements, finishStatements } from './statements-hot.js';
import { flowStatements } from './statements-flow.js';

export {
  FAIL_MARK,
  NEW_JOB_PARAM_COUNT,
  NEW_JOB_SHARED,
  NOW,
  SCHEMA_NAME_RE,
  claimLimitInline,
  quoteIdent,
  workChannel,
} from './sql-parts.js';

export type Statements = ReturnType<typeof statements>;

/** Every statement of the store on `schema`, by name: the groups below and in the group files. */
export function statements(schema: string) {
  const s = quoteIdent(schema);
  const t: Tables = { s, jobs: `${s}.jobs`, attempts: `${s}.attempts`, events: `${s}.events` };
  return {
    ...lifecycleStatements(t),
    ...writeStatements(t),
    ...decisionStatements(t),
    ...insertStatements(t),
    ...handOffStatements(t),
    ...readStatements(t),
    ...consoleStatements(t),
    ...claimStatements(t),
    ...dispatchStatements(t),
    ...finishStatements(t),
    ...flowStatements(t),
  };
}

/** Migrations, the clock, event appends. */
export function lifecycleStatements(t: Tables) {
  const { s, jobs, events } = t;
  return {
    // ------------------------------------------------------------ lifecycle

    /** $1 lock namespace (int), $2 schema name. Serializes migrations of one schema across processes. */
    migrationLock: `SELECT pg_advisory_xact_lock($1::int, hashtext($2::text))`,

    /**
     * $1 schema name, $2 rows. True when the jobs table has no planner statistics yet and at
     * least $2 rows (counted no further): see `analyzeIfNeeded`. The count runs only when the
     * statistics are missing.
     */
    jobsStatisticsMissing: `SELECT CASE
        WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_stats WHERE schemaname = $1 AND tablename = 'jobs')
          THEN false
        ELSE (SELECT count(*) FROM (SELECT 1 FROM ${jobs} LIMIT $2) w) >= $2
      END AS missing`,

    analyzeJobs: `ANALYZE ${jobs}`,

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
     * Appends each event of an existing job (skipping unknown jobs) at the database's now, in
     * array order. KEY SHARE on the job: a prune deleting it (FOR UPDATE, retention.ts) either
     * skips it or goes first, and then this finds no job: never an event of a deleted job.
     */
    eventAppend: `
INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
SELECT x.job_id, x.attempt_no, j.request_fingerprint, x.kind, x.from_state, x.to_state, x.actor, x.detail_json, ${NOW}
FROM ROWS FROM (json_to_recordset($1::json) AS (job_id text, attempt_no int, kind text,
    from_state text, to_state text, actor text, detail_json text))
  WITH ORDINALITY AS x(job_id, attempt_no, kind, from_state, to_state, actor, detail_json, ord)
JOIN ${jobs} j ON j.id = x.job_id
ORDER BY x.ord
FOR KEY SHARE OF j`,
  };
}

/** The cold paths' shared writes (gathered job moves and attempt ends), locks, resolutions. */
export function writeStatements(t: Tables) {
  const { jobs, attempts } = t;
  return {
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
     * error_json, reason, ended_job }. Ends LEASED attempts, each fenced on its token; ended_job
     * records a routine end (invariant 8, plan/finish.ts `FinishParams.routine`).
     */
    attemptEnd: `
UPDATE ${attempts} a SET
  state = u.state,
  finished_at = ${fromMs('u.finished_at')},
  result_json = u.result_json,
  error_json = u.error_json,
  reason = u.reason,
  ended_job = u.ended_job
FROM json_to_recordset($1::json) AS u(job_id text, attempt_no int, lease_token text, state text,
  finished_at bigint, result_json text, error_json text, reason text, ended_job text)
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

    /**
     * $1 job id, $2 attempt no, $3 resolution, $4 source, $5 evidence (JSON text), $6 now (ms).
     * Adds a resolution to an UNKNOWN attempt that has none.
     */
    attemptResolve: `
UPDATE ${attempts} SET resolution = $3, resolution_source = $4, resolution_evidence_json = $5,
  resolved_at = ${fromMs('$6')}
WHERE job_id = $1 AND attempt_no = $2 AND state = 'UNKNOWN' AND resolution IS NULL`,
  };
}

/** What the approval moves and the proof rule (plan/approval.ts, plan/proof.ts) lock and read. */
export function decisionStatements(t: Tables) {
  const { jobs, attempts } = t;
  return {
    /** $1 job ids. Every move out of AWAITING_APPROVAL clears the expiry (plan/approval.ts). */
    approvalClear: `UPDATE ${jobs} SET approval_expires_at = NULL WHERE id = ANY($1::text[])`,

    /**
     * $1 limit. Locks AWAITING_APPROVAL jobs whose approval expired, skipping jobs another
     * process holds; `now` is read before the scan.
     */
    approvalDueLock: `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t)
SELECT j.*, now.t AS now FROM ${jobs} j, now
WHERE j.state = 'AWAITING_APPROVAL' AND j.approval_expires_at <= now.t
ORDER BY j.approval_expires_at
LIMIT $1
FOR UPDATE OF j SKIP LOCKED`,

    /** $1 job id. What plan/proof.ts reads of the job's attempts (the job is locked). */
    attemptFacts: `SELECT attempt_no, state, resolution, resolution_source, error_json
FROM ${attempts} WHERE job_id = $1 ORDER BY attempt_no`,
  };
}

/** Reads: a job in full, listings, reconcile claims, expired leases, stats. */
export function readStatements(t: Tables) {
  const { jobs, attempts, events } = t;
  return {
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
     * $1 skew (ms), $2 limit. LEASED attempts whose expiry + $1 has passed, in the order of their
     * first expiry (`LEASE_CHECK`). Walks `jobs_lease_check` in order from the oldest, judging
     * each job by its attempt, until $2 are found: an index scan, which marks the entries of
     * jobs no longer LEASED dead as it passes them (a bitmap scan left them to be read again on
     * every pass until a vacuum).
     */
    attemptExpiredList: `
WITH horizon AS MATERIALIZED (SELECT ${NOW} - ${millis('$1')} AS t)
SELECT row_to_json(a) AS attempt, row_to_json(l) AS job
FROM ${jobs} l JOIN ${attempts} a ON a.job_id = l.id
WHERE l.state = 'LEASED' AND ${LEASE_CHECK} < (SELECT t FROM horizon)
  AND a.state = 'LEASED' AND a.lease_expires_at < (SELECT t FROM horizon)
ORDER BY ${LEASE_CHECK}
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
  (SELECT count(*)::int FROM ${jobs} l JOIN ${attempts} a ON a.job_id = l.id
     WHERE l.state = 'LEASED' AND ${LEASE_CHECK} <= (SELECT t FROM now)
       AND a.state = 'LEASED' AND a.lease_expires_at <= (SELECT t FROM now)) AS expired`,
  };
}

/**
 * When a LEASED job `l`'s lease may first have ended: its next_check_at (migration 15), set by
 * the claim to the lease's first expiry, which no heartbeat brings forward (each extends the
 * lease by the lease it was claimed with); NULL, the oldest possible, for a job leased by a
 * process of an older version. The expression of `jobs_lease_check`, written as it is there.
 */
const LEASE_CHECK = `coalesce(l.next_check_at, '-infinity'::timestamptz)`;

/** The console's reads (reads.ts `jobSearch`, `statsActivityGet`). */
function consoleStatements(t: Tables) {
  const { jobs } = t;
  return {
    /** $1 a job id or request key: the job with that id, or with that key (their unique indexes). */
    jobSearchExact: `SELECT * FROM ${jobs} WHERE id = $1 UNION SELECT * FROM ${jobs} WHERE request_key = $1`,

    /** Filters appended by the store: the ids of a search's window (the primary key's index only). */
    jobIdWindowBase: `SELECT id FROM ${jobs}`,

    /**
     * $1 the buckets' whole span (ms), $2 one bucket (ms), $3 the growth window (ms), $4 how many
     * buckets, $5 the most ended jobs a bucket reads. Each bucket's latest ended jobs by state
     * (the finished index), and UNKNOWN / NEEDS_REVIEW now and entered within $3 (their partial
     * indexes). Times leave as epoch ms.
     */
    statsActivity: `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t),
start AS MATERIALIZED (SELECT (SELECT t FROM now) - ${millis('$1')} AS t),
buckets AS (
  SELECT g AS b, (SELECT t FROM start) + ${millis('g * $2')} AS lo,
    CASE WHEN g = $4 - 1 THEN (SELECT t FROM now) + interval '1 millisecond'
         ELSE (SELECT t FROM start) + ${millis('(g + 1) * $2')} END AS hi
  FROM generate_series(0, $4 - 1) g)
SELECT ${toMs('(SELECT t FROM now)')} AS now, ${toMs('(SELECT t FROM start)')} AS start,
  (SELECT coalesce(json_agg(f), '[]') FROM (
     SELECT buckets.b, s.state, count(*)::int AS n, ${toMs('min(s.finished_at)')} AS oldest
     FROM buckets CROSS JOIN LATERAL (
       SELECT state, finished_at FROM ${jobs}
       WHERE finished_at >= buckets.lo AND finished_at < buckets.hi
       ORDER BY finished_at DESC LIMIT $5) s
     GROUP BY buckets.b, s.state) f) AS finished,
  (SELECT json_build_object('now', count(*)::int, 'entered',
     count(*) FILTER (WHERE updated_at >= (SELECT t FROM now) - ${millis('$3')})::int)
   FROM ${jobs} WHERE state = 'UNKNOWN') AS unknown,
  (SELECT json_build_object('now', count(*)::int, 'entered',
     count(*) FILTER (WHERE updated_at >= (SELECT t FROM now) - ${millis('$3')})::int)
   FROM ${jobs} WHERE state = 'NEEDS_REVIEW') AS needs_review`,
  };
}
