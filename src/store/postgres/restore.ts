/**
 * A PostgreSQL store restored from a `pg_dump` of its schema, into a new database: the same
 * marking as the SQLite restore (../sqlite/backup.ts, `reconcileRestored`) before any worker sees
 * it. The dump holds no fact written after it, so every job that may have been sent since (per
 * `mode`) gets its attempt ended UNKNOWN with the dispatch presumed at the restore, and goes to
 * reconciliation (lookup, same-key retry, or review) instead of being sent again blindly.
 */
import { spawn } from 'node:child_process';
import pg from 'pg';
import { StoreUnavailable, TargetExists } from '../../core/errors.js';
import { DEFAULT_RECONCILE } from '../../core/operation.js';
import { assertAttemptTransition, assertJobTransition } from '../../core/states.js';

export type PgRestoreReconcile = 'unfinished' | 'leased' | 'none';

export interface PgRestoreResult {
  schemaVersion: number;
  jobs: Record<string, number>;
  reconciled: { leased: number; queued: number };
  leasedWithMarker: number;
}

const REASON = 'restored-from-backup-may-have-been-sent';
const NOW = `date_trunc('milliseconds', clock_timestamp())`;

function run(command: string, args: string[]): Promise<void> {
  return new Promise((done, fail) => {
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', (err) =>
      fail(new StoreUnavailable(`cannot run ${command}: ${err.message} (is it on PATH?)`, err)),
    );
    child.on('exit', (code) =>
      code === 0
        ? done()
        : fail(new StoreUnavailable(`${command} exited ${code}: ${stderr.trim().slice(0, 2000)}`)),
    );
  });
}

/**
 * Restores `dump` (pg_dump --format=custom of one schema) into the database of
 * `connectionString`, where `schema` must not exist yet, then marks the jobs (see above).
 */
export async function restorePg(p: {
  dump: string;
  connectionString: string;
  schema: string;
  location: string;
  reconcile: PgRestoreReconcile;
}): Promise<PgRestoreResult> {
  const client = new pg.Client({ connectionString: p.connectionString });
  await client.connect();
  try {
    const exists = await client.query<{ e: boolean }>(
      'SELECT to_regnamespace($1::text) IS NOT NULL AS e',
      [pg.escapeIdentifier(p.schema)],
    );
    if (exists.rows[0]!.e) throw new TargetExists(`${p.location} schema ${p.schema}`, 'a restore');
    await run('pg_restore', [
      '--exit-on-error',
      '--single-transaction',
      `--dbname=${p.connectionString}`,
      p.dump,
    ]);
    const after = await client.query<{ e: boolean }>(
      'SELECT to_regclass($1::text) IS NOT NULL AS e',
      [`${pg.escapeIdentifier(p.schema)}.jobs`],
    );
    if (!after.rows[0]!.e)
      throw new StoreUnavailable(
        `the dump restored no ${p.schema}.jobs table: was it taken with --schema=${p.schema}?`,
      );
    return await reconcilePg(client, p.schema, p.reconcile);
  } finally {
    await client.end();
  }
}

async function reconcilePg(
  c: pg.Client,
  schema: string,
  mode: PgRestoreReconcile,
): Promise<PgRestoreResult> {
  assertJobTransition('QUEUED', 'LEASED');
  assertJobTransition('LEASED', 'UNKNOWN');
  assertAttemptTransition('LEASED', 'UNKNOWN');
  await c.query('BEGIN');
  try {
    await c.query(`SET LOCAL search_path TO ${pg.escapeIdentifier(schema)}`);
    // The last recorded step: an event, or a routine step in its row's columns (invariant 8).
    const last = await c.query<{ t: Date | null }>(
      `SELECT max(t) AS t FROM (SELECT max(at) AS t FROM events
       UNION ALL SELECT max(updated_at) FROM jobs UNION ALL SELECT max(dispatched_at) FROM attempts) s`,
    );
    const detail = (extra: object) =>
      JSON.stringify({
        ...extra,
        presumedDispatch: true,
        backupLastEventAt: last.rows[0]!.t?.getTime() ?? null,
      });
    const marked = await c.query<{ n: string }>(
      `SELECT count(*) AS n FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.attempt_no = j.attempt_count
       WHERE j.state = 'LEASED' AND a.state = 'LEASED' AND a.dispatched_at IS NOT NULL`,
    );
    await c.query(
      `CREATE TEMP TABLE reckon_restore (id text, no int, fp text, timeout_ms bigint) ON COMMIT DROP`,
    );
    let leased = 0;
    let queued = 0;
    if (mode !== 'none')
      leased =
        (
          await c.query(`INSERT INTO reckon_restore
          SELECT j.id, j.attempt_count, j.request_fingerprint, j.timeout_ms
          FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.attempt_no = j.attempt_count
          WHERE j.state = 'LEASED' AND a.state = 'LEASED' AND a.dispatched_at IS NULL`)
        ).rowCount ?? 0;
    if (mode === 'unfinished') {
      queued = await leaseDue(c, detail({ restore: true }));
    }
    await markUnknown(c, detail({ attemptState: 'UNKNOWN', reason: REASON }));
    const v = await c.query<{ v: number | null }>(
      'SELECT max(version) AS v FROM reckon_migrations',
    );
    const counts = await c.query<{ state: string; n: string }>(
      'SELECT state, count(*) AS n FROM jobs GROUP BY state',
    );
    await c.query('COMMIT');
    return {
      schemaVersion: Number(v.rows[0]?.v ?? 0),
      jobs: Object.fromEntries(counts.rows.map((r) => [r.state, Number(r.n)])),
      reconciled: { leased, queued },
      leasedWithMarker: Number(marked.rows[0]!.n),
    };
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/** Leases every due QUEUED job to "restore" (listed in reckon_restore); how many. */
async function leaseDue(c: pg.Client, detailJson: string): Promise<number> {
  const q = await c.query(
    `WITH due AS (
       SELECT id, attempt_count + 1 AS no, request_key, request_fingerprint AS fp, timeout_ms
       FROM jobs WHERE state = 'QUEUED' AND run_at <= ${NOW} FOR UPDATE),
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
       SELECT id, no, fp, 'leased', 'QUEUED', 'LEASED', 'restore', $1, ${NOW} FROM due)
     INSERT INTO reckon_restore SELECT id, no, fp, timeout_ms FROM due`,
    [detailJson],
  );
  return q.rowCount ?? 0;
}

/** Ends the listed attempts UNKNOWN, their jobs UNKNOWN due for a lookup, with events. */
async function markUnknown(c: pg.Client, detailJson: string): Promise<void> {
  await c.query(
    `UPDATE attempts a SET state = 'UNKNOWN', dispatched_at = ${NOW}, finished_at = ${NOW}, reason = $1
     FROM reckon_restore r WHERE a.job_id = r.id AND a.attempt_no = r.no AND a.state = 'LEASED'`,
    [REASON],
  );
  await c.query(
    `UPDATE jobs j SET state = 'UNKNOWN', updated_at = ${NOW}, lookup_failures = 0,
       next_check_at = ${NOW} + (r.timeout_ms + $1::bigint) * interval '1 millisecond'
     FROM reckon_restore r WHERE j.id = r.id`,
    [DEFAULT_RECONCILE.graceMs],
  );
  await c.query(
    `INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
     SELECT id, no, fp, 'attempt-unknown', 'LEASED', 'UNKNOWN', 'restore', $1, ${NOW} FROM reckon_restore`,
    [detailJson],
  );
}
