/**
 * One dedicated connection that LISTENs on a channel and heals itself: when the connection dies
 * it reconnects with capped exponential backoff, and says so (`onReconnect`) once it is back,
 * since notifications sent meanwhile are lost. Shared by the work wake-ups (notify.ts) and the
 * outcome notifications (outcome-notify.ts).
 */
import pg from 'pg';
import { quoteIdent } from './statements.js';

/** First reconnect delay; doubled up to the max. Short, because a restart usually takes seconds. */
export const LISTEN_RECONNECT_INITIAL_MS = 100;
export const LISTEN_RECONNECT_MAX_MS = 5_000;

export interface ListenOptions {
  config: pg.ClientConfig;
  channel: string;
  onNotification: (msg: pg.Notification) => void;
  /** Called after a reconnect (not the first connect): notifications may have been missed. */
  onReconnect: () => void;
  /** Runs on each new connection after LISTEN (session settings). */
  setup?: (client: pg.Client) => Promise<unknown>;
}

export class ListenConnection {
  private current: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryMs = LISTEN_RECONNECT_INITIAL_MS;
  private stopped = true;
  /** For tests and health: how many times the connection was (re)established. */
  connects = 0;
  lastError: Error | undefined;

  constructor(private readonly o: ListenOptions) {}

  /** The live connection, or null while (re)connecting. */
  get client(): pg.Client | null {
    return this.current;
  }

  get running(): boolean {
    return !this.stopped;
  }

  /** Starts listening; resolves once the first try is over (a failed try keeps retrying). */
  start(): Promise<void> {
    if (this.stopped) {
      this.stopped = false;
      this.connecting = this.connect();
    }
    return this.connecting ?? Promise.resolve();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    await this.connecting;
    const client = this.current;
    this.current = null;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const client = new pg.Client(this.o.config);
    let lost = false;
    const onLost = (err?: Error) => {
      if (lost) return;
      lost = true;
      if (err) this.lastError = err;
      if (this.current === client) this.current = null;
      client.end().catch(() => undefined);
      this.scheduleRetry();
    };
    // An 'error' without a listener would crash the process; here it only means "reconnect".
    client.on('error', onLost);
    client.on('end', () => onLost());
    client.on('notification', (msg) => this.o.onNotification(msg));
    try {
      await client.connect();
      await client.query(`LISTEN ${quoteIdent(this.o.channel)}`);
      await this.o.setup?.(client);
    } catch (err) {
      onLost(err instanceof Error ? err : new Error(String(err)));
      return;
    } finally {
      this.connecting = null;
    }
    if (this.stopped || lost) {
      await client.end().catch(() => undefined);
      return;
    }
    this.current = client;
    this.connects++;
    this.retryMs = LISTEN_RECONNECT_INITIAL_MS;
    if (this.connects > 1) this.o.onReconnect();
  }

  private scheduleRetry(): void {
    if (this.stopped) return;
    clearTimeout(this.retryTimer);
    const ms = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, LISTEN_RECONNECT_MAX_MS);
    this.retryTimer = setTimeout(() => {
      if (!this.stopped) this.connecting = this.connect();
    }, ms);
    this.retryTimer.unref();
  }
}
