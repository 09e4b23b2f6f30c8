/**
 * The PostgreSQL store's commits: how a statement, a read or a transaction runs on the pool
 * (retried only when nothing of it can remain), how errors are told apart (the server's
 * answer, a lost connection, a check that aborted a statement), and the group commit settings
 * of the hot writes (../group-commit.ts, shared by both stores' callers).
 */
import pg from 'pg';
import {
  InvariantViolation,
  StoreFull,
  StoreUnavailable,
  errorMessage,
} from '../../core/errors.js';
import type { CommitObservers } from '../commit-observers.js';
import { GroupCommit, type GroupCommitOptions } from '../group-commit.js';
import type { EventWrite as PlannedEvent, WriteSet } from '../plan/index.js';
import type { JobRecord } from '../store.js';
import type { EventRow } from '../rows.js';
import { FAIL_MARK } from './statements.js';

/** Deadlock or serialization failure: the transaction was rolled back whole, so it is retried. */
export const RETRYABLE_SQLSTATES = new Set(['40P01', '40001']);
const TX_RETRIES_MAX = 5;
/**
 * Group commit (../group-commit.ts): merged calls of one kind running at once, and most items in
 * one. One in flight: a call goes out at once when its kind is idle, and the calls that arrive
 * while one runs go together in the next, so batches grow exactly as fast as the server is busy.
 * Each hot write is one statement (one round trip), so a second one in flight would only split
 * the batch and spend another commit and more server CPU: measured, one in flight gave more
 * throughput (c10, c50) and no worse pickup latency on a loaded 2-core machine. 1,000 items
 * keep one statement's locks and parameters small.
 */
const GROUP_IN_FLIGHT_MAX = 1;
const GROUP_ITEMS_MAX = 1_000;
/**
 * Outcomes wait up to this long while dispatch markers are being written (../group-commit.ts
 * `yieldTo`). A job's function starts only once its marker is durable, so markers are on every
 * job's critical path; an outcome is not (its execution slot is already free, and its lease
 * stays fenced until it lands). Without the wait, an outcome call ran beside nearly every marker
 * call, the two backends and Node sharing the cores; with it, outcomes go in fewer, bigger calls
 * and marker commits are shorter (numbers in docs/performance-log.md). On an idle store an
 * outcome starts at once.
 */
export const FINISH_YIELD_MS = 5;
/** What a statement runs on: a pool client in our transaction, or the caller's client in theirs. */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

/** The pool and the ways reckon's statements run on it. */
export class PgConnection {
  pool: pg.Pool | null = null;
  /** Per client in one of our transactions: the queues to wake once it commits. */
  readonly wakesOf = new WeakMap<object, Set<string>>();
  /** Errors of `withClient` that prove the statement never left: no connection to send it on. */
  private readonly unsent = new WeakSet<object>();

  constructor(
    private readonly o: {
      location: string;
      poolMax: number;
      /** Work committed by a transaction of ours: wake this process's subscribers. */
      onCommitWakes: (queues: Iterable<string>) => void;
    },
  ) {}

  connPool(): pg.Pool {
    if (!this.pool)
      throw new StoreUnavailable(`${this.o.location} is closed (or init() was not called)`);
    return this.pool;
  }

  /**
   * Runs `fn` on a pool client outside a transaction: one statement (a write whose failure is
   * the caller's to judge, never retried here), or reads (`reads: true`), which are retried when
   * a pooled connection turns out dead (e.g. after a server restart). Up to poolMax + 1 tries:
   * the pool may hold that many dead idle connections, and each failed try discards one.
   */
  async run<T>(fn: (c: Queryable) => Promise<T>, o: { reads?: boolean } = {}): Promise<T> {
    for (let tryNo = 1; ; tryNo++) {
      try {
        return await this.withClient(fn);
      } catch (err) {
        if (!o.reads || tryNo > this.o.poolMax || !(err instanceof StoreUnavailable)) throw err;
      }
    }
  }

  /**
   * Runs one prepared statement (`name`) on a pool client: a write that is its own transaction,
   * durable when it resolves. Retried only when nothing of it can remain: a deadlock or
   * serialization failure (the server rolled it back whole), or a failure before it was sent (no
   * connection could be had, or the connection was known dead). A connection lost after it was
   * sent is ambiguous (it may have committed): reported as StoreUnavailable, never retried.
   * An abort by `fail` (statements.ts) becomes an InvariantViolation, or what `onFail` makes of it.
   */
  async statement<R extends pg.QueryResultRow>(
    name: string,
    text: string,
    values: unknown[],
    onFail?: (what: string) => Error,
  ): Promise<pg.QueryResult<R>> {
    for (let tryNo = 1; ; tryNo++) {
      try {
        return await this.withClient((c) => (c as pg.PoolClient).query<R>({ name, text, values }));
      } catch (err) {
        const what = failedCheck(err);
        if (what !== undefined) throw onFail?.(what) ?? new InvariantViolation(what);
        const code = (err as { code?: unknown }).code;
        const retry =
          (typeof code === 'string' && RETRYABLE_SQLSTATES.has(code) && tryNo < TX_RETRIES_MAX) ||
          (err instanceof StoreUnavailable && this.neverSent(err) && tryNo <= this.o.poolMax);
        if (!retry) throw err;
        await new Promise((r) => setTimeout(r, 5 * tryNo + Math.random() * 20));
      }
    }
  }

  /** Errors of `withClient` that prove the statement never left: no connection to send it on. */

  private neverSent(err: StoreUnavailable): boolean {
    return this.unsent.has(err) || /not queryable/i.test(errorMessage(err.cause));
  }

  /**
   * Runs `fn` in one transaction; resolves after COMMIT. Retried whole when nothing of the try
   * can remain: a deadlock or serialization failure (rolled back by the server), or a connection
   * lost before COMMIT was sent (the server rolls back). A connection lost during COMMIT is
   * ambiguous and is reported, never retried.
   */
  async tx<T>(fn: (c: Queryable) => Promise<T>): Promise<T> {
    for (let tryNo = 1; ; tryNo++) {
      let commitSent = false;
      try {
        return await this.withClient(async (c) => {
          await c.query('BEGIN');
          const wakes = new Set<string>();
          this.wakesOf.set(c, wakes);
          try {
            const value = await fn(c);
            commitSent = true;
            await c.query('COMMIT');
            this.o.onCommitWakes(wakes);
            return value;
          } catch (err) {
            if (!isConnectionError(err)) await c.query('ROLLBACK').catch(() => undefined);
            throw err;
          }
        });
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        const retry =
          (typeof code === 'string' && RETRYABLE_SQLSTATES.has(code) && tryNo < TX_RETRIES_MAX) ||
          (err instanceof StoreUnavailable && !commitSent && tryNo <= this.o.poolMax);
        if (!retry) throw err;
        await new Promise((r) => setTimeout(r, 5 * tryNo + Math.random() * 20));
      }
    }
  }

  async withClient<T>(fn: (c: Queryable) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    const pool = this.connPool();
    try {
      client = await pool.connect();
    } catch (err) {
      const e = this.classify(err);
      this.unsent.add(e);
      throw e;
    }
    // A checked-out client has no pool listener: its 'error' must be caught here, or it crashes
    // the process. The failing query rejects on its own.
    let broken: Error | undefined;
    const onError = (err: Error) => {
      broken = err;
    };
    client.on('error', onError);
    try {
      return await fn(client);
    } catch (err) {
      if (isConnectionError(err)) broken ??= err as Error;
      throw this.classify(err);
    } finally {
      client.off('error', onError);
      // A broken (or timed-out) connection is destroyed, never reused.
      client.release(broken ?? false);
    }
  }

  /** Connection-level failures become `StoreUnavailable`; everything else is passed on as is. */
  classify(err: unknown): Error {
    if (!(err instanceof Error)) return new Error(String(err));
    // disk_full: the server refused the write whole.
    if ((err as { code?: unknown }).code === '53100') return new StoreFull(this.o.location, err);
    if (err instanceof StoreUnavailable || !isConnectionError(err)) return err;
    return new StoreUnavailable(
      `PostgreSQL at ${this.o.location} is unreachable: ${errorMessage(err)}`,
      err,
    );
  }
}

export function pgGroupCommit<I, O>(
  commits: CommitObservers,
  write: string,
  run: (items: I[]) => Promise<O[]>,
  yieldTo?: GroupCommitOptions<I, O>['yieldTo'],
): GroupCommit<I, O> {
  return new GroupCommit({
    run,
    ...(yieldTo ? { yieldTo } : {}),
    inFlightMax: GROUP_IN_FLIGHT_MAX,
    itemsMax: GROUP_ITEMS_MAX,
    // A connection failure may have happened during COMMIT: never re-run those.
    isAmbiguous: (err) => err instanceof StoreUnavailable,
    commits: { observers: commits, write },
  });
}

/** The check named by a statement that statements.ts's `fail` aborted, or undefined for other errors. */
export function failedCheck(err: unknown): string | undefined {
  if (!(err instanceof Error) || (err as { code?: unknown }).code !== '22P02') return undefined;
  const at = err.message.indexOf(FAIL_MARK);
  if (at < 0) return undefined;
  const rest = err.message.slice(at + FAIL_MARK.length);
  const end = rest.lastIndexOf('"');
  return end >= 0 ? rest.slice(0, end) : rest;
}

/**
 * Is this a failure to reach the server, rather than an answer from it? Driver errors without a
 * SQLSTATE can only be told apart by their message; SQLSTATE class 08 is "connection exception",
 * 57P01-57P03 are shutdowns, 3D000 a missing database, 28xxx refused credentials.
 */
export function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error) || err instanceof InvariantViolation) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (NET_CODES.has(code)) return true;
    if (/^(08|28)/.test(code) || ['57P01', '57P02', '57P03', '3D000'].includes(code)) return true;
  }
  return /Connection terminated|connection timeout|timeout expired|Query read timeout|not queryable|Client was closed|Connection ended/i.test(
    err.message,
  );
}

const NET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
]);

/** An event row as `eventInsert` takes it. */
export type EventWrite = Omit<EventRow, 'id' | 'at'>;

/**
 * The writes of one transaction in the shapes of `attemptEnd`, `jobUpdate` and `eventInsert`,
 * gathered from plans so that each kind is one batched statement.
 */
export class TxWrites {
  readonly jobs: Record<string, unknown>[] = [];
  readonly attemptEnds: Record<string, unknown>[] = [];
  readonly events: EventWrite[] = [];
  readonly requeued = new Set<string>();

  /** What a plan decided for `job` (its resolution, if any, is written by the caller). */
  add(job: JobRecord, w: WriteSet): void {
    const e = w.attemptEnd;
    if (e)
      this.attemptEnds.push({
        job_id: job.id,
        attempt_no: e.attemptNo,
        lease_token: e.leaseToken,
        state: e.state,
        finished_at: e.finishedAt,
        result_json: e.resultJson,
        error_json: e.errorJson,
        reason: e.reason,
        ended_job: e.endedJob,
      });
    const j = w.job;
    this.jobs.push({
      id: job.id,
      state: j.state,
      updated_at: j.updatedAt,
      run_at: j.runAt,
      next_check_at: j.nextCheckAt,
      lookup_failures: j.lookupFailures,
      result_json: j.resultJson,
      error_json: j.errorJson,
      finished_at: j.finishedAt,
    });
    for (const ev of w.events) this.events.push(eventRow(job, ev));
    if (w.requeue) this.requeued.add(job.queue);
  }
}

/** A planned event as `eventInsert` takes it. */
export function eventRow(job: Pick<JobRecord, 'id' | 'fingerprint'>, e: PlannedEvent): EventWrite {
  return {
    job_id: job.id,
    attempt_no: e.attemptNo,
    request_fingerprint: job.fingerprint,
    kind: e.kind,
    from_state: e.fromState,
    to_state: e.toState,
    actor: e.actor,
    detail_json: e.detailJson,
  };
}
