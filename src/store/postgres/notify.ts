/**
 * Cross-process wake-ups: one dedicated connection per store LISTENs on the schema's channel and
 * calls the subscribers whose queues a notification names. Best effort by contract (workers still
 * poll), but it heals itself: when the connection dies it reconnects with capped exponential
 * backoff, and wakes every subscriber once it is back, since work may have arrived meanwhile.
 * Notifications sent by the store's own connections are skipped: the store wakes its
 * subscribers for those itself (`wake`), once its statement has committed.
 */
import type pg from 'pg';
import { ListenConnection } from './listen.js';

interface Subscriber {
  queues: ReadonlySet<string>;
  onWork: () => void;
}

export class WorkListener {
  private readonly subscribers = new Set<Subscriber>();
  private readonly listen: ListenConnection;

  /**
   * `isOwn`: does a backend process id belong to the store's own connections? Their
   * notifications are not delivered: the store wakes its subscribers itself, once its statement
   * has committed (`wake`), so that work enqueued here wakes a worker here once, not twice.
   */
  constructor(
    config: pg.ClientConfig,
    channel: string,
    private readonly isOwn: (backendPid: number) => boolean = () => false,
  ) {
    this.listen = new ListenConnection({
      config,
      channel,
      onNotification: (msg) => {
        if (!this.isOwn(msg.processId)) this.deliver(msg.payload);
      },
      // Work may have arrived while the connection was down.
      onReconnect: () => this.wakeAll(),
    });
  }

  /** For tests and health: how many times the connection was (re)established. */
  get connects(): number {
    return this.listen.connects;
  }

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
    // Resolves once the first try is over; a failed try keeps retrying in the background.
    await this.listen.start();
    return {
      close: async () => {
        this.subscribers.delete(sub);
        if (this.subscribers.size === 0) await this.stop();
      },
    };
  }

  stop(): Promise<void> {
    return this.listen.stop();
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
