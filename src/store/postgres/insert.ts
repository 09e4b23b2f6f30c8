/**
 * The PostgreSQL enqueue: the common case (every key new) in one statement that reads nothing
 * back, hand-offs to idle local workers in the same statement, the general path (dedup or
 * RequestKeyConflict, judged by the plan) in a transaction, and the outbox path on a caller's
 * transaction.
 */
import type pg from 'pg';
import { InvalidInput, assert, errorMessage } from '../../core/errors.js';
import { dedupEvent, planDedup } from '../plan/index.js';
import { jobFromRow, newLeasedAttempt, newQueuedJob, type JobRow } from '../rows.js';
import { newLeaseToken } from '../rules.js';
import type { JobInsert, JobInsertResult } from '../store.js';
import type { GroupCommit } from '../group-commit.js';
import type { CommitObservers } from '../commit-observers.js';
import {
  eventRow,
  pgGroupCommit,
  type EventWrite,
  type PgConnection,
  type Queryable,
} from './commit.js';
import { NEW_JOB_SHARED, type Statements } from './statements.js';

/** The inserts' prepared statement names (see store.ts PREPARED). */
const PREPARED_INSERT = {
  allNew: 'reckon_job_insert_all_new',
  handOff: 'reckon_job_insert_hand_off',
} as const;

/** What the enqueue needs of its store. */
export interface InserterHost {
  readonly db: PgConnection;
  readonly sql: Statements;
  readonly channel: string;
  readonly commits: CommitObservers;
  wakeLocal(queues: Iterable<string>): void;
  clockOn(c: Queryable): Promise<number>;
}

export class JobInserter {
  /** Concurrent enqueues share statements, per actor (see ../group-commit.ts). */
  private readonly groups = new Map<string, GroupCommit<JobInsert, JobInsertResult>>();

  constructor(private readonly h: InserterHost) {}

  async insertMany(p: {
    jobs: JobInsert[];
    actor: string;
    transaction?: unknown;
  }): Promise<JobInsertResult[]> {
    if (p.jobs.length === 0) return [];
    if (p.transaction !== undefined) {
      const client = callerClient(p.transaction);
      return this.inCallerTransaction(client, (c) => this.insertJobs(c, p.jobs, p.actor));
    }
    let group = this.groups.get(p.actor);
    if (!group) {
      const actor = p.actor;
      group = pgGroupCommit(this.h.commits, 'enqueue', (jobs: JobInsert[]) =>
        this.insertNow(jobs, actor),
      );
      this.groups.set(actor, group);
    }
    return group.call(p.jobs);
  }

  /**
   * The common case, every key new, is one statement (insert, events, wake-ups) that reads
   * nothing back; when a key exists, or the jobs (merged callers) name one twice, it writes
   * nothing and the general path below decides in a transaction (dedup or RequestKeyConflict).
   */
  private async insertNow(jobs: JobInsert[], actor: string): Promise<JobInsertResult[]> {
    const keys = new Set<string>();
    for (const j of jobs) keys.add(j.requestKey);
    if (keys.size < jobs.length) return this.h.db.tx((c) => this.insertJobs(c, jobs, actor));
    const { params, backoffJson } = newJobParams(jobs);
    if (jobs.some((j) => j.leaseTo !== undefined)) {
      try {
        return await this.insertHandingOff(jobs, actor, params, backoffJson);
      } catch (err) {
        if (!isRequestKeyTaken(err)) throw err;
        return this.h.db.tx((c) => this.insertJobs(c, jobs, actor));
      }
    }
    // Jobs awaiting approval wake nobody: no worker may claim them yet.
    const queues = [...new Set(jobs.filter((j) => !j.approval).map((j) => j.queue))];
    let r: pg.QueryResult<{ now: number }>;
    try {
      r = await this.h.db.statement<{ now: number }>(
        PREPARED_INSERT.allNew,
        this.h.sql.jobInsertAllNew,
        [...params, actor, queues, this.h.channel],
      );
    } catch (err) {
      if (!isRequestKeyTaken(err)) throw err;
      return this.h.db.tx((c) => this.insertJobs(c, jobs, actor));
    }
    this.h.wakeLocal(queues);
    const now = r.rows[0]!.now;
    return jobs.map((j, i) => ({ job: newQueuedJob(j, now, backoffJson[i]), created: true }));
  }

  /**
   * `insertNow` with hand-offs (`JobInsert.leaseTo`): one statement inserts the jobs and leases
   * those it may to the idle workers offered, as a claim would (attempt 1, its `leased` event).
   * Wakes only the queues that got a job nobody was handed: a woken worker would find nothing.
   */
  private async insertHandingOff(
    jobs: JobInsert[],
    actor: string,
    params: unknown[],
    backoffJson: string[],
  ): Promise<JobInsertResult[]> {
    const offers = jobs.filter((j) => j.leaseTo !== undefined);
    const tokens = new Map(offers.map((j) => [j.id, newLeaseToken()]));
    const r = await this.h.db.statement<{ now: number; handed_ids: string[] }>(
      PREPARED_INSERT.handOff,
      this.h.sql.jobInsertHandOff,
      [
        ...params,
        actor,
        this.h.channel,
        offers.map((j) => j.id),
        offers.map((j) => j.leaseTo!.ownerId),
        offers.map((j) => j.leaseTo!.leaseMs),
        offers.map((j) => tokens.get(j.id)!),
      ],
    );
    const row = r.rows[0]!;
    const now = row.now;
    const handed = new Set(row.handed_ids);
    const wakes = new Set<string>();
    const results = jobs.map((j, i): JobInsertResult => {
      const job = newQueuedJob(j, now, backoffJson[i]);
      if (!handed.has(j.id)) {
        wakes.add(j.queue);
        return { job, created: true };
      }
      job.state = 'LEASED';
      job.attemptCount = 1;
      const leased = { ...job };
      const attempt = newLeasedAttempt(leased, {
        ownerId: j.leaseTo!.ownerId,
        leaseToken: tokens.get(j.id)!,
        leasedAt: now,
        // As the statement computed it: now and the lease are whole milliseconds.
        leaseExpiresAt: now + j.leaseTo!.leaseMs,
      });
      return { job, created: true, claimed: { job: leased, attempt } };
    });
    this.h.wakeLocal(wakes);
    return results;
  }

  /**
   * Runs on the caller's connection, inside the caller's open transaction (the outbox pattern):
   * the jobs exist iff that transaction commits. A savepoint keeps the batch atomic and, on a
   * RequestKeyConflict, leaves the caller's transaction usable.
   */
  private async inCallerTransaction<T>(c: Queryable, fn: (c: Queryable) => Promise<T>): Promise<T> {
    const status = (c as { getTransactionStatus?: () => string | null }).getTransactionStatus?.();
    if (status === 'I')
      throw new InvalidInput(
        'enqueue({ transaction }) needs a client with an open transaction: run BEGIN on it first',
      );
    try {
      await c.query('SAVEPOINT reckon_enqueue');
      // Durable when the caller commits, whatever their session's default.
      await c.query('SET LOCAL synchronous_commit = on');
    } catch (err) {
      throw new InvalidInput(
        `enqueue({ transaction }) could not use the given client: ${errorMessage(err)}`,
      );
    }
    try {
      const value = await fn(c);
      await c.query('RELEASE SAVEPOINT reckon_enqueue');
      return value;
    } catch (err) {
      await c.query('ROLLBACK TO SAVEPOINT reckon_enqueue').catch(() => undefined);
      throw this.h.db.classify(err);
    }
  }

  /**
   * The general enqueue, inside a transaction (ours or the caller's). Each job is judged as if
   * the jobs came one call after the other: the first job naming a key inserts it when it is
   * new; a job whose key exists by then (in the store, or from an earlier job of these) gets
   * that job when the fingerprints match (a recorded dedup), else the whole call fails with
   * RequestKeyConflict and writes nothing (invariant 9).
   */
  private async insertJobs(
    c: Queryable,
    jobs: JobInsert[],
    actor: string,
    round = 1,
  ): Promise<JobInsertResult[]> {
    const firsts = new Map<string, JobInsert>();
    for (const j of jobs) if (!firsts.has(j.requestKey)) firsts.set(j.requestKey, j);
    const batch = firsts.size === jobs.length ? jobs : [...firsts.values()];
    const { params, backoffJson } = newJobParams(batch);
    const r = await c.query<{ now: number; ids: string[] }>(this.h.sql.jobInsert, [
      ...params,
      actor,
      this.h.channel,
    ]);
    const now = r.rows[0]!.now;
    const inserted = new Set(r.rows[0]!.ids);
    const wakes = this.h.db.wakesOf.get(c);
    if (wakes) for (const j of batch) if (inserted.has(j.id) && !j.approval) wakes.add(j.queue);
    const results = new Array<JobInsertResult | undefined>(jobs.length);
    const backoffOf = new Map(batch.map((j, i) => [j, backoffJson[i]]));
    const later: number[] = [];
    jobs.forEach((j, i) => {
      if (firsts.get(j.requestKey) === j && inserted.has(j.id))
        results[i] = { job: newQueuedJob(j, now, backoffOf.get(j)), created: true };
      else later.push(i);
    });
    if (later.length > 0) {
      // A new statement sees rows that concurrent enqueues committed while this one waited, and
      // those this call has just inserted.
      const existing = await c.query<JobRow>(this.h.sql.jobByKeys, [
        [...new Set(later.map((i) => jobs[i]!.requestKey))],
      ]);
      const found = new Map(existing.rows.map((row) => [row.request_key, row]));
      const dedup: EventWrite[] = [];
      const gone: number[] = [];
      for (const i of later) {
        const j = jobs[i]!;
        const row = found.get(j.requestKey);
        if (!row) {
          // The key's job was pruned between the insert and this read: the key is free again.
          gone.push(i);
          continue;
        }
        // A conflict throws, rolling the whole batch back: nothing is written (invariant 9).
        planDedup(
          { id: row.id, operation: row.operation, fingerprint: row.request_fingerprint },
          j,
        );
        const job = jobFromRow(row);
        results[i] = { job, created: false };
        dedup.push(eventRow(job, dedupEvent(j.requestKey, actor)));
      }
      if (dedup.length > 0) {
        const eventsAt = await this.h.clockOn(c);
        await c.query(this.h.sql.eventInsert, [JSON.stringify(dedup), eventsAt]);
      }
      if (gone.length > 0) {
        assert(
          round < PRUNED_KEY_ROUNDS_MAX,
          `request key ${jobs[gone[0]!]!.requestKey} was neither inserted nor found ${round} times`,
        );
        const again = await this.insertJobs(
          c,
          gone.map((i) => jobs[i]!),
          actor,
          round + 1,
        );
        gone.forEach((i, k) => (results[i] = again[k]));
      }
    }
    return results as JobInsertResult[];
  }
}

/**
 * The parameters of new jobs as `jobInsert` and `jobInsertAllNew` take them (statements.ts
 * `NEW_JOB_SHARED`): ids, keys, fingerprints and inputs as arrays; every other column as one
 * scalar when all the jobs share its value, else as an array. Also each job's backoff as written
 * (jobs of one operation share one policy object: serialized once).
 */
function newJobParams(jobs: JobInsert[]): { params: unknown[]; backoffJson: string[] } {
  const n = jobs.length;
  const ids = new Array<string>(n);
  const keys = new Array<string>(n);
  const fingerprints = new Array<string>(n);
  const inputs = new Array<string>(n);
  const backoffJson = new Array<string>(n);
  let lastBackoff: unknown = undefined;
  let lastJson = '';
  for (let i = 0; i < n; i++) {
    const j = jobs[i]!;
    ids[i] = j.id;
    keys[i] = j.requestKey;
    fingerprints[i] = j.fingerprint;
    inputs[i] = j.inputJson;
    if (j.backoff !== lastBackoff) {
      lastBackoff = j.backoff;
      lastJson = JSON.stringify(j.backoff);
    }
    backoffJson[i] = lastJson;
  }
  const params: unknown[] = [ids, keys, fingerprints, inputs];
  for (const [name] of NEW_JOB_SHARED) {
    const values: unknown[] =
      name === 'backoff_json' ? backoffJson : jobs.map((j) => sharedColumn(j, name));
    const first = values[0];
    if (values.every((v) => v === first)) params.push(first, []);
    else params.push(null, values);
  }
  return { params, backoffJson };
}

/** A shared column's value for one job; backoff_json is serialized once, by `newJobParams`. */
function sharedColumn(
  j: JobInsert,
  name: Exclude<(typeof NEW_JOB_SHARED)[number][0], 'backoff_json'>,
): unknown {
  switch (name) {
    case 'queue':
      return j.queue;
    case 'operation':
      return j.operation;
    case 'run_id':
      return j.runId;
    case 'step_id':
      return j.stepId;
    case 'priority':
      return j.priority;
    case 'delay_ms':
      return j.delayMs;
    case 'run_at':
      return j.runAt;
    case 'max_attempts':
      return j.maxAttempts;
    case 'timeout_ms':
      return j.timeoutMs;
    case 'reconcile_grace_ms':
      return j.reconcileGraceMs;
    case 'trace_parent':
      return j.traceParent ?? null;
    case 'approval':
      return j.approval !== undefined;
    case 'approval_reason':
      return j.approval?.reason ?? null;
    case 'approval_expires_ms':
      return j.approval?.expiresInMs ?? null;
    case 'rate_key':
      return j.rateKey ?? null;
    case 'concurrency_key':
      return j.concurrencyKey ?? null;
  }
}

/** A unique violation of the request key: some job of the insert names a key that exists. */
function isRequestKeyTaken(err: unknown): boolean {
  const e = err as { code?: unknown; constraint?: unknown };
  return e.code === '23505' && e.constraint === REQUEST_KEY_CONSTRAINT;
}

/**
 * How often an enqueue inserts again when its key's job was pruned between its insert and its
 * read of that job. Each round is a new prune of a new holder of the key, which takes a job that
 * finished and aged out within the enqueue: past a few rounds it is a broken store.
 */
const PRUNED_KEY_ROUNDS_MAX = 5;

/** The UNIQUE constraint of jobs.request_key (schema.ts), as PostgreSQL names it. */
const REQUEST_KEY_CONSTRAINT = 'jobs_request_key_key';

/** The caller's client for a transactional enqueue: anything with pg's `query` method. */
function callerClient(transaction: unknown): Queryable {
  if (
    typeof transaction !== 'object' ||
    transaction === null ||
    typeof (transaction as { query?: unknown }).query !== 'function'
  ) {
    throw new InvalidInput(
      'transaction must be a pg Client or PoolClient with an open transaction (BEGIN already run)',
    );
  }
  return transaction as Queryable;
}
