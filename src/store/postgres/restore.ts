/**
 * A PostgreSQL store restored from a `pg_dump` of its schema, into a new database: the same
 * marking as the SQLite restore (../sqlite/backup.ts, `reconcileRestored`; the rules in
 * ../plan/restore.ts) before any worker sees it. The dump holds no fact written after it, so
 * every job that may have been sent since (per `mode`) gets its attempt ended UNKNOWN with the
 * dispatch presumed at the restore, and goes to reconciliation (lookup, same-key retry, or
 * review) instead of being sent again blindly; every job awaiting approval goes to review.
 *
 * Atomic: `pg_restore --file=-` turns the dump into SQL (it connects to nothing), and psql runs
 * that SQL and then the marking in ONE transaction. No worker can see the restored jobs before
 * they are marked, and a failure anywhere leaves nothing (a second restore starts clean). The
 * dump cannot be restored under a temporary schema name and renamed instead: its functions pin
 * `search_path` to the schema's name (schema.ts, `SET search_path FROM CURRENT`).
 *
 * Secrets stay off command lines (`ps` shows them to every user of the host): psql gets the
 * connection URL without its password, and the password in PGPASSWORD.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import pg from 'pg';
import { StoreUnavailable, TargetExists } from '../../core/errors.js';
import { DEFAULT_RECONCILE } from '../../core/operation.js';
import { assertAttemptTransition, assertJobTransition } from '../../core/states.js';
import {
  RESTORE_PRESUMED_REASON,
  restoredApprovalEvent,
  restoreFlowMarks,
  restoreMarks,
  type RestoreReconcile,
} from '../plan/index.js';

export type PgRestoreReconcile = RestoreReconcile;

export interface PgRestoreResult {
  schemaVersion: number;
  jobs: Record<string, number>;
  reconciled: { leased: number; queued: number; approvals: number };
  leasedWithMarker: number;
}

/** Test seams: `afterLoad` runs once the dump's SQL is in the open transaction, before marking. */
export interface PgRestoreHooks {
  afterLoad?: () => Promise<void>;
}

const NOW = `date_trunc('milliseconds', clock_timestamp())`;
/** Prefixes the one line of psql output that carries the marking's counts. */
const RESULT_TAG = 'reckon-restore-result:';

/** The URL without its password, and the environment that carries the password instead. */
export function connectionForTools(connectionString: string): {
  url: string;
  env: NodeJS.ProcessEnv;
} {
  const u = new URL(connectionString);
  const password = decodeURIComponent(u.password);
  u.password = '';
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (password !== '') env.PGPASSWORD = password;
  return { url: u.toString(), env };
}

/**
 * Restores `dump` (pg_dump --format=custom of one schema) into the database of
 * `connectionString`, where `schema` must not exist yet, and marks the jobs (see above), in one
 * transaction.
 */
export async function restorePg(p: {
  dump: string;
  connectionString: string;
  schema: string;
  location: string;
  reconcile: PgRestoreReconcile;
  hooks?: PgRestoreHooks;
}): Promise<PgRestoreResult> {
  const client = new pg.Client({ connectionString: p.connectionString });
  await client.connect();
  try {
    const exists = await client.query<{ e: boolean }>(
      'SELECT to_regnamespace($1::text) IS NOT NULL AS e',
      [pg.escapeIdentifier(p.schema)],
    );
    if (exists.rows[0]!.e) throw new TargetExists(`${p.location} schema ${p.schema}`, 'a restore');
  } finally {
    await client.end();
  }
  const out = await loadAndMark(p);
  const line = out.split('\n').find((l) => l.startsWith(RESULT_TAG));
  if (!line)
    throw new StoreUnavailable(
      `the restore into ${p.location} printed no result: ${out.slice(0, 500)}`,
    );
  return JSON.parse(line.slice(RESULT_TAG.length)) as PgRestoreResult;
}

/** pg_restore's SQL, then the marking, piped into one psql transaction; psql's stdout. */
async function loadAndMark(p: {
  dump: string;
  connectionString: string;
  schema: string;
  reconcile: PgRestoreReconcile;
  hooks?: PgRestoreHooks;
}): Promise<string> {
  const { url, env } = connectionForTools(p.connectionString);
  const psql = tool(
    'psql',
    ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', `--dbname=${url}`],
    env,
  );
  const dump = tool('pg_restore', ['--exit-on-error', '--file=-', p.dump], env);
  psql.child.stdin!.write('BEGIN;\n');
  dump.child.stdout!.pipe(psql.child.stdin!, { end: false });
  try {
    await dump.done;
    await p.hooks?.afterLoad?.();
    psql.child.stdin!.end(`${markingSql(p.schema, p.reconcile)}\nCOMMIT;\n`);
    await psql.done;
  } catch (err) {
    // psql ends without a COMMIT: its transaction is rolled back, nothing was restored.
    dump.child.kill('SIGKILL');
    psql.child.kill('SIGKILL');
    await psql.done.catch(() => undefined);
    throw err;
  }
  return psql.stdout();
}

function tool(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): { child: ChildProcess; done: Promise<void>; stdout: () => string } {
  const child = spawn(command, args, {
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  if (command === 'psql') child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  // A psql that died leaves the pipe from pg_restore broken: the exit code tells what happened.
  child.stdin.on('error', () => undefined);
  const done = new Promise<void>((resolve, reject) => {
    child.on('error', (err) =>
      reject(new StoreUnavailable(`cannot run ${command}: ${err.message} (is it on PATH?)`, err)),
    );
    child.on('exit', (code, signal) =>
      code === 0
        ? resolve()
        : reject(
            new StoreUnavailable(
              `${command} exited ${code ?? signal}: ${stderr.trim().slice(0, 2000)}`,
            ),
          ),
    );
  });
  return { child, done, stdout: () => stdout };
}

/** Flow control after a restore (plan/restore.ts): pauses kept, rate state cleared, schedules on. */
function flowSql(mode: PgRestoreReconcile): string {
  return `DO $$ BEGIN
  -- A dump from before flow control (schema < 9) has none of it: the migration adds it empty.
  IF to_regclass('flow_schedules') IS NOT NULL THEN
    DELETE FROM flow_starts;
    DELETE FROM flow_holds;
    UPDATE flow_schedules SET last_slot_at = ${NOW}
      WHERE ${restoreFlowMarks(mode).advanceSchedules} AND last_slot_at < ${NOW};
  END IF;
END $$;`;
}

/**
 * The marking as SQL for psql, inside the restore's transaction: the jobs to mark in a temp
 * table, their attempts ended UNKNOWN (due QUEUED ones leased to "restore" first), awaiting
 * approvals to review, then one tagged line of counts (PgRestoreResult).
 */
function markingSql(schema: string, mode: PgRestoreReconcile): string {
  assertJobTransition('QUEUED', 'LEASED');
  assertJobTransition('LEASED', 'UNKNOWN');
  assertAttemptTransition('LEASED', 'UNKNOWN');
  const marks = restoreMarks(mode);
  const lit = (v: string) => pg.escapeLiteral(v);
  // The last recorded step: an event, or a routine step in its row's columns (invariant 8).
  const last = `(SELECT (extract(epoch FROM max(t)) * 1000)::bigint FROM (SELECT max(at) AS t FROM events
    UNION ALL SELECT max(updated_at) FROM jobs UNION ALL SELECT max(dispatched_at) FROM attempts) s)`;
  const detail = (extra: object) =>
    `(${lit(JSON.stringify({ ...extra, presumedDispatch: true }))}::jsonb
      || jsonb_build_object('backupLastEventAt', ${last}))::text`;
  const approval = restoredApprovalEvent({ backupLastEventAt: null, approvalExpiresAt: null });
  return `
SET LOCAL search_path TO ${pg.escapeIdentifier(schema)};
DO $$ BEGIN
  IF to_regclass('jobs') IS NULL THEN
    RAISE EXCEPTION '%', ${lit(`the dump restored no ${schema}.jobs table: was it taken with --schema=${schema}?`)};
  END IF;
END $$;
CREATE TEMP TABLE reckon_restore (id text, no int, fp text, timeout_ms bigint, queued bool) ON COMMIT DROP;
CREATE TEMP TABLE reckon_restore_marked ON COMMIT DROP AS
  SELECT count(*) AS n FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.attempt_no = j.attempt_count
  WHERE j.state = 'LEASED' AND a.state = 'LEASED' AND a.dispatched_at IS NOT NULL;
INSERT INTO reckon_restore
  SELECT j.id, j.attempt_count, j.request_fingerprint, j.timeout_ms, false
  FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.attempt_no = j.attempt_count
  WHERE ${marks.leased} AND j.state = 'LEASED' AND a.state = 'LEASED' AND a.dispatched_at IS NULL;
WITH due AS (
  SELECT id, attempt_count + 1 AS no, request_key, request_fingerprint AS fp, timeout_ms
  FROM jobs WHERE ${marks.queued} AND state = 'QUEUED' AND run_at <= ${NOW}),
att AS (
  INSERT INTO attempts (job_id, attempt_no, request_key, request_fingerprint, state, owner_id,
    lease_token, leased_at, lease_expires_at)
  SELECT id, no, request_key, fp, 'LEASED', 'restore', gen_random_uuid()::text, ${NOW}, ${NOW}
  FROM due),
job AS (
  UPDATE jobs SET state = 'LEASED', attempt_count = due.no, updated_at = ${NOW}, next_check_at = NULL
  FROM due WHERE jobs.id = due.id),
ev AS (
  INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
  SELECT id, no, fp, 'leased', 'QUEUED', 'LEASED', 'restore', ${detail({ restore: true })}, ${NOW} FROM due)
INSERT INTO reckon_restore SELECT id, no, fp, timeout_ms, true FROM due;
UPDATE attempts a SET state = 'UNKNOWN', dispatched_at = ${NOW}, finished_at = ${NOW},
  reason = ${lit(RESTORE_PRESUMED_REASON)}
FROM reckon_restore r WHERE a.job_id = r.id AND a.attempt_no = r.no AND a.state = 'LEASED';
UPDATE jobs j SET state = 'UNKNOWN', updated_at = ${NOW}, lookup_failures = 0,
  next_check_at = ${NOW} + (r.timeout_ms + ${DEFAULT_RECONCILE.graceMs}) * interval '1 millisecond'
FROM reckon_restore r WHERE j.id = r.id;
INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
SELECT id, no, fp, 'attempt-unknown', 'LEASED', 'UNKNOWN', 'restore',
  ${detail({ attemptState: 'UNKNOWN', reason: RESTORE_PRESUMED_REASON })}, ${NOW}
FROM reckon_restore ORDER BY id;
CREATE TEMP TABLE reckon_restore_review ON COMMIT DROP AS
WITH moved AS (
  UPDATE jobs j SET state = 'NEEDS_REVIEW', updated_at = ${NOW}, approval_expires_at = NULL
  FROM (SELECT id, approval_expires_at AS x FROM jobs WHERE state = 'AWAITING_APPROVAL' FOR UPDATE) o
  WHERE ${marks.approvals} AND j.id = o.id
  RETURNING j.id, j.request_fingerprint AS fp, o.x)
SELECT * FROM moved;
INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
SELECT id, NULL, fp, ${lit(approval.kind)}, 'AWAITING_APPROVAL', 'NEEDS_REVIEW', ${lit(approval.actor)},
  (${lit(approval.detailJson!)}::jsonb || jsonb_build_object('backupLastEventAt', ${last},
    'approvalExpiresAt', (extract(epoch FROM x) * 1000)::bigint))::text, ${NOW}
FROM reckon_restore_review ORDER BY id;
${flowSql(mode)}
SELECT ${lit(RESULT_TAG)} || json_build_object(
  'schemaVersion', (SELECT coalesce(max(version), 0) FROM reckon_migrations),
  'jobs', (SELECT coalesce(json_object_agg(state, n), '{}') FROM
    (SELECT state, count(*) AS n FROM jobs GROUP BY state) c),
  'reconciled', json_build_object(
    'leased', (SELECT count(*) FROM reckon_restore WHERE NOT queued),
    'queued', (SELECT count(*) FROM reckon_restore WHERE queued),
    'approvals', (SELECT count(*) FROM reckon_restore_review)),
  'leasedWithMarker', (SELECT n FROM reckon_restore_marked))::text;`;
}
