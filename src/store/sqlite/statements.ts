/**
 * The SQLite store's statements that are built, shared or read raw: the job-state update, the
 * claim (one cached text per arity of its IN lists), the multi-row event insert, and the job
 * columns in the order raw rows return them. One-off statements stay beside their method in
 * store.ts. Parameters are positional (`?`), in the order each header names.
 */
import type { ErrorInfo } from '../../core/errors.js';
import type { Json } from '../../core/json.js';
import type { JobState } from '../../core/states.js';
import { backoffOf } from '../rows.js';
import type { JobRecord } from '../store.js';

/**
 * A job move (plan/job.ts `JobWrite`): state, updated_at, run_at, next_check_at,
 * lookup_failures, result_json, error_json, finished_at, then the job's id or rowid. A null
 * run_at, lookup_failures, result_json or error_json keeps the column.
 */
export const SET_JOB_STATE = `UPDATE jobs SET state = ?, updated_at = ?,
    run_at = coalesce(?, run_at),
    next_check_at = ?,
    lookup_failures = coalesce(?, lookup_failures),
    result_json = coalesce(?, result_json),
    error_json = coalesce(?, error_json),
    finished_at = ?`;
export const SET_JOB_STATE_BY_ID = `${SET_JOB_STATE} WHERE id = ?`;
export const SET_JOB_STATE_BY_ROWID = `${SET_JOB_STATE} WHERE rowid = ?`;

export function inList(n: number): string {
  return n === 1 ? '?' : Array.from({ length: n }, () => '?').join(',');
}

/** SQL texts that depend on the length of IN lists, built once per arity (then one cached statement each). */
export const sqlByArity = new Map<string, string>();

export function byArity(
  kind: string,
  queues: number,
  operations: number,
  build: () => string,
): string {
  const key = `${kind}:${queues}:${operations}`;
  let sql = sqlByArity.get(key);
  if (sql === undefined) {
    sql = build();
    sqlByArity.set(key, sql);
  }
  return sql;
}

/**
 * A bound row limit: `LIMIT +?`, never `LIMIT ?`. SQLite (3.51, as better-sqlite3 12 bundles it)
 * reads a bare bound LIMIT while planning and marks its parameter as one that changes the plan,
 * so that binding it (on every run) expires the statement: each claim was parsed and planned
 * again (`sqlite3Reprepare` under every claim). The unary plus is the same number to the query and hides the parameter from the
 * planner. The lint forbids `LIMIT ?` in this directory.
 */
export const LIMIT_PARAM = 'LIMIT +?';

/** Due QUEUED jobs of one queue, in claim order, through the partial index jobs_claim. */
export function claimCandidates(operations: number, columns: string): string {
  return `SELECT ${columns} FROM jobs INDEXED BY jobs_claim
    WHERE state = 'QUEUED' AND queue = ? AND run_at <= ? AND operation IN (${inList(operations)})
    ORDER BY priority DESC, run_at, rowid ${LIMIT_PARAM}`;
}

/** Is any job due? (Order does not matter, so one index search per queue.) */
export function claimProbeSql(queues: number, operations: number): string {
  return byArity(
    'probe',
    queues,
    operations,
    () => `SELECT 1 FROM jobs INDEXED BY jobs_claim
      WHERE state = 'QUEUED' AND queue IN (${inList(queues)}) AND run_at <= ?
        AND operation IN (${inList(operations)}) LIMIT 1`,
  );
}

/**
 * Up to `limit` due jobs in claim order, every column (`JobTuple`) and then the rowid. Several
 * queues: the first `limit` of each (each an ordered index range), merged; never a sort of all
 * the waiting jobs. Arguments: see `claimArgs`. Read inside the claim's write transaction, then
 * leased by rowid (`CLAIM_LEASE`): no other writer can come between the two.
 */
export function claimSql(queues: number, operations: number): string {
  return byArity('claim', queues, operations, () =>
    queues === 1
      ? claimCandidates(operations, `${JOB_COLUMNS}, rowid`)
      : `SELECT * FROM (${Array.from(
          { length: queues },
          () => `SELECT * FROM (${claimCandidates(operations, `${JOB_COLUMNS}, rowid AS _rowid`)})`,
        ).join(' UNION ALL ')}) ORDER BY priority DESC, run_at, _rowid ${LIMIT_PARAM}`,
  );
}

/** Leases one claimed job (by the rowid `claimSql` read). */
export const CLAIM_LEASE = `UPDATE jobs SET state = 'LEASED', attempt_count = attempt_count + 1, updated_at = ?,
  next_check_at = NULL WHERE rowid = ? AND state = 'QUEUED'`;

export function claimArgs(
  now: number,
  queues: string[],
  operations: string[],
  limit: number,
): unknown[] {
  const args: unknown[] = [];
  for (const q of queues) args.push(q, now, ...operations, limit);
  if (queues.length > 1) args.push(limit);
  return args;
}

/** Every column of a job, in the order of `JobTuple` (for raw statements). */
export const JOB_COLUMNS = `id, queue, operation, input_json, request_key, request_fingerprint, run_id, step_id, state,
  priority, run_at, created_at, updated_at, finished_at, attempt_count, max_attempts, backoff_json, timeout_ms,
  next_check_at, lookup_failures, result_json, error_json, reconcile_grace_ms, approval_reason,
  approval_expires_at, trace_parent`;

export type JobTuple = [
  id: string,
  queue: string,
  operation: string,
  inputJson: string,
  requestKey: string,
  fingerprint: string,
  runId: string | null,
  stepId: string | null,
  state: JobState,
  priority: number,
  runAt: number,
  createdAt: number,
  updatedAt: number,
  finishedAt: number | null,
  attemptCount: number,
  maxAttempts: number,
  backoffJson: string,
  timeoutMs: number,
  nextCheckAt: number | null,
  lookupFailures: number,
  resultJson: string | null,
  errorJson: string | null,
  reconcileGraceMs: number,
  approvalReason: string | null,
  approvalExpiresAt: number | null,
  traceParent: string | null,
];

/** A claim's row: the job's columns, then its rowid. */
export type ClaimTuple = [...JobTuple, rowid: number];

/** `jobFromRow` for a raw row of `JOB_COLUMNS` (SQLite: times are already epoch-ms numbers). */
export function jobFromTuple(r: JobTuple | ClaimTuple): JobRecord {
  return {
    id: r[0],
    queue: r[1],
    operation: r[2],
    input: JSON.parse(r[3]) as Json,
    requestKey: r[4],
    fingerprint: r[5],
    runId: r[6],
    stepId: r[7],
    state: r[8],
    priority: r[9],
    runAt: r[10],
    createdAt: r[11],
    updatedAt: r[12],
    finishedAt: r[13],
    attemptCount: r[14],
    maxAttempts: r[15],
    backoff: backoffOf(r[16]),
    timeoutMs: r[17],
    nextCheckAt: r[18],
    lookupFailures: r[19],
    result: r[20] === null ? null : (JSON.parse(r[20]) as Json),
    error: r[21] === null ? null : (JSON.parse(r[21]) as ErrorInfo),
    reconcileGraceMs: r[22],
    approvalReason: r[23],
    approvalExpiresAt: r[24],
    traceParent: r[25],
  };
}

export const EVENT_COLUMNS = 9;
/** Rows per events INSERT statement: a few sizes, so a few cached statements. */
export const EVENT_INSERT_ROWS = [64, 16, 4, 1];

export function eventInsertSql(rows: number): string {
  return byArity(
    'events',
    rows,
    0,
    () =>
      `INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
       VALUES ${Array.from({ length: rows }, () => '(?, ?, ?, ?, ?, ?, ?, ?, ?)').join(', ')}`,
  );
}
