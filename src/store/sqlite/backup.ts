/**
 * Backups of a SQLite store, and restores into a new location.
 *
 * The copy is `VACUUM INTO`: one read transaction, so one consistent snapshot however much other
 * processes write meanwhile (SQLite's online backup API restarts whenever another connection
 * writes, and under steady load may never finish; docs/operations.md has the measurements). It
 * runs on a worker thread so that the caller can show progress, is written to a temporary name,
 * checked (integrity, schema version, jobs by state), synced, and only then linked to its name,
 * which must not exist.
 *
 * A restore copies a checked backup to a path that does not exist, and (by default) marks every
 * job that may have been sent after the backup was taken for reconciliation before anything is
 * sent again: the backup cannot hold a dispatch marker written after it (see `reconcileRestored`).
 */
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, linkSync, openSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { BackupInvalid, StoreUnavailable, TargetExists } from '../../core/errors.js';
import { DEFAULT_RECONCILE } from '../../core/operation.js';
import { assertAttemptTransition, assertJobTransition, JOB_STATES } from '../../core/states.js';
import {
  RESTORE_PRESUMED_REASON,
  restoredApprovalEvent,
  restoreFlowMarks,
  restoreMarks,
  type RestoreReconcile,
} from '../plan/index.js';
import { newLeaseToken } from '../rules.js';
import { BACKUP_THREAD_SOURCE } from './backup-thread.js';
import { LATEST_SCHEMA_VERSION } from './schema.js';

export type BackupMethod = 'vacuum-into' | 'online';

/** What a copy was checked to hold. */
export interface CopyCheck {
  schemaVersion: number;
  /** Jobs by state (every state, 0 when none). */
  jobs: Record<string, number>;
  totalJobs: number;
  bytes: number;
  /** The time of the copy's last event: about when the copy was taken. */
  lastEventAt: number | null;
}

export interface BackupResult {
  path: string;
  method: BackupMethod;
  ms: number;
  /** Online backups: how often another connection's write restarted the copy. */
  restarts: number;
  check: CopyCheck;
}

/** Checks a copy: `integrity_check`, a reckon schema this version reads, its jobs by state. */
export function checkCopy(path: string, o: { expectSchemaVersion?: number } = {}): CopyCheck {
  let db: Database.Database;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true });
  } catch (err) {
    throw new BackupInvalid(path, `cannot open it: ${(err as Error).message}`);
  }
  try {
    let integrity: string[];
    try {
      integrity = db.pragma('integrity_check', { simple: false }) as string[];
    } catch (err) {
      throw new BackupInvalid(path, `not a SQLite database: ${(err as Error).message}`);
    }
    const lines = (integrity as unknown as { integrity_check: string }[]).map(
      (r) => r.integrity_check,
    );
    if (lines.join() !== 'ok')
      throw new BackupInvalid(path, `integrity_check: ${lines.slice(0, 5).join('; ')}`);
    const hasMigrations = db
      .prepare(`SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'reckon_migrations'`)
      .get();
    if (!hasMigrations) throw new BackupInvalid(path, 'it has no reckon_migrations table');
    const schemaVersion =
      (db.prepare('SELECT max(version) AS v FROM reckon_migrations').get() as { v: number | null })
        .v ?? 0;
    if (o.expectSchemaVersion !== undefined && schemaVersion !== o.expectSchemaVersion)
      throw new BackupInvalid(
        path,
        `schema version ${schemaVersion}, but the store it copies has ${o.expectSchemaVersion}`,
      );
    if (schemaVersion > LATEST_SCHEMA_VERSION)
      throw new BackupInvalid(
        path,
        `schema version ${schemaVersion} is newer than this reckon reads (${LATEST_SCHEMA_VERSION}); upgrade reckon`,
      );
    const jobs = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<string, number>;
    for (const r of db.prepare('SELECT state, count(*) AS n FROM jobs GROUP BY state').all() as {
      state: string;
      n: number;
    }[])
      jobs[r.state] = r.n;
    const lastEventAt = (db.prepare(LAST_STEP_AT).get() as { t: number | null }).t;
    return {
      schemaVersion,
      jobs,
      totalJobs: Object.values(jobs).reduce((a, b) => a + b, 0),
      bytes: statSync(path).size,
      lastEventAt,
    };
  } finally {
    db.close();
  }
}

function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Links `tmp` to `target` (failing if it exists: never a write over a file), then removes `tmp`. */
function publish(tmp: string, target: string, what: string): void {
  try {
    linkSync(tmp, target);
  } catch (err) {
    if ((err as { code?: string }).code === 'EEXIST') throw new TargetExists(target, what);
    throw err;
  }
  rmSync(tmp, { force: true });
  fsyncPath(dirname(target));
}

function refuseExisting(target: string, what: string): void {
  for (const f of [target, `${target}-wal`, `${target}-shm`, `${target}-journal`])
    if (existsSync(f)) throw new TargetExists(f, what);
  if (!existsSync(dirname(target)))
    throw new StoreUnavailable(`the directory ${dirname(target)} does not exist`);
}

function tempBeside(target: string): string {
  return join(dirname(target), `.${basename(target)}.partial-${randomBytes(4).toString('hex')}`);
}

/** The store's schema version and the copy's expected size (pages in use), read from the source. */
function sourceFacts(source: string): { schemaVersion: number; bytesInUse: number } {
  if (!existsSync(source)) throw new StoreUnavailable(`no store at sqlite:${source}`);
  const db = new Database(source, { fileMustExist: true, timeout: 10_000 });
  try {
    const v = db.prepare('SELECT max(version) AS v FROM reckon_migrations').get() as {
      v: number | null;
    };
    const pages = db.pragma('page_count', { simple: true }) as number;
    const free = db.pragma('freelist_count', { simple: true }) as number;
    const size = db.pragma('page_size', { simple: true }) as number;
    return { schemaVersion: v.v ?? 0, bytesInUse: (pages - free) * size };
  } finally {
    db.close();
  }
}

/** Runs the copy on a worker thread; `onProgress(done, total)` in bytes (vacuum-into) or pages. */
function copyOnThread(p: {
  source: string;
  target: string;
  method: BackupMethod;
  expectBytes: number;
  onProgress?: (done: number, total: number) => void;
}): Promise<{ restarts: number }> {
  return new Promise((resolveCopy, reject) => {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    const worker = new Worker(BACKUP_THREAD_SOURCE, {
      eval: true,
      workerData: {
        driver,
        source: p.source,
        target: p.target,
        method: p.method,
        busyTimeoutMs: 10_000,
      },
    });
    let restarts = 0;
    let settled = false;
    const timer =
      p.method === 'vacuum-into' && p.onProgress
        ? setInterval(() => {
            const done = existsSync(p.target) ? statSync(p.target).size : 0;
            p.onProgress!(Math.min(done, p.expectBytes), p.expectBytes);
          }, 100)
        : undefined;
    const end = (err?: Error) => {
      if (settled) return;
      settled = true;
      if (timer) clearInterval(timer);
      if (err) reject(err);
      else resolveCopy({ restarts });
    };
    worker.on(
      'message',
      (m: {
        progress?: [number, number];
        restarts?: number;
        done?: boolean;
        error?: { message: string };
      }) => {
        if (m.progress) {
          restarts = m.restarts ?? restarts;
          p.onProgress?.(m.progress[0], m.progress[1]);
        }
        if (m.done) {
          p.onProgress?.(p.expectBytes, p.expectBytes);
          end();
        }
        if (m.error)
          end(new StoreUnavailable(`backup of sqlite:${p.source} failed: ${m.error.message}`));
      },
    );
    worker.on('error', (err) => end(err));
    worker.on('exit', (code) =>
      end(code === 0 ? undefined : new Error(`backup thread exited ${code}`)),
    );
  });
}

/**
 * A consistent, checked copy of the store at `source` in the new file `target`, taken while other
 * processes go on writing. Refuses a target that exists.
 */
export async function backupSqlite(p: {
  source: string;
  target: string;
  method?: BackupMethod;
  onProgress?: (done: number, total: number) => void;
}): Promise<BackupResult> {
  const source = resolve(p.source);
  const target = resolve(p.target);
  const method = p.method ?? 'vacuum-into';
  if (source === target) throw new TargetExists(target, 'a backup');
  refuseExisting(target, 'a backup');
  const facts = sourceFacts(source);
  const tmp = tempBeside(target);
  const started = performance.now();
  try {
    const { restarts } = await copyOnThread({
      source,
      target: tmp,
      method,
      expectBytes: facts.bytesInUse,
      ...(p.onProgress ? { onProgress: p.onProgress } : {}),
    });
    const check = checkCopy(tmp, { expectSchemaVersion: facts.schemaVersion });
    fsyncPath(tmp);
    publish(tmp, target, 'a backup');
    return { path: target, method, ms: Math.round(performance.now() - started), restarts, check };
  } finally {
    rmSync(tmp, { force: true });
    rmSync(`${tmp}-journal`, { force: true });
  }
}

/** Which jobs a restore marks for reconciliation before anything is sent again. */
/** The last recorded step: an event, or a routine step in its row's columns (invariant 8). */
const LAST_STEP_AT = `SELECT max(t) AS t FROM (SELECT max(at) AS t FROM events
       UNION ALL SELECT max(updated_at) FROM jobs UNION ALL SELECT max(dispatched_at) FROM attempts) s`;

export type { RestoreReconcile };

export interface RestoreResult {
  path: string;
  check: CopyCheck;
  /**
   * Jobs moved to UNKNOWN: LEASED without a marker, QUEUED and due (with 'unfinished'); and
   * jobs AWAITING_APPROVAL moved to NEEDS_REVIEW (their decision on the old host is unknown).
   */
  reconciled: { leased: number; queued: number; approvals: number };
  /** LEASED jobs whose attempt has its marker: UNKNOWN by the normal rules once the lease expires. */
  leasedWithMarker: number;
}

/**
 * Restores the backup at `backup` as a new store at `target` (which must not exist).
 */
export function restoreSqlite(p: {
  backup: string;
  target: string;
  reconcile: RestoreReconcile;
  now?: () => number;
}): RestoreResult {
  const backup = resolve(p.backup);
  const target = resolve(p.target);
  if (existsSync(`${backup}-wal`) && statSync(`${backup}-wal`).size > 0)
    throw new BackupInvalid(
      backup,
      'it has a write-ahead log beside it, so it is a live store: copy it with `reckon backup` first',
    );
  refuseExisting(target, 'a restore');
  checkCopy(backup);
  const tmp = tempBeside(target);
  try {
    copyWithVacuum(backup, tmp);
    const rdb = new Database(tmp);
    let counts: ReturnType<typeof reconcileRestored>;
    try {
      rdb.pragma('foreign_keys = ON');
      const now = (p.now ?? Date.now)();
      counts = reconcileRestored(rdb, p.reconcile, now);
      restoreFlow(rdb, p.reconcile, now);
      rdb.pragma('journal_mode = WAL');
    } finally {
      rdb.close();
    }
    const check = checkCopy(tmp);
    fsyncPath(tmp);
    publish(tmp, target, 'a restore');
    return { path: target, check, ...counts };
  } finally {
    for (const f of [tmp, `${tmp}-wal`, `${tmp}-shm`, `${tmp}-journal`]) rmSync(f, { force: true });
  }
}

/** A fresh copy of a (checked, idle) backup file, by one read of it. */
function copyWithVacuum(from: string, to: string): void {
  const db = new Database(from, { readonly: true, fileMustExist: true });
  try {
    db.prepare('VACUUM INTO ?').run(to);
  } finally {
    db.close();
  }
}

const PRESUMED_REASON = RESTORE_PRESUMED_REASON;

/**
 * The backup holds no fact written after it. A job LEASED in it without a marker may have had its
 * marker and its request after the backup; a QUEUED job may have been claimed and sent after it.
 * Sending either again blindly could repeat a side effect, so (per `mode`) each one's attempt is
 * ended UNKNOWN, its dispatch presumed at the restore's time (the event says so), and the job goes
 * to reconciliation: a lookup where the operation has one, a same-key retry where the downstream
 * deduplicates, review otherwise. LEASED attempts with a marker keep it: the reclaimer makes them
 * UNKNOWN when their lease expires, by the normal rules.
 */
export function reconcileRestored(
  db: Database.Database,
  mode: RestoreReconcile,
  now: number,
): { reconciled: { leased: number; queued: number; approvals: number }; leasedWithMarker: number } {
  const out = { reconciled: { leased: 0, queued: 0, approvals: 0 }, leasedWithMarker: 0 };
  const marks = restoreMarks(mode);
  const lastEventAt = (db.prepare(LAST_STEP_AT).get() as { t: number | null }).t;
  const detail = (extra: Record<string, unknown>) =>
    JSON.stringify({ ...extra, presumedDispatch: true, backupLastEventAt: lastEventAt });
  const event = db.prepare(
    `INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
     VALUES (?, ?, ?, ?, ?, ?, 'restore', ?, ?)`,
  );
  const endUnknown = (j: { id: string; fp: string; no: number; timeout: number }) => {
    assertAttemptTransition('LEASED', 'UNKNOWN');
    assertJobTransition('LEASED', 'UNKNOWN');
    db.prepare(
      `UPDATE attempts SET state = 'UNKNOWN', dispatched_at = ?, finished_at = ?, reason = ?
       WHERE job_id = ? AND attempt_no = ? AND state = 'LEASED'`,
    ).run(now, now, PRESUMED_REASON, j.id, j.no);
    db.prepare(
      `UPDATE jobs SET state = 'UNKNOWN', updated_at = ?, next_check_at = ?, lookup_failures = 0
       WHERE id = ?`,
    ).run(now, now + j.timeout + DEFAULT_RECONCILE.graceMs, j.id);
    const d = detail({ attemptState: 'UNKNOWN', reason: PRESUMED_REASON });
    event.run(j.id, j.no, j.fp, 'attempt-unknown', 'LEASED', 'UNKNOWN', d, now);
  };
  db.transaction(() => {
    const leased = db
      .prepare(
        `SELECT j.id, j.request_fingerprint AS fp, j.attempt_count AS no, j.timeout_ms AS timeout,
           a.dispatched_at AS marker
         FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.attempt_no = j.attempt_count
         WHERE j.state = 'LEASED' AND a.state = 'LEASED'`,
      )
      .all() as { id: string; fp: string; no: number; timeout: number; marker: number | null }[];
    for (const j of leased) {
      if (j.marker !== null) out.leasedWithMarker++;
      else if (marks.leased) {
        endUnknown(j);
        out.reconciled.leased++;
      }
    }
    if (marks.approvals) out.reconciled.approvals = approvalsToReview(db, lastEventAt, now);
    if (!marks.queued) return;
    const queued = db
      .prepare(
        `SELECT id, request_key AS key, request_fingerprint AS fp, attempt_count + 1 AS no,
           timeout_ms AS timeout FROM jobs WHERE state = 'QUEUED' AND run_at <= ?`,
      )
      .all(now) as { id: string; key: string; fp: string; no: number; timeout: number }[];
    const insertAttempt = db.prepare(
      `INSERT INTO attempts (job_id, attempt_no, request_key, request_fingerprint, state, owner_id,
         lease_token, leased_at, lease_expires_at)
       VALUES (?, ?, ?, ?, 'LEASED', 'restore', ?, ?, ?)`,
    );
    const lease = db.prepare(
      `UPDATE jobs SET state = 'LEASED', attempt_count = ?, updated_at = ?, next_check_at = NULL
       WHERE id = ? AND state = 'QUEUED'`,
    );
    for (const j of queued) {
      assertJobTransition('QUEUED', 'LEASED');
      insertAttempt.run(j.id, j.no, j.key, j.fp, newLeaseToken(), now, now);
      lease.run(j.no, now, j.id);
      event.run(j.id, j.no, j.fp, 'leased', 'QUEUED', 'LEASED', detail({ restore: true }), now);
      endUnknown(j);
      out.reconciled.queued++;
    }
  }).immediate();
  return out;
}

/** Flow control after a restore (plan/restore.ts): pauses kept, rate state cleared, schedules on. */
function restoreFlow(db: Database.Database, mode: RestoreReconcile, now: number): void {
  const { advanceSchedules } = restoreFlowMarks(mode);
  // A backup from before flow control (schema < 9) has none of it: the migration adds it empty.
  if (!db.prepare(`SELECT 1 FROM sqlite_master WHERE name = 'flow_schedules'`).get()) return;
  db.transaction(() => {
    db.prepare('DELETE FROM flow_starts').run();
    db.prepare('DELETE FROM flow_holds').run();
    if (advanceSchedules)
      db.prepare('UPDATE flow_schedules SET last_slot_at = ? WHERE last_slot_at < ?').run(now, now);
  }).immediate();
}

/** Every job AWAITING_APPROVAL goes to review with the doubt as its event (plan/restore.ts). */
function approvalsToReview(
  db: Database.Database,
  backupLastEventAt: number | null,
  now: number,
): number {
  const moved = db
    .prepare(
      `SELECT id, request_fingerprint AS fp, approval_expires_at AS x FROM jobs
       WHERE state = 'AWAITING_APPROVAL'`,
    )
    .all() as { id: string; fp: string; x: number | null }[];
  db.prepare(
    `UPDATE jobs SET state = 'NEEDS_REVIEW', updated_at = ?, approval_expires_at = NULL
     WHERE state = 'AWAITING_APPROVAL'`,
  ).run(now);
  const insert = db.prepare(
    `INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  for (const m of moved) {
    const e = restoredApprovalEvent({ backupLastEventAt, approvalExpiresAt: m.x });
    insert.run(m.id, e.attemptNo, m.fp, e.kind, e.fromState, e.toState, e.actor, e.detailJson, now);
  }
  return moved.length;
}
