/**
 * The PostgreSQL worker's hot statements (see statements.ts for the conventions): claim, dispatch
 * marker, outcome, heartbeat. Each is ONE statement; their SQL and their number are fixed.
 */
import {
  FIRST_OF_LEASE,
  LEASE_HOLDS,
  NOW,
  fail,
  flowPauseFilter,
  jobColumns,
  seenLeases,
  millis,
  toMs,
  type Tables,
} from './sql-parts.js';

/**
 * The claim statement around its `picked` CTE (the due jobs to lease, locked); `now` is the
 * lease's time (the limited claim passes the time its decision was made).
 */
// The claim commits without waiting for its WAL flush (`synchronous_commit` off for its own
// transaction only): nothing acts on a claim but its dispatch marker, a synchronous commit
// after it, and WAL is flushed in order, so the marker is never durable without its claim. A
// claim lost to a server crash was acted on by nobody: its job is simply QUEUED again.
export function claim(t: Tables, picked: string, now = NOW, held?: string): string {
  const { jobs, attempts } = t;
  return `
WITH now AS MATERIALIZED (SELECT ${now} AS t, set_config('synchronous_commit', 'off', true) AS async),${picked},
leased AS (
  -- A LEASED job's next_check_at: no lease of this attempt expires before it (heartbeats only
  -- extend), so the expired-lease scan leaves the job alone until then (migration 15).
  UPDATE ${jobs} j SET state = 'LEASED', attempt_count = j.attempt_count + 1, updated_at = now.t,
    next_check_at = now.t + ${millis('$4')}
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
-- Its lease_ms records the attempt's \`leased\` step (invariant 8): no event row. It does not
-- copy the job's request key and fingerprint (migration 13): reads take them from the job.
attempt AS (
  INSERT INTO ${attempts} (job_id, attempt_no, state, owner_id, lease_token, leased_at,
    lease_expires_at, lease_ms)
  SELECT l.id, l.attempt_count, 'LEASED', $3, l.a_lease_token, l.a_leased_at,
    l.a_lease_expires_at, $4::bigint
  FROM leased l
)
SELECT ${jobColumns('l')},
  l.a_lease_token, ${toMs('l.a_leased_at')} AS a_leased_at,
  ${toMs('l.a_lease_expires_at')} AS a_lease_expires_at${
    // \`held\`: a count the claim also answers, on every row, and on a row of NULLs if none leased.
    held === undefined
      ? `
FROM leased l`
      : `, h.held
FROM (SELECT ${held} AS held) h LEFT JOIN leased l ON true`
  }
ORDER BY l.priority DESC, l.run_at, l.id`;
}

/** Claims (one queue, several) and heartbeats. */
export function claimStatements(t: Tables) {
  const { jobs, attempts } = t;
  return {
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
      claim(
        t,
        `
picked AS MATERIALIZED (
  SELECT j.id FROM ${jobs} j
  WHERE j.state = 'QUEUED' AND j.queue = $1::text AND j.run_at <= (SELECT t FROM now)
    ${flowPauseFilter(t.s, '$1::text')}
  ORDER BY j.priority DESC, j.run_at, j.id
  LIMIT ${limit}
  FOR UPDATE SKIP LOCKED
)`,
      ),

    /**
     * `attemptClaim` over several queues: $1 queues (text[]). Each queue is read on its own along
     * the index, then the best `limit` of them are taken (rows locked beyond those are released
     * at once, unchanged).
     */
    attemptClaimQueues: (limit: string) =>
      claim(
        t,
        `
picked AS MATERIALIZED (
  SELECT c.id, c.priority, c.run_at
  -- In the column's collation ("C"): in the text default's, jobs_claim was not used.
  FROM (SELECT DISTINCT q COLLATE "C" AS q FROM unnest($1::text[]) AS q) qs
  CROSS JOIN LATERAL (
    SELECT j.id, j.priority, j.run_at FROM ${jobs} j
    WHERE j.state = 'QUEUED' AND j.queue = qs.q AND j.run_at <= (SELECT t FROM now)
      ${flowPauseFilter(t.s, 'qs.q')}
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT ${limit}
    FOR UPDATE SKIP LOCKED
  ) c
  ORDER BY c.priority DESC, c.run_at, c.id
  LIMIT ${limit}
)`,
      ),

    /**
     * $1 JSON array of { job_id, attempt_no, lease_token }, $2 lease (ms). Extends each LEASED,
     * unexpired lease to now + $2; rows are locked in job order first (no deadlock with batches
     * of the reclaimer), and the clock is read per row after its lock. Returns those extended.
     */
    attemptHeartbeat: `
WITH input AS MATERIALIZED (SELECT r.*, 'LEASED'::text AS leased
  FROM json_to_recordset($1::json) AS r(job_id text, attempt_no int, lease_token text)),
held AS (
  SELECT a.job_id, a.attempt_no
  FROM input r
  JOIN ${attempts} a
    ON a.job_id = r.job_id AND a.attempt_no = r.attempt_no AND a.lease_token = r.lease_token
  -- One primary-key lookup per lease: the state is compared with the batch's column (see the marker).
  WHERE a.state = r.leased
  ORDER BY a.job_id
  FOR UPDATE OF a
)
UPDATE ${attempts} a SET lease_expires_at = ${NOW} + ${millis('$2')}
FROM held
WHERE a.job_id = held.job_id AND a.attempt_no = held.attempt_no AND a.state = 'LEASED'
  AND a.lease_expires_at > ${NOW}
RETURNING a.job_id, a.attempt_no, a.lease_expires_at`,
  };
}

/** The dispatch marker (invariant 3). */
export function dispatchStatements(t: Tables) {
  const { jobs, attempts, events } = t;
  return {
    /**
     * Invariant 3 in ONE statement, with no lock step: $1 job ids (text[]), $2 attempt nos
     * (int[]), $3 lease tokens (text[]), one lease per index. Sets `dispatched_at` of every
     * attempt whose fence holds, judged by the conditional update itself on the row's latest
     * version: token, attempt LEASED and unexpired on the database's clock, no marker yet. Its
     * job need not be read: an attempt LEASED always means its job is LEASED on it (every move
     * that takes a job off its attempt ends the attempt in the same commit). Appends
     * `dispatched` events for attempts leased before migration 11. Returns one row per lease, in
     * order: status, the lease's expiry and its marker's time (epoch ms). A lease not marked is
     * judged on the statement's snapshot (`rules.ts` leaseHolds, then expiry): lease-lost,
     * lease-expired, or — held, unexpired and unmarked there, so changed since by a commit the
     * update waited for — recheck (`attemptDispatchWhy` reads it after this commit). One already
     * marked (or named twice) while held and unexpired aborts the statement, naming the first:
     * dispatched twice is a bug. Rows are updated in job id order, as every fenced write locks.
     */
    attemptDispatch: `
WITH input AS MATERIALIZED (
  SELECT i.*, 'LEASED'::text AS leased
  FROM unnest($1::text[], $2::int[], $3::text[]) WITH ORDINALITY
    AS i(job_id, attempt_no, lease_token, ord)
  ORDER BY i.job_id
),
marked AS (
  -- The clock is read per row as it is updated, after any wait for its lock.
  UPDATE ${attempts} a SET dispatched_at = ${NOW}
  FROM input i
  -- One primary-key lookup per lease: the state is compared with the batch's column, as a
  -- constant matched the partial indexes of LEASED attempts, read whole (dead entries too) in a
  -- nested loop with the batch, batch × batch (the planner's statistics see few live entries).
  WHERE a.job_id = i.job_id AND a.attempt_no = i.attempt_no AND a.lease_token = i.lease_token
    AND a.state = i.leased AND a.dispatched_at IS NULL AND a.lease_expires_at > ${NOW}
  RETURNING a.job_id, a.attempt_no, a.lease_token, a.lease_expires_at, a.dispatched_at,
    a.owner_id, a.lease_ms
),
dispatched_event AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, actor, at)
  SELECT m.job_id, m.attempt_no, (SELECT j.request_fingerprint FROM ${jobs} j WHERE j.id = m.job_id),
    'dispatched', m.owner_id, m.dispatched_at
  FROM marked m
  -- An attempt leased with its steps as columns has its marker as its \`dispatched\` step.
  WHERE m.lease_ms IS NULL
  ORDER BY m.job_id
),
judged AS MATERIALIZED (
  SELECT i.ord, m.lease_expires_at, m.dispatched_at,
    CASE
      WHEN NOT ${FIRST_OF_LEASE} THEN 'twice'
      WHEN m.job_id IS NOT NULL THEN 'ok'
      WHEN NOT ${LEASE_HOLDS} THEN 'lease-lost'
      WHEN l.lease_expires_at <= ${NOW} THEN 'lease-expired'
      WHEN l.dispatched_at IS NOT NULL THEN 'twice'
      ELSE 'recheck'
    END AS status
  FROM input i
  LEFT JOIN marked m
    ON m.job_id = i.job_id AND m.attempt_no = i.attempt_no AND m.lease_token = i.lease_token
  -- What the snapshot held, read only for a lease the update left alone.
  LEFT JOIN LATERAL (
    SELECT j.state AS job_state, j.attempt_count, a.state, a.lease_token, a.lease_expires_at,
      a.dispatched_at
    FROM ${jobs} j JOIN ${attempts} a ON a.job_id = j.id
    WHERE m.job_id IS NULL AND j.id = i.job_id AND a.job_id = i.job_id
      AND a.attempt_no = i.attempt_no
  ) l ON true
),
first_bad AS MATERIALIZED (SELECT min(ord) AS ord FROM judged WHERE status = 'twice')
SELECT g.status, ${toMs('g.lease_expires_at')} AS lease_expires_at,
  ${toMs('g.dispatched_at')} AS dispatched_at,
  CASE WHEN g.ord = f.ord
    THEN ${fail(`'job ' || i.job_id || ' attempt ' || i.attempt_no || ' dispatched twice'`)}
  END AS violated
FROM judged g JOIN input i ON i.ord = g.ord CROSS JOIN first_bad f
ORDER BY g.ord`,

    ...dispatchWhyStatements(t),
  };
}

/** The dispatch marker's second look, at leases it did not mark (see `attemptDispatch`). */
function dispatchWhyStatements(t: Tables) {
  const { jobs, attempts } = t;
  return {
    /**
     * Why leases were not marked: $1 job ids (text[]), $2 attempt nos (int[]). Per lease, in
     * order: its job's state and attempt count and its attempt's (null when absent), times in ms.
     */
    attemptDispatchWhy: `
SELECT j.state AS job_state, j.attempt_count, a.state, a.lease_token,
  ${toMs('a.lease_expires_at')} AS lease_expires_at, ${toMs('a.dispatched_at')} AS dispatched_at,
  ${toMs(NOW)} AS now
FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS i(job_id, attempt_no, ord)
LEFT JOIN ${jobs} j ON j.id = i.job_id
LEFT JOIN ${attempts} a ON a.job_id = i.job_id AND a.attempt_no = i.attempt_no
ORDER BY i.ord`,
  };
}

/**
 * `attemptFinish`: outcomes in ONE statement. One finish per index of the arrays: $1 job id,
 * $2 attempt no, $3 lease token, $4 attempt state, $5 reason, $6 attempt result_json, $7 attempt error_json,
 * $8 job's next state, $9 QUEUED: run delay (ms), $10 UNKNOWN: next check this long after
 * the marker (ms), $11 job result_json, $12 job error_json (each null = keep the column),
 * $13 event kind, $14 actor, $15 event detail_json, $16 / $17: the outcome breaks an
 * invariant if the attempt has no marker / has one (rules.ts `assertFinishLegal`, judged by
 * the store beforehand for both cases); $18 the channel; $19 the job's lookup failures
 * restart at 0, $20 the job's state is terminal (finished_at), $21 the outcome is routine
 * (recorded as the attempt's ended_job, not an event, when the actor owns the lease: plan/finish.ts
 * `FinishParams.routine`). $8–$13, $15 and $19–$21 are the plan's (plan/finish.ts
 * `finishParams`): the statement adds the fence and the clock.
 *
 * No lock step (each row lock is a WAL record of its own): the fence is the job's conditional
 * update, judged on its latest version, after any wait for its lock. A finish applies when its
 * lease holds (rules.ts `leaseHolds`) on the statement's snapshot, it is the first of that lease
 * in the batch, and its job is still LEASED on its attempt when updated; its attempt is then
 * updated after its job (every fenced write locks a job before its attempt, in job id order).
 * The snapshot's attempt is its current one: an attempt's token never changes, and every move
 * that ends a LEASED attempt moves its job off it in the same commit, which the job's update
 * would see. The clock is read once, before the writes. Ends those attempts, moves their jobs
 * (as the transaction path's `finishAttempt` does), appends their events and wakes the queues of
 * requeued jobs. Returns `applied` per finish, in order, and `requeued`: the queue of a job it put
 * back in line (else null). A finish whose lease holds on the snapshot but which breaks an
 * invariant (judged on the snapshot's marker: the owner's own, written before its outcome)
 * aborts the statement (`fail`: "finish <index> marked|unmarked", the first such finish), and
 * is never written even for a moment, so no constraint fires first.
 */
export function finishStatements(t: Tables) {
  const { jobs, attempts, events } = t;
  return {
    attemptFinish: `
WITH input AS MATERIALIZED (
  SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[],
      $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::text[], $13::text[],
      $14::text[], $15::text[], $16::bool[], $17::bool[], $19::bool[], $20::bool[], $21::bool[])
      WITH ORDINALITY
    AS i(job_id, attempt_no, lease_token, state, reason, result_json, error_json, job_to,
      run_delay_ms, check_after_ms, job_result_json, job_error_json, kind, actor, detail_json,
      bad_unmarked, bad_marked, resets_lookups, terminal, routine, ord)
  ORDER BY i.job_id
),
now AS MATERIALIZED (SELECT ${NOW} AS t),
${seenLeases(jobs, attempts)},
judged AS MATERIALIZED (
  SELECT i.*, l.request_fingerprint, l.queue, l.dispatched_at, 'LEASED'::text AS leased,
    ${LEASE_HOLDS} AND ${FIRST_OF_LEASE} AS holds,
    ${LEASE_HOLDS} AND ${FIRST_OF_LEASE}
      AND CASE WHEN l.dispatched_at IS NULL THEN i.bad_unmarked ELSE i.bad_marked END AS bad,
    coalesce(i.routine AND i.actor = l.owner_id, false) AS ends_routinely
  FROM input i
  LEFT JOIN seen l ON l.id = i.job_id AND l.attempt_no = i.attempt_no
),
first_bad AS MATERIALIZED (SELECT min(ord) AS ord FROM judged WHERE bad),
${finishJobMoves(jobs)},
applied AS MATERIALIZED (
  SELECT g.*, m.id IS NOT NULL AS applies
  FROM judged g LEFT JOIN moved m ON m.id = g.job_id AND g.holds AND NOT g.bad
),
ended AS (
  UPDATE ${attempts} a SET state = g.state, finished_at = now.t, result_json = g.result_json,
    error_json = g.error_json, reason = g.reason,
    ended_job = CASE WHEN g.ends_routinely THEN g.job_to END
  FROM applied g, now
  -- No state test: its job, now locked LEASED on it, proves the attempt LEASED (a state test
  -- let the planner read every LEASED attempt along an index of them, now gone, instead of the key).
  WHERE g.applies AND a.job_id = g.job_id AND a.attempt_no = g.attempt_no
    AND a.lease_token = g.lease_token
  RETURNING a.job_id
),
finished_event AS (
  INSERT INTO ${events} (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
  SELECT g.job_id, g.attempt_no, g.request_fingerprint, g.kind, 'LEASED', g.job_to, g.actor,
    g.detail_json, now.t
  FROM applied g, now
  -- A routine outcome is recorded as the attempt's ended_job (invariant 8): no event row.
  WHERE g.applies AND NOT g.ends_routinely
  ORDER BY g.ord
)
SELECT g.applies AS applied,
  CASE WHEN g.applies AND g.job_to = 'QUEUED' THEN g.queue END AS requeued,
  CASE
    WHEN g.ord = f.ord
      THEN ${fail(`'finish ' || g.ord || CASE WHEN g.dispatched_at IS NULL THEN ' unmarked' ELSE ' marked' END`)}
    WHEN g.ord = 1 AND f.ord IS NULL
        AND (SELECT count(*) FROM ended) <> (SELECT count(*) FROM applied WHERE applies)
      THEN ${fail(`'not every held lease took its outcome (batch of job ' || g.job_id || ')'`)}
  END AS violated,
  (SELECT count(pg_notify($18::text, q.queue))
     FROM (SELECT DISTINCT queue FROM applied WHERE applies AND job_to = 'QUEUED') q) AS woken
FROM applied g CROSS JOIN first_bad f
ORDER BY g.ord`,
  };
}

/**
 * The outcome's fence and its job's move, as the CTE `moved` (over `judged` and `now`): each job
 * whose finish holds on the snapshot and breaks nothing, if still LEASED on its attempt when
 * updated. Returns the ids moved.
 */
function finishJobMoves(jobs: string): string {
  return `
moved AS (
  UPDATE ${jobs} j SET
    state = g.job_to,
    updated_at = now.t,
    run_at = CASE WHEN g.run_delay_ms IS NULL THEN j.run_at ELSE now.t + ${millis('g.run_delay_ms')} END,
    next_check_at = CASE WHEN g.check_after_ms IS NULL THEN NULL
      ELSE coalesce(g.dispatched_at, now.t) + ${millis('g.check_after_ms')} END,
    lookup_failures = CASE WHEN g.resets_lookups THEN 0 ELSE j.lookup_failures END,
    result_json = coalesce(g.job_result_json, j.result_json),
    error_json = coalesce(g.job_error_json, j.error_json),
    finished_at = CASE WHEN g.terminal THEN now.t END
  FROM judged g, now
  -- Each job looked up by its id from \`judged\`, in job id order. The state is compared with
  -- the batch's column: a constant matched jobs_lease_check's predicate, and with statistics
  -- taken while every job waited, the planner read that whole index (dead entries too) for
  -- each batch instead of the key (process-c50 a quarter slower).
  WHERE g.holds AND NOT g.bad AND j.id = g.job_id
    AND j.state = g.leased AND j.attempt_count = g.attempt_no
  RETURNING j.id
)`;
}
