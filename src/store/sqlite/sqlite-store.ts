/**
 * The embedded store: one SQLite file shared by every process on one host.
 *
 * Durability: WAL with synchronous=FULL, so a transaction is on disk when commit returns
 * (invariant 1). Every write is one `BEGIN IMMEDIATE` transaction, which serializes writers
 * across processes; readers are never blocked (WAL). The lease clock is the host clock, shared
 * by every process on the host (DESIGN §3); tests inject one.
 */
import Database from 'better-sqlite3';
import {
  InvalidInput,
  RequestKeyConflict,
  SchemaTooNew,
  StoreCorrupt,
  StoreReadOnly,
  StoreUnavailable,
  assert,
} from '../../core/errors.js';
import type { JobState } from '../../core/states.js';
import { JOB_STATES } from '../../core/states.js';
import {
  assertFinishLegal,
  assertTransitionLegal,
  leaseHolds,
  newLeaseToken,
  transitionApplies,
} from '../rules.js';
import {
  attemptFromRow,
  eventFromRow,
  jobFromRow,
  jsonOrNull,
  type AttemptRow,
  type EventRow,
  type JobRow,
} from '../rows.js';
import type {
  AttemptExpire,
  AttemptFinish,
  AttemptRecord,
  ClaimedAttempt,
  DispatchMarkResult,
  EventInsert,
  ExpiredAttempt,
  HeartbeatResult,
  JobCancelResult,
  JobDetail,
  JobInsert,
  JobInsertResult,
  JobListParams,
  JobRecord,
  JobTransition,
  LeaseRef,
  Store,
  StoreCapabilities,
  StoreStats,
} from '../store.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from './schema.js';

export interface SqliteStoreOptions {
  /** File path, or `:memory:` (one process only). */
  path: string;
  /** How long a writer waits for another process's write transaction before failing. */
  busyTimeoutMs?: number;
  /** The store's clock (ms since epoch). Default `Date.now`; tests move it. */
  clock?: () => number;
}

export const DEFAULT_BUSY_TIMEOUT_MS = 10_000;
/**
 * How often a subscribed store checks `PRAGMA data_version`, which changes when another
 * connection (another process) commits. A read of the shared-memory header, a few µs: at 2 ms it
 * costs well under 1% of a core and lets a worker in another process start a job about 1 ms
 * after its enqueue commits, instead of after half a poll interval.
 */
export const WORK_CHECK_INTERVAL_MS = 2;

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const;
  readonly location: string;
  readonly capabilities: StoreCapabilities = {
    clock: 'host',
    multiHost: false,
    crossProcessNotify: true,
  };
  private db: Database.Database | null = null;
  private readonly now: () => number;
  private readonly busyTimeoutMs: number;
  private stmtCache = new Map<string, Database.Statement>();
  /** Writes waiting for the next group commit (see `write`). */
  private writeQueue: {
    fn: () => unknown;
    resolve: (v: unknown) => void;
    reject: (err: unknown) => void;
  }[] = [];
  private flushScheduled = false;

  constructor(private readonly options: SqliteStoreOptions) {
    this.location = `sqlite:${options.path}`;
    this.now = options.clock ?? Date.now;
    this.busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
  }

  // ---------------------------------------------------------------- lifecycle

  init(): Promise<void> {
    if (this.db) return Promise.resolve();
    let db: Database.Database;
    try {
      db = new Database(this.options.path, { timeout: this.busyTimeoutMs });
    } catch (err) {
      return Promise.reject(this.classifyOpenError(err));
    }
    try {
      // Reading the schema fails at once on a file that is not a database.
      db.pragma('schema_version');
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = FULL');
      db.pragma('foreign_keys = ON');
      const check = db.pragma('quick_check', { simple: true }) as string;
      if (check !== 'ok')
        throw Object.assign(new Error(`quick_check: ${check}`), { code: 'SQLITE_CORRUPT' });
      this.db = db;
      this.migrate();
    } catch (err) {
      db.close();
      this.db = null;
      return Promise.reject(this.classifyOpenError(err));
    }
    return Promise.resolve();
  }

  private classifyOpenError(err: unknown): Error {
    if (err instanceof SchemaTooNew || err instanceof StoreCorrupt || err instanceof StoreReadOnly)
      return err;
    const code = (err as { code?: string }).code ?? '';
    if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT'))
      return new StoreCorrupt(this.location, err);
    if (
      code.startsWith('SQLITE_READONLY') ||
      code === 'SQLITE_PERM' ||
      (code === 'SQLITE_CANTOPEN' && /readonly|read-only/i.test(String(err)))
    ) {
      return new StoreReadOnly(this.location, err);
    }
    // better-sqlite3 throws a bare TypeError, with no code, for a missing directory.
    if (err instanceof TypeError && /directory does not exist/.test(err.message)) {
      return new StoreUnavailable(
        `cannot open ${this.location}: its directory does not exist`,
        err,
      );
    }
    if (code.startsWith('SQLITE_CANTOPEN'))
      return new StoreUnavailable(
        `cannot open ${this.location}: ${String((err as Error).message)} (does the directory exist?)`,
        err,
      );
    return err instanceof Error ? err : new Error(String(err));
  }

  private migrate(): void {
    const db = this.conn();
    db.exec(
      `CREATE TABLE IF NOT EXISTS reckon_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
    );
    // IMMEDIATE: two processes starting at once migrate one after the other.
    db.transaction(() => {
      const current = this.currentVersion();
      if (current > LATEST_SCHEMA_VERSION)
        throw new SchemaTooNew(this.location, current, LATEST_SCHEMA_VERSION);
      for (const m of MIGRATIONS) {
        if (m.version <= current) continue;
        db.exec(m.sql);
        db.prepare(
          'INSERT INTO reckon_migrations (version, name, applied_at) VALUES (?, ?, ?)',
        ).run(m.version, m.name, this.now());
      }
    }).immediate();
  }

  private currentVersion(): number {
    const row = this.conn().prepare('SELECT max(version) AS v FROM reckon_migrations').get() as {
      v: number | null;
    };
    return row.v ?? 0;
  }

  schemaVersion(): Promise<number> {
    return Promise.resolve(this.currentVersion());
  }

  close(): Promise<void> {
    // Writes already started are committed (or rejected) before the file closes.
    if (this.db) this.flushWrites();
    this.stmtCache.clear();
    this.db?.close();
    this.db = null;
    return Promise.resolve();
  }

  clockNow(): Promise<number> {
    return Promise.resolve(this.now());
  }

  private conn(): Database.Database {
    if (!this.db) throw new StoreUnavailable(`${this.location} is closed`);
    return this.db;
  }

  private stmt(sql: string): Database.Statement {
    let s = this.stmtCache.get(sql);
    if (!s) {
      s = this.conn().prepare(sql);
      this.stmtCache.set(sql, s);
    }
    return s;
  }

  /**
   * Runs `fn` in an IMMEDIATE write transaction; resolves after the durable commit.
   *
   * Group commit: better-sqlite3 is synchronous, so the writes that callers in this process
   * start within one turn of the event loop (concurrent enqueues, the dispatch markers and
   * outcomes of concurrent attempts, claims, heartbeats) are queued and run together in ONE
   * `BEGIN IMMEDIATE` transaction: one fsync instead of one each. Each caller's `fn` runs in its
   * own SAVEPOINT, so a caller whose `fn` throws (RequestKeyConflict, a broken invariant) has
   * its writes rolled back and is rejected alone; the others commit. Every promise settles only
   * after the COMMIT has returned, i.e. after the shared transaction is durable (invariant 1,
   * and invariant 3 for markers: each dispatch still waits for its own marker's commit).
   */
  private write<T>(fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.writeQueue.push({ fn, resolve: resolve as (v: unknown) => void, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flushWrites());
      }
    });
  }

  /** Commits every queued write in one transaction, then answers each caller. */
  private flushWrites(): void {
    this.flushScheduled = false;
    const batch = this.writeQueue;
    this.writeQueue = [];
    if (batch.length === 0) return;
    const results: ({ ok: true; value: unknown } | { ok: false; err: unknown })[] = [];
    try {
      const db = this.conn();
      if (batch.length === 1) {
        results.push({ ok: true, value: db.transaction(batch[0]!.fn).immediate() });
      } else {
        db.transaction(() => {
          for (const w of batch) {
            try {
              // A transaction function called inside a transaction runs as a SAVEPOINT.
              results.push({ ok: true, value: db.transaction(w.fn)() });
            } catch (err) {
              results.push({ ok: false, err });
              // Some errors (I/O, disk full) end the whole transaction: then nothing of the
              // batch can commit, and no later caller may run outside a transaction.
              if (!db.inTransaction) throw err;
            }
          }
        }).immediate();
      }
    } catch (err) {
      // BEGIN, COMMIT or the single write failed: nothing of this batch is durable.
      const e = this.classifyWriteError(err);
      for (const w of batch) w.reject(e);
      return;
    }
    batch.forEach((w, i) => {
      const r = results[i]!;
      if (r.ok) w.resolve(r.value);
      else w.reject(this.classifyWriteError(r.err));
    });
  }

  private read<T>(fn: () => T): Promise<T> {
    try {
      return Promise.resolve(fn());
    } catch (err) {
      return Promise.reject(this.classifyWriteError(err));
    }
  }

  private classifyWriteError(err: unknown): Error {
    const code = (err as { code?: string }).code ?? '';
    if (code.startsWith('SQLITE_READONLY')) return new StoreReadOnly(this.location, err);
    if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT'))
      return new StoreCorrupt(this.location, err);
    if (code.startsWith('SQLITE_BUSY'))
      return new StoreUnavailable(
        `${this.location} stayed locked by another writer for over ${this.busyTimeoutMs} ms`,
        err,
      );
    return err instanceof Error ? err : new Error(String(err));
  }

  // ---------------------------------------------------------------- row helpers

  private getJob(id: string): JobRecord | undefined {
    const row = this.stmt('SELECT * FROM jobs WHERE id = ?').get(id) as JobRow | undefined;
    return row && jobFromRow(row);
  }

  private getAttempt(jobId: string, attemptNo: number): AttemptRecord | undefined {
    const row = this.stmt('SELECT * FROM attempts WHERE job_id = ? AND attempt_no = ?').get(
      jobId,
      attemptNo,
    ) as AttemptRow | undefined;
    return row && attemptFromRow(row);
  }

  private appendEvent(e: EventInsert & { fingerprint: string }, at: number): void {
    this.stmt(
      `INSERT INTO events (job_id, attempt_no, request_fingerprint, kind, from_state, to_state, actor, detail_json, at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run(
      e.jobId,
      e.attemptNo,
      e.fingerprint,
      e.kind,
      e.fromState ?? null,
      e.toState ?? null,
      e.actor,
      jsonOrNull(e.detail),
      at,
    );
  }

  /** Moves a job, setting the columns each target state needs. */
  private setJobState(
    job: JobRecord,
    to: JobState,
    now: number,
    extra: {
      runAt?: number;
      nextCheckAt?: number | null;
      lookupFailures?: number;
      resultJson?: string | null;
      errorJson?: string | null;
    },
  ): void {
    const terminal = to === 'SUCCEEDED' || to === 'FAILED' || to === 'CANCELLED';
    this.stmt(
      `UPDATE jobs SET state = ?, updated_at = ?,
         run_at = coalesce(?, run_at),
         next_check_at = ?,
         lookup_failures = coalesce(?, lookup_failures),
         result_json = coalesce(?, result_json),
         error_json = coalesce(?, error_json),
         finished_at = ?
       WHERE id = ?`,
    ).run(
      to,
      now,
      extra.runAt ?? null,
      to === 'UNKNOWN' ? (extra.nextCheckAt ?? job.nextCheckAt ?? now) : null,
      extra.lookupFailures ?? null,
      extra.resultJson ?? null,
      extra.errorJson ?? null,
      terminal ? now : null,
      job.id,
    );
  }

  // ---------------------------------------------------------------- jobs

  jobInsertMany(p: {
    jobs: JobInsert[];
    actor: string;
    transaction?: unknown;
  }): Promise<JobInsertResult[]> {
    if (p.transaction !== undefined)
      return Promise.reject(
        new InvalidInput(
          'enqueue({ transaction }) needs a PostgreSQL store: SQLite cannot join a transaction of yours',
        ),
      );
    return this.write(() => {
      const now = this.now();
      const results: JobInsertResult[] = [];
      for (const j of p.jobs) {
        const existing = this.stmt('SELECT * FROM jobs WHERE request_key = ?').get(j.requestKey) as
          JobRow | undefined;
        if (existing) {
          if (existing.request_fingerprint !== j.fingerprint) {
            // Throwing rolls the whole batch back: nothing is written (invariant 9).
            throw new RequestKeyConflict(
              j.requestKey,
              existing.id,
              existing.request_fingerprint,
              j.fingerprint,
            );
          }
          const job = jobFromRow(existing);
          this.appendEvent(
            {
              jobId: job.id,
              attemptNo: null,
              fingerprint: job.fingerprint,
              kind: 'enqueue-deduplicated',
              actor: p.actor,
              detail: { requestKey: j.requestKey },
            },
            now,
          );
          results.push({ job, created: false });
          continue;
        }
        const runAt = j.runAt ?? now + j.delayMs;
        this.stmt(
          `INSERT INTO jobs (id, queue, operation, input_json, request_key, request_fingerprint, run_id, step_id, state,
             priority, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'QUEUED', ?, ?, ?, ?, ?, ?, ?)`,
        ).run(
          j.id,
          j.queue,
          j.operation,
          j.inputJson,
          j.requestKey,
          j.fingerprint,
          j.runId,
          j.stepId,
          j.priority,
          runAt,
          now,
          now,
          j.maxAttempts,
          JSON.stringify(j.backoff),
          j.timeoutMs,
        );
        this.appendEvent(
          {
            jobId: j.id,
            attemptNo: null,
            fingerprint: j.fingerprint,
            kind: 'enqueued',
            toState: 'QUEUED',
            actor: p.actor,
          },
          now,
        );
        results.push({ job: this.getJob(j.id)!, created: true });
      }
      return results;
    });
  }

  jobGet(p: { id: string }): Promise<JobDetail | null> {
    return this.read(() => {
      const job = this.getJob(p.id);
      if (!job) return null;
      const attempts = (
        this.stmt('SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt_no').all(
          p.id,
        ) as AttemptRow[]
      ).map(attemptFromRow);
      const events = (
        this.stmt('SELECT * FROM events WHERE job_id = ? ORDER BY id').all(p.id) as EventRow[]
      ).map(eventFromRow);
      return { job, attempts, events };
    });
  }

  jobList(p: JobListParams): Promise<JobRecord[]> {
    return this.read(() => {
      const where: string[] = [];
      const args: unknown[] = [];
      if (p.states?.length) {
        where.push(`state IN (${p.states.map(() => '?').join(',')})`);
        args.push(...p.states);
      }
      const eq = (column: string, value: string | undefined, op = '=') => {
        if (value === undefined) return;
        where.push(`${column} ${op} ?`);
        args.push(value);
      };
      eq('queue', p.queue);
      eq('operation', p.operation);
      eq('id', p.beforeId, '<');
      const sql = `SELECT * FROM jobs ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY id DESC LIMIT ?`;
      return (
        this.conn()
          .prepare(sql)
          .all(...args, p.limit) as JobRow[]
      ).map(jobFromRow);
    });
  }

  jobTransition(t: JobTransition): Promise<boolean> {
    return this.write(() => {
      assertTransitionLegal(t);
      const now = this.now();
      const job = this.getJob(t.jobId);
      const attempt =
        job && job.attemptCount > 0 ? this.getAttempt(job.id, job.attemptCount) : undefined;
      if (!transitionApplies(job, attempt, t)) return false;
      assert(job, 'transition applies to an existing job');
      if (t.resolution) {
        this.stmt(
          `UPDATE attempts SET resolution = ?, resolution_source = ?, resolution_evidence_json = ?, resolved_at = ?
           WHERE job_id = ? AND attempt_no = ? AND state = 'UNKNOWN' AND resolution IS NULL`,
        ).run(
          t.resolution.kind,
          t.resolution.source,
          jsonOrNull(t.resolution.evidence),
          now,
          t.jobId,
          t.expectAttemptNo,
        );
      }
      this.setJobState(job, t.to, now, {
        ...(t.to === 'QUEUED' ? { runAt: now + (t.delayMs ?? 0) } : {}),
        ...(t.to === 'UNKNOWN' && t.recheckDelayMs !== undefined
          ? { nextCheckAt: now + t.recheckDelayMs }
          : {}),
        ...(t.to === 'QUEUED'
          ? { lookupFailures: 0 }
          : t.lookupFailures !== undefined
            ? { lookupFailures: t.lookupFailures }
            : {}),
        resultJson: t.resultJson ?? null,
        errorJson: jsonOrNull(t.error),
      });
      this.appendEvent(
        {
          jobId: job.id,
          attemptNo: t.expectAttemptNo || null,
          fingerprint: job.fingerprint,
          kind: t.event.kind,
          fromState: t.from,
          toState: t.to,
          actor: t.event.actor,
          detail: {
            ...(t.event.detail ?? {}),
            ...(t.resolution
              ? {
                  resolution: t.resolution.kind,
                  source: t.resolution.source,
                  evidence: t.resolution.evidence,
                }
              : {}),
          },
        },
        now,
      );
      return true;
    });
  }

  jobCancel(p: { id: string; actor: string; reason: string }): Promise<JobCancelResult | null> {
    return this.write((): JobCancelResult | null => {
      const now = this.now();
      const job = this.getJob(p.id);
      if (!job) return null;
      if (job.state === 'QUEUED') {
        this.setJobState(job, 'CANCELLED', now, {
          errorJson: JSON.stringify({ name: 'Cancelled', message: p.reason }),
        });
        this.appendEvent(
          {
            jobId: job.id,
            attemptNo: job.attemptCount || null,
            fingerprint: job.fingerprint,
            kind: 'cancelled',
            fromState: 'QUEUED',
            toState: 'CANCELLED',
            actor: p.actor,
            detail: { reason: p.reason },
          },
          now,
        );
        return { cancelled: true, job: this.getJob(job.id)! };
      }
      if (job.state === 'LEASED') {
        const attempt = this.getAttempt(job.id, job.attemptCount);
        if (attempt && attempt.state === 'LEASED' && attempt.dispatchedAt === null) {
          // Ending the attempt fences its worker: its dispatch marker write will not apply.
          this.stmt(
            `UPDATE attempts SET state = 'FAILED_BEFORE_SEND', reason = 'cancelled', finished_at = ? WHERE job_id = ? AND attempt_no = ?`,
          ).run(now, job.id, attempt.attemptNo);
          this.setJobState(job, 'CANCELLED', now, {
            errorJson: JSON.stringify({ name: 'Cancelled', message: p.reason }),
          });
          this.appendEvent(
            {
              jobId: job.id,
              attemptNo: attempt.attemptNo,
              fingerprint: job.fingerprint,
              kind: 'cancelled',
              fromState: 'LEASED',
              toState: 'CANCELLED',
              actor: p.actor,
              detail: { reason: p.reason, fencedOwner: attempt.ownerId },
            },
            now,
          );
          return { cancelled: true, job: this.getJob(job.id)! };
        }
        return {
          cancelled: false,
          job,
          why: 'its current attempt has already dispatched the request',
        };
      }
      return { cancelled: false, job, why: `it is ${job.state}` };
    });
  }

  jobReconcileClaimMany(p: {
    operations: string[];
    limit: number;
    holdMs: number;
  }): Promise<ClaimedAttempt[]> {
    if (p.operations.length === 0 || p.limit <= 0) return Promise.resolve([]);
    return this.write(() => {
      const now = this.now();
      const rows = this.conn()
        .prepare(
          `SELECT * FROM jobs WHERE state = 'UNKNOWN' AND next_check_at <= ?
             AND operation IN (${p.operations.map(() => '?').join(',')})
           ORDER BY next_check_at LIMIT ?`,
        )
        .all(now, ...p.operations, p.limit) as JobRow[];
      const out: ClaimedAttempt[] = [];
      for (const row of rows) {
        // Holding the check (not a lease: a lookup changes nothing) keeps other reconcilers off it.
        this.stmt('UPDATE jobs SET next_check_at = ? WHERE id = ?').run(now + p.holdMs, row.id);
        const job = this.getJob(row.id)!;
        const attempt = this.getAttempt(job.id, job.attemptCount);
        assert(attempt, `UNKNOWN job ${job.id} has its attempt ${job.attemptCount}`);
        out.push({ job, attempt });
      }
      return out;
    });
  }

  // ---------------------------------------------------------------- attempts

  attemptClaimMany(p: {
    ownerId: string;
    queues: string[];
    operations: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedAttempt[]> {
    if (p.queues.length === 0 || p.operations.length === 0 || p.limit <= 0)
      return Promise.resolve([]);
    return this.write(() => {
      const now = this.now();
      const rows = this.conn()
        .prepare(
          `SELECT * FROM jobs WHERE state = 'QUEUED' AND run_at <= ?
             AND queue IN (${p.queues.map(() => '?').join(',')})
             AND operation IN (${p.operations.map(() => '?').join(',')})
           ORDER BY priority DESC, run_at, id LIMIT ?`,
        )
        .all(now, ...p.queues, ...p.operations, p.limit) as JobRow[];
      const out: ClaimedAttempt[] = [];
      for (const row of rows) {
        const attemptNo = Number(row.attempt_count) + 1;
        const token = newLeaseToken();
        this.stmt(
          `UPDATE jobs SET state = 'LEASED', attempt_count = ?, updated_at = ?, next_check_at = NULL WHERE id = ? AND state = 'QUEUED'`,
        ).run(attemptNo, now, row.id);
        this.stmt(
          `INSERT INTO attempts (job_id, attempt_no, request_key, request_fingerprint, state, owner_id, lease_token, leased_at, lease_expires_at)
           VALUES (?, ?, ?, ?, 'LEASED', ?, ?, ?, ?)`,
        ).run(
          row.id,
          attemptNo,
          row.request_key,
          row.request_fingerprint,
          p.ownerId,
          token,
          now,
          now + p.leaseMs,
        );
        this.appendEvent(
          {
            jobId: row.id,
            attemptNo,
            fingerprint: row.request_fingerprint,
            kind: 'leased',
            fromState: 'QUEUED',
            toState: 'LEASED',
            actor: p.ownerId,
            detail: { leaseMs: p.leaseMs },
          },
          now,
        );
        out.push({ job: this.getJob(row.id)!, attempt: this.getAttempt(row.id, attemptNo)! });
      }
      return out;
    });
  }

  attemptDispatchMany(p: { leases: LeaseRef[] }): Promise<DispatchMarkResult[]> {
    return this.write(() => {
      const now = this.now();
      return p.leases.map((lease): DispatchMarkResult => {
        const job = this.getJob(lease.jobId);
        const attempt = this.getAttempt(lease.jobId, lease.attemptNo);
        if (!leaseHolds(job, attempt, lease) || !attempt || !job)
          return { ok: false, reason: 'lease-lost' };
        if (attempt.leaseExpiresAt <= now) return { ok: false, reason: 'lease-expired' };
        assert(
          attempt.dispatchedAt === null,
          `job ${job.id} attempt ${attempt.attemptNo} dispatched twice`,
        );
        this.stmt(
          'UPDATE attempts SET dispatched_at = ? WHERE job_id = ? AND attempt_no = ? AND lease_token = ?',
        ).run(now, lease.jobId, lease.attemptNo, lease.leaseToken);
        this.appendEvent(
          {
            jobId: job.id,
            attemptNo: attempt.attemptNo,
            fingerprint: job.fingerprint,
            kind: 'dispatched',
            actor: attempt.ownerId,
          },
          now,
        );
        return { ok: true, dispatchedAt: now, leaseExpiresAt: attempt.leaseExpiresAt };
      });
    });
  }

  attemptHeartbeatMany(p: { leases: LeaseRef[]; leaseMs: number }): Promise<HeartbeatResult[]> {
    if (p.leases.length === 0) return Promise.resolve([]);
    return this.write(() => {
      const now = this.now();
      return p.leases.map((lease): HeartbeatResult => {
        const r = this.stmt(
          `UPDATE attempts SET lease_expires_at = ?
           WHERE job_id = ? AND attempt_no = ? AND lease_token = ? AND state = 'LEASED' AND lease_expires_at > ?`,
        ).run(now + p.leaseMs, lease.jobId, lease.attemptNo, lease.leaseToken, now);
        return r.changes === 1
          ? { lease, ok: true, leaseExpiresAt: now + p.leaseMs }
          : { lease, ok: false, leaseExpiresAt: null };
      });
    });
  }

  attemptFinishMany(p: { finishes: AttemptFinish[] }): Promise<boolean[]> {
    return this.write(() => {
      const now = this.now();
      return p.finishes.map((f) => {
        const job = this.getJob(f.lease.jobId);
        const attempt = this.getAttempt(f.lease.jobId, f.lease.attemptNo);
        if (!leaseHolds(job, attempt, f.lease) || !job || !attempt) return false;
        assertFinishLegal(job, attempt, f);
        this.finishAttempt(job, attempt, f, now);
        return true;
      });
    });
  }

  private finishAttempt(
    job: JobRecord,
    attempt: AttemptRecord,
    f: AttemptFinish | AttemptExpire,
    now: number,
  ): void {
    const resultJson = 'resultJson' in f ? f.resultJson : null;
    const error = 'error' in f ? f.error : null;
    this.stmt(
      `UPDATE attempts SET state = ?, finished_at = ?, result_json = ?, error_json = ?, reason = ?
       WHERE job_id = ? AND attempt_no = ? AND lease_token = ? AND state = 'LEASED'`,
    ).run(
      f.state,
      now,
      resultJson,
      jsonOrNull(error),
      f.reason,
      job.id,
      attempt.attemptNo,
      attempt.leaseToken,
    );
    const next = f.job;
    this.setJobState(job, next.to, now, {
      ...(next.to === 'QUEUED' ? { runAt: now + (next.delayMs ?? 0) } : {}),
      ...(next.to === 'UNKNOWN'
        ? {
            nextCheckAt: (attempt.dispatchedAt ?? now) + (next.checkAfterDispatchMs ?? 0),
            lookupFailures: 0,
          }
        : {}),
      resultJson: next.to === 'SUCCEEDED' ? resultJson : null,
      errorJson: next.to === 'FAILED' || next.to === 'NEEDS_REVIEW' ? jsonOrNull(error) : null,
    });
    this.appendEvent(
      {
        jobId: job.id,
        attemptNo: attempt.attemptNo,
        fingerprint: job.fingerprint,
        kind: `attempt-${f.state.toLowerCase().replaceAll('_', '-')}`,
        fromState: 'LEASED',
        toState: next.to,
        actor: f.actor,
        detail: {
          attemptState: f.state,
          ...(f.reason ? { reason: f.reason } : {}),
          ...(error ? { error } : {}),
          ...(next.delayMs !== undefined ? { retryInMs: next.delayMs } : {}),
        },
      },
      now,
    );
  }

  attemptExpiredList(p: { skewMs: number; limit: number }): Promise<ExpiredAttempt[]> {
    return this.read(() => {
      const now = this.now();
      const rows = this.stmt(
        `SELECT * FROM attempts WHERE state = 'LEASED' AND lease_expires_at + ? < ? ORDER BY lease_expires_at LIMIT ?`,
      ).all(p.skewMs, now, p.limit) as AttemptRow[];
      return rows.map((r) => ({ attempt: attemptFromRow(r), job: this.getJob(r.job_id)! }));
    });
  }

  attemptExpireMany(p: { expiries: AttemptExpire[]; skewMs: number }): Promise<boolean[]> {
    return this.write(() => {
      const now = this.now();
      return p.expiries.map((e) => {
        const job = this.getJob(e.lease.jobId);
        const attempt = this.getAttempt(e.lease.jobId, e.lease.attemptNo);
        // Re-checked inside the write: a second reclaimer, or a late heartbeat, finds nothing to do.
        if (!leaseHolds(job, attempt, e.lease) || !job || !attempt) return false;
        if (attempt.leaseExpiresAt + p.skewMs >= now) return false;
        assert(
          (attempt.dispatchedAt === null) === (e.state === 'FAILED_BEFORE_SEND'),
          `expiry of job ${job.id} attempt ${attempt.attemptNo} misread its dispatch marker`,
        );
        assertFinishLegal(job, attempt, { ...e, resultJson: null, error: null });
        this.finishAttempt(job, attempt, e, now);
        return true;
      });
    });
  }

  // ---------------------------------------------------------------- events and stats

  eventAppendMany(p: { events: EventInsert[] }): Promise<void> {
    return this.write(() => {
      const now = this.now();
      for (const e of p.events) {
        const job = this.getJob(e.jobId);
        if (!job) continue;
        this.appendEvent({ ...e, fingerprint: job.fingerprint }, now);
      }
    });
  }

  /**
   * Cross-process wake-ups without a server: `data_version` moves when another connection
   * commits (never for our own writes), so a change means someone else wrote: perhaps new work.
   * Best effort, like every subscription: workers still poll.
   */
  workSubscribe(p: { queues: string[]; onWork: () => void }): Promise<{ close(): Promise<void> }> {
    const version = this.conn().prepare('PRAGMA data_version').pluck();
    let last = version.get() as number;
    const timer = setInterval(() => {
      if (!this.db) return;
      const now = version.get() as number;
      if (now === last) return;
      last = now;
      p.onWork();
    }, WORK_CHECK_INTERVAL_MS);
    timer.unref();
    return Promise.resolve({
      close: () => {
        clearInterval(timer);
        return Promise.resolve();
      },
    });
  }

  statsGet(): Promise<StoreStats> {
    return this.read(() => {
      const now = this.now();
      const counts = this.stmt(
        'SELECT queue, state, count(*) AS n FROM jobs GROUP BY queue, state',
      ).all() as { queue: string; state: JobState; n: number }[];
      const oldest = this.stmt(
        `SELECT queue, min(run_at) AS t FROM jobs WHERE state = 'QUEUED' AND run_at <= ? GROUP BY queue`,
      ).all(now) as { queue: string; t: number }[];
      const byQueue = new Map<string, StoreStats['queues'][number]>();
      const entry = (queue: string) => {
        let q = byQueue.get(queue);
        if (!q) {
          q = {
            queue,
            counts: Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>,
            oldestDueAt: null,
          };
          byQueue.set(queue, q);
        }
        return q;
      };
      for (const c of counts) entry(c.queue).counts[c.state] = c.n;
      for (const o of oldest) entry(o.queue).oldestDueAt = o.t;
      const byOperation = this.stmt(
        `SELECT operation, sum(state = 'UNKNOWN') AS unknown, sum(state = 'NEEDS_REVIEW') AS needs_review
         FROM jobs WHERE state IN ('UNKNOWN','NEEDS_REVIEW') GROUP BY operation`,
      ).all() as { operation: string; unknown: number; needs_review: number }[];
      const expired = this.stmt(
        `SELECT count(*) AS n FROM attempts WHERE state = 'LEASED' AND lease_expires_at <= ?`,
      ).get(now) as { n: number };
      return {
        now,
        queues: [...byQueue.values()].sort((a, b) => a.queue.localeCompare(b.queue)),
        byOperation: byOperation.map((r) => ({
          operation: r.operation,
          unknown: r.unknown,
          needsReview: r.needs_review,
        })),
        expiredLeases: expired.n,
      };
    });
  }
}
