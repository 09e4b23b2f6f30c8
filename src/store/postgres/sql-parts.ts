/**
 * The pieces the PostgreSQL statements are built of (statements.ts and its group files): the
 * clock, time conversions, the abort-on-purpose `fail`, the job columns, the hot paths' lock
 * step, and the new-job parameters.
 */

/** The tables of one schema, qualified, as the statement factories use them. */
export interface Tables {
  /** The schema, quoted. */
  s: string;
  jobs: string;
  attempts: string;
  events: string;
}

/** The database's clock now, to the millisecond. */
export const NOW = `date_trunc('milliseconds', clock_timestamp())`;

/** An epoch-milliseconds expression as timestamptz (exact: no float seconds). */
export function fromMs(ms: string): string {
  return `(timestamptz 'epoch' + (${ms})::bigint * interval '1 millisecond')`;
}

export function millis(ms: string): string {
  return `((${ms})::bigint * interval '1 millisecond')`;
}

/** A timestamptz expression as epoch milliseconds (exact: times are whole milliseconds). */
export function toMs(t: string): string {
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
export function fail(message: string): string {
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
export function jobColumns(alias: string): string {
  const a = alias;
  return [
    `${a}.id, ${a}.queue, ${a}.operation, ${a}.input_json, ${a}.request_key, ${a}.request_fingerprint`,
    `${a}.run_id, ${a}.step_id, ${a}.state, ${a}.priority`,
    `${toMs(`${a}.run_at`)} AS run_at, ${toMs(`${a}.created_at`)} AS created_at`,
    `${toMs(`${a}.updated_at`)} AS updated_at, ${toMs(`${a}.finished_at`)} AS finished_at`,
    `${a}.attempt_count, ${a}.max_attempts, ${a}.backoff_json, ${a}.timeout_ms, ${a}.reconcile_grace_ms`,
    `${toMs(`${a}.next_check_at`)} AS next_check_at, ${a}.lookup_failures, ${a}.result_json, ${a}.error_json`,
    `${a}.approval_reason, ${toMs(`${a}.approval_expires_at`)} AS approval_expires_at`,
    `${a}.trace_parent`,
  ].join(',\n  ');
}

/**
 * What the outcome's snapshot holds of each lease of `input` (columns job_id, attempt_no), as the
 * CTE `seen`: the job and the attempt, read without a lock (the outcome's fence is its job's
 * conditional update: see `attemptFinish`). By primary key whatever the plan (a merge join
 * walked attempts_pkey across other leases).
 */
export function seenLeases(jobs: string, attempts: string): string {
  return `
seen AS MATERIALIZED (
  SELECT j.id, j.queue, j.state AS job_state, j.attempt_count, j.request_fingerprint,
    a.attempt_no, a.state, a.lease_token, a.dispatched_at, a.owner_id
  FROM ${jobs} j JOIN ${attempts} a ON a.job_id = j.id
  WHERE a.job_id = ANY (ARRAY(SELECT i.job_id FROM input i))
    AND (a.job_id, a.attempt_no) IN (SELECT i.job_id, i.attempt_no FROM input i)
)`;
}

/**
 * SQL for rules.ts's `leaseHolds` on an `input` row `i` and its `locked` row `l` (absent when
 * the job or attempt does not exist), and for "first of its kind in the batch": a later
 * duplicate of a lease must see what the first one did.
 */
export const LEASE_HOLDS = `coalesce(l.state = 'LEASED' AND l.lease_token = i.lease_token
      AND l.job_state = 'LEASED' AND l.attempt_count = i.attempt_no, false)`;
export const FIRST_OF_LEASE = `i.ord = min(i.ord) OVER (PARTITION BY i.job_id, i.attempt_no, i.lease_token)`;

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
  ['reconcile_grace_ms', 'bigint'],
  ['trace_parent', 'text'],
  // AWAITING_APPROVAL when true, expiring approval_expires_ms after now (null: never)
  ['approval', 'boolean'],
  ['approval_reason', 'text'],
  ['approval_expires_ms', 'bigint'],
  // Flow control: the keys of the operation's limits (NULL: no such limit)
  ['rate_key', 'text'],
  ['concurrency_key', 'text'],
] as const;

/**
 * Flow control's filter for a claim (`$2` its operations, `queue` the SQL of the queue it reads,
 * alias `j`): no job of a paused queue or operation. Judged on the claim's own queue and
 * operations, once per statement (each ARRAY is an InitPlan), never against a job's columns:
 * there the planner took a queue's or operation's only value to fail the filter, estimated one
 * row, and read and sorted every waiting job instead of walking the claim index.
 */
export function flowPauseFilter(s: string, queue: string, j = 'j'): string {
  return `AND ${queue} <> ALL (ARRAY(SELECT name FROM ${s}.flow_pauses WHERE kind = 'queue'))
    AND ${j}.operation = ANY (ARRAY(SELECT o FROM unnest($2::text[]) AS o
      WHERE o <> ALL (ARRAY(SELECT name FROM ${s}.flow_pauses WHERE kind = 'operation'))))`;
}

/** The hand-off's filter (a `due` row `d`): never to a paused queue or operation. */
export function handOffUnpaused(s: string): string {
  return `AND NOT EXISTS (
      SELECT 1 FROM ${s}.flow_pauses p JOIN input n ON n.id = d.id
      WHERE (p.kind = 'queue' AND p.name = n.queue) OR (p.kind = 'operation' AND p.name = n.operation))`;
}

/** A new job's state (`n` a row of `input`). */
export const QUEUED_OR_AWAITING = `CASE WHEN n.approval THEN 'AWAITING_APPROVAL' ELSE 'QUEUED' END`;

/** The `enqueued` event's detail of a new job awaiting approval (`n` of `input`, with `now`). */
export const APPROVAL_DETAIL = `CASE WHEN n.approval THEN json_build_object('approval', json_build_object(
  'reason', n.approval_reason,
  'expiresAt', (extract(epoch FROM now.t) * 1000)::bigint + n.approval_expires_ms))::text END`;

/** How many parameters the new jobs take in `jobInsert` and `jobInsertAllNew`. */
export const NEW_JOB_PARAM_COUNT = 4 + 2 * NEW_JOB_SHARED.length;
