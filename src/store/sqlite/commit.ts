/**
 * The SQLite store's group commit: the writes callers start within one turn of the event loop
 * run in one IMMEDIATE transaction (one fsync), their events buffered and inserted just before
 * the COMMIT; a caller that throws is rolled back and rejected alone. The lock is never waited
 * for with the event loop blocked: a busy write lock is retried on timers.
 */
import { performance } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import { assert } from '../../core/errors.js';
import type { CommitObservers } from '../commit-observers.js';
import { EVENT_COLUMNS, EVENT_INSERT_ROWS, eventInsertSql } from './statements.js';

/** What the writer needs of its store. */
export interface WriterHost {
  conn(): Database.Database;
  isOpen(): boolean;
  /** A cached prepared statement. */
  stmt(sql: string): Database.Statement;
  /** A driver error as the store's typed error. */
  classify(err: unknown): Error;
  readonly busyTimeoutMs: number;
  readonly commits: CommitObservers;
  /** A commit made work due: wake the workers of this and other processes. */
  onNewWork(): void;
}

type BatchResult = { ok: true; value: unknown } | { ok: false; err: unknown };

interface TxStatements {
  begin: Database.Statement;
  commit: Database.Statement;
  rollback: Database.Statement;
  savepoint: Database.Statement;
  release: Database.Statement;
  rollbackTo: Database.Statement;
}

export class SqliteWriter {
  /** Writes waiting for the next group commit (see `write`). */
  private writeQueue: {
    fn: () => unknown;
    resolve: (v: unknown) => void;
    reject: (err: unknown) => void;
    /** May commit without its own fsync (see `write`). */
    unsynced: boolean;
    /** Runs in its own savepoint: an earlier run of its batch threw (see `runBatch`). */
    isolate: boolean;
  }[] = [];
  private flushScheduled = false;
  /** When the batch at the head of the queue first found the write lock taken. */
  private busySince: number | undefined;
  /** Events of the running write, EVENT_COLUMNS values each (see `event`). */
  private pendingEvents: unknown[] = [];
  private tx: TxStatements | null = null;
  /** The batch being written made a job due: wake the other processes after its commit. */
  newWork = false;

  constructor(private readonly host: WriterHost) {}

  /** No write is waiting: a read may answer for the writes that would follow it. */
  get idle(): boolean {
    return this.writeQueue.length === 0;
  }

  /** Forgets the prepared transaction statements (the connection is closing). */
  reset(): void {
    this.tx = null;
    this.pendingEvents = [];
  }

  /**
   * Runs `fn` in an IMMEDIATE write transaction; resolves after the durable commit.
   *
   * Group commit: better-sqlite3 is synchronous, so the writes that callers in this process
   * start within one turn of the event loop (concurrent enqueues, the dispatch markers and
   * outcomes of concurrent attempts, claims, heartbeats) are queued and run together in ONE
   * `BEGIN IMMEDIATE` transaction: one fsync instead of one each. A caller whose `fn` throws
   * (RequestKeyConflict, a broken invariant) has its writes rolled back and is rejected alone;
   * the others commit (see `flushWrites`). Every promise settles only after the COMMIT has
   * returned, i.e. after the shared transaction is durable (invariant 1, and invariant 3 for
   * markers: each dispatch still waits for its own marker's commit).
   *
   * A `fn` must be a pure function of the database (and the clock): it may run twice, the first
   * run rolled back unseen (see `flushWrites`).
   *
   * `unsynced`: a batch made only of such writes commits without an fsync (`synchronous =
   * NORMAL` for that one transaction): still atomic and safe from a kill of any process (the OS
   * has the pages), but a power cut may undo it. Only for a write that nothing outside acts on
   * before a later, synced write: a claim, whose attempt is acted on only through its dispatch
   * marker. Every commit after it in the WAL is synced with the frames before it, so the marker
   * cannot survive a power cut without its claim; a claim lost that way was acted on by nobody,
   * and its job is simply QUEUED again.
   */
  write<T>(fn: () => T, o: { unsynced?: boolean } = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.writeQueue.push({
        fn,
        resolve: resolve as (v: unknown) => void,
        reject,
        unsynced: o.unsynced === true,
        isolate: false,
      });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(this.flushBound);
      }
    });
  }

  private readonly flushBound = (): void => this.flush();

  /** BEGIN IMMEDIATE / COMMIT / ROLLBACK and the per-caller savepoint, prepared once. */
  private txStatements(): TxStatements {
    if (!this.tx) {
      const db = this.host.conn();
      this.tx = {
        begin: db.prepare('BEGIN IMMEDIATE'),
        commit: db.prepare('COMMIT'),
        rollback: db.prepare('ROLLBACK'),
        savepoint: db.prepare('SAVEPOINT reckon_caller'),
        release: db.prepare('RELEASE reckon_caller'),
        rollbackTo: db.prepare('ROLLBACK TO reckon_caller'),
      };
    }
    return this.tx;
  }

  /**
   * Commits every queued write in one transaction, then answers each caller.
   *
   * Optimistic isolation: the callers' functions first run one after the other with no
   * savepoint around each (a savepoint costs two statements per caller, and callers almost
   * never throw). If one throws, the whole transaction is rolled back, unseen and uncommitted,
   * and the batch runs again with each caller in its own SAVEPOINT: the failing caller is
   * rolled back and rejected alone, the others commit. Either way each caller's writes are
   * atomic and nobody is answered before the COMMIT.
   */
  flush(o: { wait?: boolean } = {}): void {
    this.flushScheduled = false;
    const batch = this.writeQueue;
    this.writeQueue = [];
    if (batch.length === 0) return;
    let results: BatchResult[];
    const unsynced = batch.every((w) => w.unsynced);
    const since = this.host.commits.start();
    try {
      if (unsynced) this.setting('synchronous = NORMAL');
      const busy = o.wait ? undefined : this.tryBegin();
      if (busy) {
        // Another process holds the write lock. SQLite's busy handler would sleep the whole
        // event loop (1, 2, 5, 10 … 100 ms a try); instead the batch (and whatever joins it)
        // tries again in a moment while this process goes on, up to the busy timeout.
        this.busySince ??= performance.now();
        if (performance.now() - this.busySince < this.host.busyTimeoutMs) {
          this.writeQueue = batch.concat(this.writeQueue);
          this.flushScheduled = true;
          setTimeout(this.flushBound, 0);
          return;
        }
        this.busySince = undefined;
        throw busy;
      }
      this.busySince = undefined;
      let ran = this.runBatch(batch, { begun: !o.wait });
      if (ran === 'isolate') {
        // Rolled back unseen: runs again, each caller in its own savepoint, taking the lock like
        // any batch (never a blocking BEGIN: another process may hold it by then).
        this.newWork = false;
        for (const w of batch) w.isolate = true;
        if (!o.wait) {
          this.writeQueue = batch.concat(this.writeQueue);
          this.flushScheduled = true;
          setImmediate(this.flushBound);
          return;
        }
        ran = this.runBatch(batch, { begun: false });
        assert(ran !== 'isolate', 'an isolated batch runs once');
      }
      results = ran;
    } catch (err) {
      this.newWork = false;
      // BEGIN, COMMIT or an error that ended the transaction: nothing of this batch is durable.
      const e = this.host.classify(err);
      for (const w of batch) w.reject(e);
      return;
    } finally {
      if (unsynced && this.host.isOpen()) this.setting('synchronous = FULL');
    }
    // Committed: past the try, so that nothing here could be taken for a failed write.
    this.host.commits.emit(unsynced ? 'claim' : 'shared', batch.length, since);
    if (this.newWork) {
      // Durable now: workers of other processes may claim it at once, and those of this one.
      this.newWork = false;
      this.host.onNewWork();
    }
    for (let i = 0; i < batch.length; i++) {
      const r = results[i]!;
      if (r.ok) batch[i]!.resolve(r.value);
      else batch[i]!.reject(this.host.classify(r.err));
    }
  }

  /**
   * BEGIN IMMEDIATE without waiting: undefined once begun, or the SQLITE_BUSY error if another
   * connection holds the write lock.
   */
  private tryBegin(): Error | undefined {
    const tx = this.txStatements();
    this.setting('busy_timeout = 0');
    try {
      tx.begin.run();
      return undefined;
    } catch (err) {
      if (((err as { code?: string }).code ?? '').startsWith('SQLITE_BUSY')) return err as Error;
      throw err;
    } finally {
      this.setting(`busy_timeout = ${this.host.busyTimeoutMs}`);
    }
  }

  /**
   * Sets a connection setting. Not through a statement prepared once: SQLite applies
   * `PRAGMA busy_timeout = …` and `PRAGMA synchronous = …` while preparing them, so running a
   * prepared one again may change nothing (the first BEGIN that met another process's lock then
   * slept the event loop for the whole busy timeout). Through `exec`, which prepares, runs and
   * finalizes it in native code, without `pragma()`'s JS statement object and result array.
   */
  private setting(pragma: string): void {
    this.host.conn().exec(`PRAGMA ${pragma}`);
  }

  /**
   * The batch in the transaction just begun: all callers together, or (`isolate`, set on a batch
   * whose first run threw) each in its own savepoint. 'isolate': the first run threw and was
   * rolled back; the batch is to run again isolated.
   */
  private runBatch(
    batch: { fn: () => unknown; isolate: boolean }[],
    o: { begun: boolean },
  ): BatchResult[] | 'isolate' {
    const tx = this.txStatements();
    if (!o.begun) tx.begin.run();
    if (batch.length > 1 && batch.some((w) => w.isolate)) return this.runIsolated(batch);
    const db = this.host.conn();
    const values: unknown[] = new Array<unknown>(batch.length);
    let failed: unknown = undefined;
    let threw = false;
    try {
      for (let i = 0; i < batch.length; i++) values[i] = batch[i]!.fn();
      this.flushEvents();
    } catch (err) {
      threw = true;
      failed = err;
      this.pendingEvents = [];
    }
    if (!threw) {
      try {
        tx.commit.run();
      } catch (err) {
        if (db.inTransaction) tx.rollback.run();
        throw err;
      }
      return values.map((value) => ({ ok: true, value }));
    }
    // Some errors (I/O, disk full) end the whole transaction: then nothing can commit.
    if (!db.inTransaction) throw failed;
    tx.rollback.run();
    if (batch.length === 1) return [{ ok: false, err: failed }];
    return 'isolate';
  }

  /** Each caller in its own savepoint, inside the transaction begun: a throw rolls back its caller only. */
  private runIsolated(batch: { fn: () => unknown }[]): BatchResult[] {
    const db = this.host.conn();
    const tx = this.txStatements();
    const results: BatchResult[] = [];
    try {
      for (const w of batch) {
        tx.savepoint.run();
        try {
          const value = w.fn();
          this.flushEvents();
          tx.release.run();
          results.push({ ok: true, value });
        } catch (err) {
          this.pendingEvents = [];
          if (!db.inTransaction) throw err;
          tx.rollbackTo.run();
          tx.release.run();
          results.push({ ok: false, err });
        }
      }
      tx.commit.run();
    } catch (err) {
      if (db.inTransaction) tx.rollback.run();
      throw err;
    }
    return results;
  }

  /**
   * Appends one event (invariant 8), from its columns: the hot paths build no object for it.
   * Only inside a write: the events of a batch are buffered, in order, and inserted by a few
   * multi-row statements just before its COMMIT (or at the end of each caller's savepoint);
   * nothing in a write transaction reads events back.
   */
  event(
    jobId: string,
    attemptNo: number | null,
    fingerprint: string,
    kind: string,
    fromState: string | null,
    toState: string | null,
    actor: string,
    detailJson: string | null,
    at: number,
  ): void {
    this.pendingEvents.push(
      jobId,
      attemptNo,
      fingerprint,
      kind,
      fromState,
      toState,
      actor,
      detailJson,
      at,
    );
  }

  private flushEvents(): void {
    const values = this.pendingEvents;
    if (values.length === 0) return;
    this.pendingEvents = [];
    let at = 0;
    while (at < values.length) {
      const left = (values.length - at) / EVENT_COLUMNS;
      const rows = EVENT_INSERT_ROWS.find((n) => n <= left)!;
      const end = at + rows * EVENT_COLUMNS;
      this.host
        .stmt(eventInsertSql(rows))
        .run(at === 0 && end === values.length ? values : values.slice(at, end));
      at = end;
    }
  }
}
