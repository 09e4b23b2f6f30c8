/**
 * The PostgreSQL flow-control statements (issue #30; see statements.ts for the conventions): the
 * limited claim's steps, holds, pauses and schedules. The limited claim is a transaction of its
 * own (flow.ts), apart from the plain claim, which only gains the pause filter.
 */
import { claim } from './statements-hot.js';
import { NOW, fromMs, millis, toMs, type Tables } from './sql-parts.js';

/** The first key of the limited claim's advisory locks: "reckon flow". */
export const FLOW_LOCK_NAMESPACE = 0x7265_6b66;

/** The placeholders (or SQL) of the candidates' inputs: each statement numbers its own. */
interface CandidateArgs {
  /**
   * The queues (text[]), or the one queue (text): with an array, a cached generic plan guesses
   * its length, and its cost was then judged too high to keep (planned again on every call).
   */
  queues: { many: string } | { one: string };
  /** The operation (text), how many rows to read (int). */
  operation: string;
  window: string;
  /** The concurrency max (int; null: no limit). */
  concurrencyMax: string;
  /** The rate max (int; null: no limit) and window (ms); null: the operation has no rate limit. */
  rate: { max: string; perMs: string } | null;
  /** Lock the rows (SKIP LOCKED); false: read them as the snapshot has them. */
  lock: boolean;
}

/** The claim's queues as rows (column q), in the jobs' collation. */
function queuesFrom(q: CandidateArgs['queues']): string {
  return 'one' in q
    ? `(SELECT ${q.one}::text COLLATE "C" AS q)`
    : `(SELECT DISTINCT q COLLATE "C" AS q FROM unnest(${q.many}::text[]) AS q)`;
}

/**
 * Due QUEUED jobs of the operation in claim order, locked (skipping those other claimers hold),
 * leaving out keys already at a limit as committed in the statement's snapshot: the judgement of
 * the rest comes after the key locks. Each queue is read on its own along `jobs_claim` (with
 * `queue = ANY($1)` the planner read and sorted every waiting job of the operation on each
 * claim), so the walk stops at the window. Reads the CTE `now` (column t).
 */
function flowCandidatesFrom(t: Tables, a: CandidateArgs): string {
  const { s, jobs } = t;
  const rate = a.rate
    ? `AND (${a.rate.max}::int IS NULL OR coalesce(j.rate_key, '') <> ALL (ARRAY(
      SELECT f.rate_key FROM ${s}.flow_starts f
      WHERE f.operation = ${a.operation}::text AND f.at > (SELECT t FROM now) - ${millis(a.rate.perMs)}
      GROUP BY f.rate_key HAVING count(*) >= ${a.rate.max}::int
      UNION ALL
      SELECT h.rate_key FROM ${s}.flow_holds h
      WHERE h.operation = ${a.operation}::text AND h.until > (SELECT t FROM now))))`
    : '';
  return `
SELECT c.id, c.rate_key, c.concurrency_key, c.priority, c.run_at, ${toMs('c.run_at')} AS due_at
-- In the column's collation ("C"): compared in the text default's, jobs_claim was not used.
-- Paused queues and the paused operation are left out here, once per queue: as a filter on the
-- jobs, the planner took the queue's (single) value to fail it and read every waiting job.
FROM (
  SELECT v.q FROM ${queuesFrom(a.queues)} v
  WHERE v.q <> ALL (ARRAY(SELECT name FROM ${s}.flow_pauses WHERE kind = 'queue'))
    AND ${a.operation}::text <> ALL (ARRAY(SELECT name FROM ${s}.flow_pauses WHERE kind = 'operation'))
) qs
CROSS JOIN LATERAL (
  SELECT j.id, coalesce(j.rate_key, '') AS rate_key,
    coalesce(j.concurrency_key, '') AS concurrency_key, j.priority, j.run_at
  FROM ${jobs} j
  WHERE j.state = 'QUEUED' AND j.queue = qs.q AND j.run_at <= (SELECT t FROM now)
    AND j.operation = ${a.operation}::text
    AND (${a.concurrencyMax}::int IS NULL OR coalesce(j.concurrency_key, '') <> ALL (ARRAY(
      SELECT l.concurrency_key FROM ${jobs} l
      WHERE l.state = 'LEASED' AND l.concurrency_key IS NOT NULL AND l.operation = ${a.operation}::text
      GROUP BY l.concurrency_key HAVING count(*) >= ${a.concurrencyMax}::int)))
    ${rate}
  ORDER BY j.priority DESC, j.run_at, j.id
  LIMIT ${a.window}::int${a.lock ? ' FOR UPDATE SKIP LOCKED' : ''}
) c
ORDER BY c.priority DESC, c.run_at, c.id
LIMIT ${a.window}::int`;
}

/**
 * A key's advisory lock name, as flow.ts's `lockName` makes it (JSON.stringify of [schema, kind,
 * operation, key]): a claim of either shape excludes the other on the same key.
 */
function lockNameSql(schema: string, kind: 'c' | 'r', operation: string, key: string): string {
  return `'[' || to_json(${schema}::text)::text || ',"${kind}",' || to_json(${operation}::text)::text
    || ',' || to_json(${key}::text)::text || ']'`;
}

/**
 * The claim of an operation limited by concurrency alone, in ONE statement (its own transaction):
 * $1 queues (text[]; or, `oneQueue`, the queue), $2 operation, $3 owner, $4 lease (ms), $5
 * concurrency max, $6 the schema's
 * name (for the lock names); `window` (rows read) and `want` (most leased) are the SQL of the
 * limits: literals (a plan cached per size, as the plain claim's) or parameters $7 and $8.
 * The due jobs are read, then their keys' advisory locks are taken in claim order (a key another
 * claimer holds is skipped, never waited for), then the jobs leased per locked key are counted
 * by `flow_leased`: a VOLATILE function, so its query takes a snapshot of its own, after the
 * locks, and sees every lease a claim that held a key before has committed (the statement's own
 * snapshot, older than the locks, may not). The jobs of a key are taken in claim order while the
 * key has room. Answers the leases and, on each row (a row of NULLs when none), how many due jobs
 * were left behind by the limit (the plan's `heldByConcurrency`).
 */
function flowClaimConcurrencySql(
  t: Tables,
  oneQueue: boolean,
  window: string,
  want: string,
): string {
  const { s, jobs } = t;
  return claim(
    t,
    `
-- Read, not locked: only the jobs taken are locked, below (a lock is a WAL record).
cand AS MATERIALIZED (${flowCandidatesFrom(t, {
      queues: oneQueue ? { one: '$1' } : { many: '$1' },
      operation: '$2',
      window,
      concurrencyMax: '$5',
      rate: null,
      lock: false,
    })}
),
-- In claim order, each candidate takes its key's lock until enough have one (a later candidate of a
-- key this claim holds takes it again: no conflict); a key another claimer holds is skipped.
-- The scan of a CTE keeps its rows' order, and the limit stops the scan: no lock past it.
mine AS MATERIALIZED (
  SELECT c.id, c.concurrency_key, c.priority, c.run_at FROM cand c
  WHERE pg_try_advisory_xact_lock(${FLOW_LOCK_NAMESPACE}, hashtext(${lockNameSql('$6', 'c', '$2', 'c.concurrency_key')}))
  LIMIT ${want}::int
),
busy AS MATERIALIZED (
  SELECT b.key, b.n FROM ${s}.flow_leased($2::text, ARRAY(SELECT DISTINCT m.concurrency_key FROM mine m)) b
),
judged AS MATERIALIZED (
  SELECT c.id, row_number() OVER (PARTITION BY c.concurrency_key
    ORDER BY c.priority DESC, c.run_at, c.id) + coalesce(b.n, 0) <= $5::int AS fits
  FROM mine c LEFT JOIN busy b ON b.key = c.concurrency_key
),
-- Locked now, skipping what another transaction holds, on their latest versions: a job leased
-- by a claim that committed after this statement's snapshot is QUEUED no more, and is left.
-- The state is compared with a value the planner cannot see, so the jobs are found by id.
picked AS MATERIALIZED (
  SELECT j.id FROM ${jobs} j
  WHERE j.id = ANY (ARRAY(SELECT d.id FROM judged d WHERE d.fits))
    AND j.state = (SELECT 'QUEUED'::text)
  FOR UPDATE SKIP LOCKED
)`,
    NOW,
    '(SELECT count(*) FROM judged d WHERE NOT d.fits)',
  );
}

export function flowStatements(t: Tables) {
  return {
    ...flowTransactionStatements(t),
    flowClaimConcurrency: (oneQueue: boolean, window: string, want: string) =>
      flowClaimConcurrencySql(t, oneQueue, window, want),
    ...flowAdminStatements(t),
  };
}

/**
 * Leases the jobs the plan took (locked by flowCandidates) and records their starts, in one
 * statement stamped with the time the decision was made: the window the plan judged is the
 * window of the leases' own times. $1 job ids (text[]), $2 the operation (a one-element
 * text[]), $3 owner, $4 lease (ms), $5 the decision's time (ms). Rate limits (else empty):
 * $6 rate keys (text[], one per start), $7 window (ms), $8 the keys that started and $9 their
 * next start times (ms; a later one stored is kept). The keys' rows are this claim's (it holds
 * their advisory locks): no claim waits on another.
 */
function flowLeaseSql(t: Tables): string {
  const { s, jobs } = t;
  return claim(
    t,
    `
picked AS MATERIALIZED (
  SELECT j.id FROM ${jobs} j
  WHERE j.id = ANY($1::text[]) AND j.operation = ANY($2::text[]) AND j.state = 'QUEUED'
),
gone AS (
  -- Starts that left the window count for nothing any more; rows another claim is deleting are
  -- left to it (no claim waits on another).
  DELETE FROM ${s}.flow_starts WHERE ctid = ANY (ARRAY(
    SELECT o.ctid FROM ${s}.flow_starts o
    WHERE cardinality($6::text[]) > 0 AND o.operation = ($2::text[])[1]
      AND o.at <= (SELECT t FROM now) - ${millis('$7')}
    FOR UPDATE SKIP LOCKED))
),
spaced AS (
  INSERT INTO ${s}.flow_holds AS f (operation, rate_key, until)
  SELECT ($2::text[])[1], k.key, ${fromMs('k.at')} FROM unnest($8::text[], $9::bigint[]) AS k(key, at)
  ON CONFLICT (operation, rate_key) DO UPDATE SET until = greatest(f.until, excluded.until)
),
started AS (
  INSERT INTO ${s}.flow_starts (operation, rate_key, at)
  SELECT ($2::text[])[1], k, (SELECT t FROM now) FROM unnest($6::text[]) AS k
)`,
    fromMs('$5'),
  );
}

/** The steps of the limited claim as a transaction (flow.ts `claimOne`): rate limits. */
function flowTransactionStatements(t: Tables) {
  const { s, jobs } = t;
  return {
    /**
     * $1 queues (text[]), $2 operation, $3 window (rows), $4 concurrency max (null: no limit),
     * $5 rate max (null: no limit), $6 rate window (ms). See `flowCandidatesFrom`: the plan
     * (plan/flow.ts) judges these after the key locks.
     */
    flowCandidates: `WITH now AS MATERIALIZED (SELECT ${NOW} AS t)${flowCandidatesFrom(t, {
      queues: { many: '$1' },
      operation: '$2',
      window: '$3',
      concurrencyMax: '$4',
      rate: { max: '$5', perMs: '$6' },
      lock: true,
    })}`,
    /**
     * $1 lock names (text[]). Takes each transaction-scoped advisory lock that is free, never
     * waiting: a name another claimer holds is skipped. Returns the names taken.
     */
    flowKeyLocks: `SELECT k FROM unnest($1::text[]) AS k
      WHERE pg_try_advisory_xact_lock(${FLOW_LOCK_NAMESPACE}, hashtext(k))`,
    /**
     * $1 operation, $2 rate window (ms). Read after the key locks (a fresh snapshot: every claim
     * that held them before has committed). Rows: kind 'leased' | 'starts' | 'hold', the key, a
     * count and a time (epoch ms: the oldest start, or the hold's end); and 'now'.
     */
    flowCounts: `
WITH now AS MATERIALIZED (SELECT ${NOW} AS t)
SELECT 'now' AS kind, '' AS key, 0::bigint AS n, ${toMs('now.t')} AS at FROM now
UNION ALL
SELECT 'leased', l.concurrency_key, count(*), NULL FROM ${jobs} l
WHERE l.state = 'LEASED' AND l.concurrency_key IS NOT NULL AND l.operation = $1::text
GROUP BY l.concurrency_key
UNION ALL
SELECT 'starts', f.rate_key, count(*), ${toMs('min(f.at)')} FROM ${s}.flow_starts f
WHERE f.operation = $1::text AND f.at > (SELECT t FROM now) - ${millis('$2')}
GROUP BY f.rate_key
UNION ALL
SELECT 'hold', h.rate_key, 0, ${toMs('h.until')} FROM ${s}.flow_holds h
WHERE h.operation = $1::text AND h.until > (SELECT t FROM now) - ${millis('$2')}`,
    /**
     * $1 operation: how long until the earliest hold of its keys ends (ms), or null. Asked when
     * the candidates came back empty: keys whose next start is ahead were left out of them, and
     * their next start should still wake the claimer.
     */
    flowNextHold: `
SELECT ${toMs('min(h.until)')} - ${toMs(NOW)} AS in_ms FROM ${s}.flow_holds h
WHERE h.operation = $1::text AND h.until > ${NOW}`,
    flowLease: flowLeaseSql(t),
  };
}

/** Holds, pauses and schedules. */
function flowAdminStatements(t: Tables) {
  const { s } = t;
  return {
    /**
     * $1 operation, $2 rate key, $3 delay (ms), $4 the key's lock name. Waits for the key's
     * advisory lock, the one a limited claim takes to judge the key: a claim judging it now
     * commits first (its starts were decided before the hold), and every claim after it reads the
     * hold. The hold's time is read once the lock is held.
     */
    flowBackoff: `
WITH locked AS MATERIALIZED (
  SELECT pg_advisory_xact_lock(${FLOW_LOCK_NAMESPACE}, hashtext($4::text)) AS held
)
INSERT INTO ${s}.flow_holds (operation, rate_key, until)
SELECT $1::text, $2::text, ${NOW} + ${millis('$3')} FROM locked
ON CONFLICT (operation, rate_key) DO UPDATE SET until = greatest(${s}.flow_holds.until, excluded.until)`,
    /** $1 kind, $2 name, $3 actor, $4 reason. */
    pauseInsert: `
INSERT INTO ${s}.flow_pauses (kind, name, actor, reason, paused_at)
VALUES ($1::text, $2::text, $3::text, $4::text, ${NOW})
ON CONFLICT (kind, name) DO NOTHING RETURNING name`,
    /** $1 kind, $2 name, $3 the work channel: wakes workers of a resumed queue (operations: their poll). */
    pauseDelete: `
WITH gone AS (DELETE FROM ${s}.flow_pauses WHERE kind = $1::text AND name = $2::text RETURNING name)
SELECT g.name, CASE WHEN $1::text = 'queue' THEN pg_notify($3::text, g.name) END AS woken FROM gone g`,
    pauseList: `SELECT kind, name, actor, reason, ${toMs('paused_at')} AS paused_at
      FROM ${s}.flow_pauses ORDER BY kind, name`,
    /** $1 name, $2 cron, $3 timezone, $4 operation. */
    scheduleRegister: `
INSERT INTO ${s}.flow_schedules AS f (name, cron, timezone, operation, last_slot_at, updated_at)
VALUES ($1::text, $2::text, $3::text, $4::text, ${NOW}, ${NOW})
ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, timezone = excluded.timezone,
  operation = excluded.operation,
  updated_at = CASE WHEN f.cron = excluded.cron AND f.timezone IS NOT DISTINCT FROM excluded.timezone
    AND f.operation = excluded.operation THEN f.updated_at ELSE excluded.updated_at END
RETURNING name, cron, timezone, operation, ${toMs('last_slot_at')} AS last_slot_at,
  ${toMs('updated_at')} AS updated_at`,
    /** $1 name, $2 last slot (ms). */
    scheduleAdvance: `UPDATE ${s}.flow_schedules SET last_slot_at = ${fromMs('$2')}
      WHERE name = $1::text AND last_slot_at < ${fromMs('$2')}`,
    scheduleList: `SELECT name, cron, timezone, operation, ${toMs('last_slot_at')} AS last_slot_at,
      ${toMs('updated_at')} AS updated_at FROM ${s}.flow_schedules ORDER BY name`,
  };
}
