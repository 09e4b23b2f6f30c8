/**
 * Outcome notifications for the PostgreSQL store (`jobChangeSubscribe`, `jobStateMany`): what
 * wakes `q.call` and `q.waitFor` waiters in any process on any host.
 *
 * A trigger on `jobs` (migration "outcome notifications") NOTIFYs the schema's outcome channel
 * with the job's id when a job that someone waits for (`watch`: a row in outcome_waits) reaches
 * a terminal or waiting state, so no statement of the hot path changes. One dedicated connection per subscription (the queue opens one, shared by all
 * its waiters) LISTENs on it. Best effort: it reconnects with capped backoff after a loss and
 * then reports `[]` ("check every job you wait for"), and waiters poll besides. Waiters read
 * job states on that connection too: the pool's connections are busy with the hot path.
 */
import pg from 'pg';
import type { ErrorInfo } from '../../core/errors.js';
import type { Json } from '../../core/json.js';
import type { JobState } from '../../core/states.js';
import type { JobChangeSubscription, JobStateRow } from '../store.js';

const RECONNECT_INITIAL_MS = 100;
const RECONNECT_MAX_MS = 5_000;
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
  private client: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryMs = RECONNECT_INITIAL_MS;
  private stopped = false;
  private connects = 0;
  /** The last statement queued on the connection (see `serial`). */
  private tail: Promise<void> = Promise.resolve();

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly channel: string,
    private readonly onChange: (jobIds: string[], states?: JobStateRow[]) => void,
  ) {}

  /** Reads job states on the listening connection (idle but for notifications). */
  read(schema: string, ids: string[]): Promise<JobStateRow[]> {
    return this.serial((c) => jobStatesRead(c, schema, ids));
  }

  /** One statement at a time on the connection (pg deprecates overlapping queries). */
  private serial<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
    const run = this.tail.then(() => {
      if (!this.client) throw new Error('the outcome listener is reconnecting');
      return fn(this.client);
    });
    this.tail = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /**
   * Marks these jobs as waited for (outcome_waits), so that their changes notify: the ones that
   * exist and are not terminal. Not synchronous: a row lost in a crash costs only latency.
   * FOR SHARE: a job being finished meanwhile is waited for and then seen terminal (no row
   * written), and a finish after this insert waits for it, so the finish's trigger deletes the
   * row. Without it, a row written while its job finished outlived the job's wait for good.
   */
  async watch(schema: string, ids: string[]): Promise<void> {
    const s = quote(schema);
    await this.serial((c) =>
      c.query(
        `INSERT INTO ${s}.outcome_waits (job_id)
       SELECT id FROM ${s}.jobs
       WHERE id = ANY($1::text[]) AND state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
       ORDER BY id FOR SHARE
       ON CONFLICT DO NOTHING`,
        [ids],
      ),
    );
  }

  start(): Promise<void> {
    this.connecting = this.connect();
    return this.connecting;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    await this.connecting;
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ ...this.config, application_name: OUTCOME_LISTENER_APP });
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      if (this.client === client) this.client = null;
      client.end().catch(() => undefined);
      this.scheduleRetry();
    };
    // An 'error' without a listener would crash the process; here it only means "reconnect".
    client.on('error', onLost);
    client.on('end', onLost);
    client.on('notification', (msg) => {
      if (msg.payload) this.notified(msg.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${quote(this.channel)}`);
      // Its writes (outcome_waits) need no fsync: a lost one costs a waiter only latency.
      await client.query('SET synchronous_commit = off');
    } catch {
      onLost();
      return;
    } finally {
      this.connecting = null;
    }
    if (this.stopped || lost) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.connects++;
    this.retryMs = RECONNECT_INITIAL_MS;
    // Notifications sent while we were away are lost: every waiter checks its job.
    if (this.connects > 1) this.tell([]);
  }

  private scheduleRetry(): void {
    if (this.stopped) return;
    clearTimeout(this.retryTimer);
    const ms = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, RECONNECT_MAX_MS);
    this.retryTimer = setTimeout(() => {
      if (!this.stopped) this.connecting = this.connect();
    }, ms);
    this.retryTimer.unref();
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
