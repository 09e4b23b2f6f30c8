/**
 * Cross-process wake-ups: one dedicated connection per store LISTENs on the schema's channel and
 * calls the subscribers whose queues a notification names. Best effort by contract (workers still
 * poll), but it heals itself: when the connection dies it reconnects with capped exponential
 * backoff, and wakes every subscriber once it is back, since work may have arrived meanwhile.
 * Notifications sent by the store's own connections are skipped: the store wakes its
 * subscribers for those itself (`wake`), once its statement has committed.
 */
import pg from 'pg';
import { quoteIdent } from './statements.js';

/** First reconnect delay; doubled up to the max. Short, because a restart usually takes seconds. */
export const LISTEN_RECONNECT_INITIAL_MS = 100;
export const LISTEN_RECONNECT_MAX_MS = 5_000;

interface Subscriber {
  queues: ReadonlySet<string>;
  onWork: () => void;
}

export class WorkListener {
  private readonly subscribers = new Set<Subscriber>();
  private client: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryMs = LISTEN_RECONNECT_INITIAL_MS;
  private stopped = true;
  /** For tests and health: how many times the connection was (re)established. */
  connects = 0;
  lastError: Error | undefined;

  /**
   * `isOwn`: does a backend process id belong to the store's own connections? Their
   * notifications are not delivered: the store wakes its subscribers itself, once its statement
   * has committed (`wake`), so that work enqueued here wakes a worker here once, not twice.
   */
  constructor(
    private readonly config: pg.ClientConfig,
    private readonly channel: string,
    private readonly isOwn: (backendPid: number) => boolean = () => false,
  ) {}

  /** Wakes the subscribers of these queues: work this process committed. */
  wake(queues: Iterable<string>): void {
    const named = new Set(queues);
    if (named.size === 0) return;
    for (const sub of this.subscribers) {
      for (const q of named) {
        if (sub.queues.has(q)) {
          this.call(sub);
          break;
        }
      }
    }
  }

  async subscribe(queues: string[], onWork: () => void): Promise<{ close(): Promise<void> }> {
    const sub: Subscriber = { queues: new Set(queues), onWork };
    this.subscribers.add(sub);
    if (this.stopped) {
      this.stopped = false;
      this.connecting = this.connect();
    }
    // Resolves once the first try is over; a failed try keeps retrying in the background.
    await this.connecting;
    return {
      close: async () => {
        this.subscribers.delete(sub);
        if (this.subscribers.size === 0) await this.stop();
      },
    };
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
    const client = new pg.Client(this.config);
    let lost = false;
    const onLost = (err?: Error) => {
      if (lost) return;
      lost = true;
      if (err) this.lastError = err;
      if (this.client === client) this.client = null;
      client.end().catch(() => undefined);
      this.scheduleRetry();
    };
    // An 'error' without a listener would crash the process; here it only means "reconnect".
    client.on('error', onLost);
    client.on('end', () => onLost());
    client.on('notification', (msg) => {
      if (!this.isOwn(msg.processId)) this.deliver(msg.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${quoteIdent(this.channel)}`);
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
    this.client = client;
    this.connects++;
    this.retryMs = LISTEN_RECONNECT_INITIAL_MS;
    if (this.connects > 1) this.wakeAll();
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

  private deliver(queue: string | undefined): void {
    for (const sub of this.subscribers) {
      if (queue === undefined || sub.queues.has(queue)) this.call(sub);
    }
  }

  private wakeAll(): void {
    for (const sub of this.subscribers) this.call(sub);
  }

  private call(sub: Subscriber): void {
    try {
      sub.onWork();
    } catch {
      // A subscriber's failure is its own; the listener keeps serving the others.
    }
  }
}
