/**
 * Outcome notifications for the PostgreSQL store (`jobChangeSubscribe`, `jobStateMany`): what
 * wakes `q.call` and `q.waitFor` waiters in any process on any host.
 *
 * A row trigger on `jobs` (migration 11) NOTIFYs the schema's outcome channel with the job's id
 * when a job that someone waits for (`watch`: its `watched` flag, tested in the trigger's WHEN,
 * so other jobs cost no call) reaches a terminal or waiting state: no statement of the hot path
 * changes. One dedicated connection per subscription (the queue opens one, shared by all
 * its waiters) LISTENs on it. Best effort: it reconnects with capped backoff after a loss and
 * then reports `[]` ("check every job you wait for"), and waiters poll besides. Waiters read
 * job states on that connection too: the pool's connections are busy with the hot path.
 */
import pg from 'pg';
import type { ErrorInfo } from '../../core/errors.js';
import type { Json } from '../../core/json.js';
import type { JobState } from '../../core/states.js';
import type { JobChangeSubscription, JobStateRow } from '../store.js';
import { ListenConnection } from './listen.js';

/** The listener's `application_name`, so that operators can tell it from the pool's. */
export const OUTCOME_LISTENER_APP = 'reckon-outcomes';

function quote(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The channel a schema's trigger notifies (`TG_TABLE_SCHEMA || '_outcome'`). */
export function outcomeChannel(schema: string): string {
  return `${schema}_outcome`;
}

interface Queryable {
  query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
}

/** The states of these jobs in one read; unknown ids are left out. */
export async function jobStatesRead(
  c: Queryable,
  schema: string,
  ids: string[],
): Promise<JobStateRow[]> {
  if (ids.length === 0) return [];
  const table = `${quote(schema)}.jobs`;
  const r = await c.query<{
    id: string;
    state: string;
    result_json: string | null;
    error_json: string | null;
  }>(
    `SELECT id, state,
       CASE WHEN state IN ('SUCCEEDED','FAILED','CANCELLED') THEN result_json END AS result_json,
       CASE WHEN state IN ('SUCCEEDED','FAILED','CANCELLED') THEN error_json END AS error_json
     FROM ${table} WHERE id = ANY($1::text[])`,
    [ids],
  );
  return r.rows.map((row) => ({
    id: row.id,
    state: row.state as JobState,
    result: row.result_json === null ? null : (JSON.parse(row.result_json) as Json),
    error: row.error_json === null ? null : (JSON.parse(row.error_json) as ErrorInfo),
  }));
}

/** LISTENs on the outcome channel on a connection of its own; resolves once the first try is over. */
export async function jobChangesSubscribe(p: {
  config: pg.ClientConfig;
  schema: string;
  onChange: (jobIds: string[], states?: JobStateRow[]) => void;
}): Promise<JobChangeSubscription> {
  const listener = new OutcomeListener(p.config, outcomeChannel(p.schema), p.onChange);
  await listener.start();
  return {
    close: () => listener.stop(),
    jobStateMany: ({ ids }) => listener.read(p.schema, ids),
    watch: ({ ids }) => listener.watch(p.schema, ids),
  };
}

class OutcomeListener {
  private readonly listen: ListenConnection;
  /** The last statement queued on the connection (see `serial`). */
  private tail: Promise<void> = Promise.resolve();

  constructor(
    config: pg.ClientConfig,
    channel: string,
    private readonly onChange: (jobIds: string[], states?: JobStateRow[]) => void,
  ) {
    this.listen = new ListenConnection({
      config: { ...config, application_name: OUTCOME_LISTENER_APP },
      channel,
      onNotification: (msg) => {
        if (msg.payload) this.notified(msg.payload);
      },
      // Notifications sent while we were away are lost: every waiter checks its job.
      onReconnect: () => this.tell([]),
      // Its writes (`watched` flags) need no fsync: a lost one costs a waiter only latency.
      setup: (c) => c.query('SET synchronous_commit = off'),
    });
  }

  /** Reads job states on the listening connection (idle but for notifications). */
  read(schema: string, ids: string[]): Promise<JobStateRow[]> {
    return this.serial((c) => jobStatesRead(c, schema, ids));
  }

  /** One statement at a time on the connection (pg deprecates overlapping queries). */
  private serial<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
    const run = this.tail.then(() => {
      const client = this.listen.client;
      if (!client) throw new Error('the outcome listener is reconnecting');
      return fn(client);
    });
    this.tail = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /**
   * Marks these jobs as waited for (`watched`), so that their changes notify: the ones that
   * exist, are not terminal and are not watched yet. Not synchronous: a flag lost in a crash
   * costs only latency. A job being finished meanwhile is waited for and then seen terminal (no
   * flag set); a finish after the flag sees it. Locked in id order, as the finishes lock.
   */
  async watch(schema: string, ids: string[]): Promise<void> {
    const s = quote(schema);
    await this.serial((c) =>
      c.query(
        `UPDATE ${s}.jobs j SET watched = true
       FROM (SELECT id FROM ${s}.jobs
         WHERE id = ANY($1::text[]) AND NOT watched
           AND state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
         ORDER BY id FOR NO KEY UPDATE) w
       WHERE j.id = w.id`,
        [ids],
      ),
    );
  }

  start(): Promise<void> {
    return this.listen.start();
  }

  stop(): Promise<void> {
    return this.listen.stop();
  }

  /** A payload is `{ id, state?, result?, error? }` (see the migration); result and error as JSON text. */
  private notified(payload: string): void {
    let n: { id?: unknown; state?: unknown; result?: unknown; error?: unknown };
    try {
      n = JSON.parse(payload) as typeof n;
    } catch {
      return this.tell([]); // not ours to read: check every waited job
    }
    if (typeof n.id !== 'string') return this.tell([]);
    if (typeof n.state !== 'string') return this.tell([n.id]);
    const text = (v: unknown) => (typeof v === 'string' ? v : null);
    const result = text(n.result);
    const error = text(n.error);
    this.tell(
      [n.id],
      [
        {
          id: n.id,
          state: n.state as JobState,
          result: result === null ? null : (JSON.parse(result) as Json),
          error: error === null ? null : (JSON.parse(error) as ErrorInfo),
        },
      ],
    );
  }

  private tell(ids: string[], states?: JobStateRow[]): void {
    try {
      this.onChange(ids, states);
    } catch {
      // The subscriber's failure is its own.
    }
  }
}
