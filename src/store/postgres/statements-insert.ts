/**
 * The PostgreSQL enqueue statements (see statements.ts for the conventions): new jobs as one
 * array per column, inserted with their `enqueued` steps (a column, or an event when awaiting
 * approval), or handed straight to idle workers.
 */
import {
  APPROVAL_DETAIL,
  NEW_JOB_PARAM_COUNT,
  NEW_JOB_SHARED,
  NOW,
  QUEUED_OR_AWAITING,
  fromMs,
  handOffUnpaused,
  millis,
  toMs,
  type Tables,
} from './sql-parts.js';

/**
 * CTEs `now` and `input` (the new jobs, one row per index of the id array): the parameters
 * `jobInsert` and `jobInsertAllNew` share (see `NEW_JOB_SHARED`), after which the next parameter
 * is the actor. A column that every job of the batch shares travels once, as a scalar (its
 * array empty); otherwise the scalar is null and the array holds one value per job. Each
 * column of `input` is therefore coalesce(scalar, array element): unnest pads an empty array
 * with nulls.
 */
const NEW_JOBS = `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t),
input AS (
  SELECT u.id, u.request_key, u.request_fingerprint, u.input_json,
    ${NEW_JOB_SHARED.map(([name, type], k) => `coalesce($${5 + 2 * k}::${type}, u.${name}) AS ${name}`).join(',\n    ')}
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],
    ${NEW_JOB_SHARED.map(([, type], k) => `$${6 + 2 * k}::${type}[]`).join(', ')})
    AS u(id, request_key, request_fingerprint, input_json,
      ${NEW_JOB_SHARED.map(([name]) => name).join(', ')})
)`;

const ACTOR = `$${NEW_JOB_PARAM_COUNT + 1}`;

/**
 * Who enqueued a new job, its `enqueue_actor`: a QUEUED job's `enqueued` step (invariant 8;
 * src/store/trail.ts reads it back as the event); one awaiting approval also appends the event,
 * whose detail carries the approval.
 */
const ENQUEUE_ACTOR = ACTOR;

/**
 * The INSERT of `input` (as `n`, with `now`) into `jobs`, in `state` with `attemptCount` and
 * `nextCheckAt` (a LEASED job's: its lease's first expiry, migration 15), SQL expressions over `from`;
 * an ON CONFLICT clause or RETURNING … may follow it.
 */
function insertJobsAs(
  jobs: string,
  state: string,
  attemptCount: string,
  from: string,
  nextCheckAt = 'NULL::timestamptz',
): string {
  return `
  INSERT INTO ${jobs} (id, queue, operation, input_json, request_key, request_fingerprint, run_id, step_id,
    state, priority, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms,
    reconcile_grace_ms, attempt_count, approval_reason, approval_expires_at, rate_key, concurrency_key,
    trace_parent, enqueue_actor, next_check_at)
  SELECT n.id, n.queue, n.operation, n.input_json, n.request_key, n.request_fingerprint, n.run_id, n.step_id,
    ${state}, n.priority, coalesce(${fromMs('n.run_at')}, now.t + ${millis('n.delay_ms')}), now.t, now.t,
    n.max_attempts, n.backoff_json, n.timeout_ms, n.reconcile_grace_ms, ${attemptCount},
    n.approval_reason, now.t + ${millis('n.approval_expires_ms')}, n.rate_key, n.concurrency_key,
    n.trace_parent, ${ENQUEUE_ACTOR}, ${nextCheckAt}
  FROM ${from}`;
}

/** The enqueue of new jobs: all of them, or those whose request key is new. */
export function insertStatements(t: Tables) {
  const { jobs, events } = t;
  const insertJobs = insertJobsAs(jobs, QUEUED_OR_AWAITING, '0', 'input n, now');
  return {
    // ------------------------------------------------------------ jobs

    /**
     * The new jobs (`NEW_JOB_SHARED`), then the actor and the channel. Inserts those whose request
     * key is new, with their `enqueued` steps, and wakes their queues (at commit). Existing keys
     * are left to the caller, who must not name a key twice in one call. Returns one row: now
     * (epoch ms, the jobs' created_at) and the ids inserted.
     */
    jobInsert: `${NEW_JOBS},
inserted AS (${insertJobs}
  ON CONFLICT (request_key) DO NOTHING
  RETURNING id, queue, request_fingerprint, state
),
enqueued AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, to_state, actor, detail_json, at)
  SELECT i.id, NULL, i.request_fingerprint, 'enqueued', i.state, ${ACTOR}, ${APPROVAL_DETAIL}, now.t
  FROM inserted i JOIN input n ON n.id = i.id, now
  WHERE i.state = 'AWAITING_APPROVAL'
)
SELECT ${toMs('now.t')} AS now, ARRAY(SELECT i.id FROM inserted i) AS ids,
  (SELECT count(pg_notify($${NEW_JOB_PARAM_COUNT + 2}::text, q.queue))
     FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'QUEUED') q) AS woken
FROM now`,

    /**
     * The common enqueue in ONE statement, every request key new: the jobs (`NEW_JOB_SHARED`),
     * their `enqueued` steps (actor next), and the wake-ups of the queues that follow ($+2 as
     * text[], $+3 the channel). A plain insert: a request key that exists (or that the batch
     * names twice) aborts it with a unique violation of `jobs_request_key_key` and nothing is
     * written; the caller then runs `jobInsert` and the dedup judgement in a transaction. (ON
     * CONFLICT would cost a speculative insertion per row, for the rare case.) Nothing is read
     * back: the store knows every value but the clock. Returns one row: now (epoch ms).
     */
    jobInsertAllNew: `${NEW_JOBS},
inserted AS (${insertJobs}
),
enqueued AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, to_state, actor, detail_json, at)
  SELECT n.id, NULL, n.request_fingerprint, 'enqueued', ${QUEUED_OR_AWAITING}, ${ACTOR},
    ${APPROVAL_DETAIL}, now.t
  FROM input n, now
  WHERE n.approval
)
SELECT ${toMs('now.t')} AS now,
  (SELECT count(pg_notify($${NEW_JOB_PARAM_COUNT + 3}::text, q))
     FROM unnest($${NEW_JOB_PARAM_COUNT + 2}::text[]) AS q) AS woken
FROM now`,
  };
}

/** The enqueue that hands jobs to idle workers; the lookup of existing keys. */
export function handOffStatements(t: Tables) {
  const { jobs, attempts, events } = t;
  return {
    /**
     * `jobInsertAllNew` that also hands some of the new jobs straight to idle workers of this
     * process: the enqueue and the claim in one durable commit, one round trip fewer before the
     * job starts. After the actor: $+2 the channel, then the offers, one per index: $+3 job id
     * (text[]), $+4 owner (text[]), $+5 lease ms (bigint[]), $+6 lease token (text[], made by the
     * caller, as the SQLite store makes them). An offered job is leased (attempt 1,
     * its `leased` step after its `enqueued` one) only when it is due now and no due QUEUED job
     * of its queue, in the store or unoffered in this batch, ranks at least as high (priority):
     * a hand-off never overtakes a job the claim would take first. The other jobs are inserted
     * QUEUED and their queues notified. Returns one row: now (epoch ms) and the handed jobs' ids; a
     * handed lease expires at now + its lease ms.
     */
    jobInsertHandOff: `${NEW_JOBS},
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
  SELECT d.id, d.owner_id, d.lease_token, d.lease_ms,
    now.t + ${millis('d.lease_ms')} AS lease_expires_at
  FROM due d CROSS JOIN now
  WHERE d.owner_id IS NOT NULL AND d.due_now ${handOffUnpaused(t.s)}
    AND NOT EXISTS (
      SELECT 1 FROM ${jobs} j
      WHERE j.state = 'QUEUED' AND j.queue = d.queue AND j.run_at <= now.t
        AND j.priority >= d.priority)
    AND NOT EXISTS (
      SELECT 1 FROM due u
      WHERE u.owner_id IS NULL AND u.due_now AND u.queue = d.queue AND u.priority >= d.priority)
),
inserted AS (${insertJobsAs(
      jobs,
      `CASE WHEN h.id IS NULL THEN ${QUEUED_OR_AWAITING} ELSE 'LEASED' END`,
      'CASE WHEN h.id IS NULL THEN 0 ELSE 1 END',
      'input n CROSS JOIN now LEFT JOIN handed h ON h.id = n.id',
      // As the claim records it (migration 15): when the handed lease first expires.
      'h.lease_expires_at',
    )}
),
attempt AS (
  INSERT INTO ${attempts} (job_id, attempt_no, state, owner_id, lease_token, leased_at,
    lease_expires_at, lease_ms)
  SELECT h.id, 1, 'LEASED', h.owner_id, h.lease_token, now.t, h.lease_expires_at, h.lease_ms
  FROM handed h CROSS JOIN now
),
logged AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, to_state, actor, detail_json, at)
  SELECT n.id, NULL, n.request_fingerprint, 'enqueued', ${QUEUED_OR_AWAITING}, ${ACTOR},
    ${APPROVAL_DETAIL}, now.t
  FROM input n CROSS JOIN now
  WHERE n.approval
)
SELECT ${toMs('now.t')} AS now,
  ARRAY(SELECT h.id FROM handed h) AS handed_ids,
  (SELECT count(pg_notify($${NEW_JOB_PARAM_COUNT + 2}::text, q.queue))
     FROM (SELECT DISTINCT n.queue FROM input n WHERE n.id NOT IN (SELECT id FROM handed)) q) AS woken
FROM now`,

    /** $1 request keys (text[]). KEY SHARE: no prune deletes them under their dedup events. */
    jobByKeys: `SELECT * FROM ${jobs} WHERE request_key = ANY($1::text[]) FOR KEY SHARE`,
  };
}
