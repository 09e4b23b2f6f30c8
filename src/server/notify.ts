/**
 * Telling a person there is something to decide: when a job enters AWAITING_APPROVAL or
 * NEEDS_REVIEW, a POST to a URL (Slack-compatible `{ text }`, or plain JSON) with a link to the
 * job's console page.
 *
 * Each notification is a reckon job itself (operation `reckon.notify`, queue `reckon.notify`),
 * keyed `reckon.notify:<job id>:<state>:<attempt no>`: a scan that runs again, in this process
 * or after a crash, enqueues nothing new (the key deduplicates), and the delivery has reckon's
 * guarantees: a worker killed before the request left retries it; one killed after it may have
 * left does not send it again (the job goes to NEEDS_REVIEW, never notified about itself).
 * The URL lives in the delivering process's configuration, never in the journal: a Slack
 * webhook's URL is a secret.
 */
import type { ClockTimer } from '../core/clock.js';
import { defineOperation, type Operation } from '../core/operation.js';
import { errorMessage } from '../core/errors.js';
import type { Queue } from '../runtime/queue.js';
import type { Worker } from '../runtime/worker.js';
import type { JobRecord } from '../store/store.js';

export const NOTIFY_OPERATION = 'reckon.notify';
export const NOTIFY_QUEUE = 'reckon.notify';

export interface NotifyOptions {
  /** Where to POST. */
  url: string;
  /** `slack`: `{ text }` (Slack, Mattermost, Teams incoming webhooks); `json`: the fields. */
  format: 'slack' | 'json';
  /** The console's public address, for links (e.g. https://ops.example/reckon). */
  consoleUrl: string;
  /** How often to look for jobs that became waiting (ms). Default 5000. */
  scanIntervalMs?: number;
  /** The lease of a delivery (ms): how soon a delivery of a killed process is taken over. */
  leaseMs?: number;
  /** Longest a delivery's request may take (ms). Default 10000. */
  timeoutMs?: number;
}

/** Most waiting jobs one scan looks at, per state: the oldest first; the rest on later scans. */
const SCAN_JOBS_MAX = 1_000;

export interface NotifyInput {
  jobId: string;
  event: 'awaiting_approval' | 'needs_review';
  operation: string;
  queue: string;
  reason: string | null;
  url: string;
}

/** The built-in operation that delivers one notification. */
export function notifyOperation(o: NotifyOptions): Operation<NotifyInput, { status: number }> {
  return defineOperation<NotifyInput, { status: number }>({
    name: NOTIFY_OPERATION,
    timeoutMs: o.timeoutMs ?? 10_000,
    // Nothing can ask a webhook whether it got a request: once sent, never sent again.
    idempotentWithKey: false,
    retry: { maxAttempts: 5, backoff: { initialMs: 1_000, factor: 2, maxMs: 60_000 } },
    execute: (input, ctx) =>
      ctx.dispatch(async () => {
        const res = await fetch(o.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': ctx.requestKey },
          body: JSON.stringify(o.format === 'slack' ? { text: slackText(input) } : input),
          signal: ctx.signal,
        });
        await res.arrayBuffer();
        if (!res.ok) throw new Error(`the notification URL answered ${res.status}`);
        return { status: res.status };
      }),
  });
}

function slackText(n: NotifyInput): string {
  const what = n.event === 'awaiting_approval' ? 'awaits approval' : 'needs review';
  const why = n.reason ? `: ${n.reason}` : '';
  // Slack's link syntax; < > & are escaped in the rest, as Slack asks.
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  return `<${n.url}|${esc(n.operation)} ${esc(n.jobId)}> ${what}${esc(why)}`;
}

/**
 * Scans for waiting jobs and enqueues one notification each; runs a worker that delivers them.
 * `runOnce()` scans once (tests step it).
 */
export class Notifier {
  private readonly op: Operation<NotifyInput, { status: number }>;
  private readonly known = new Set<string>();
  private worker: Worker | undefined;
  private timer: ClockTimer | undefined;
  private stopped = false;
  private scanning: Promise<void> | undefined;

  constructor(
    private readonly queue: Queue,
    private readonly o: NotifyOptions,
  ) {
    this.op = notifyOperation(o);
  }

  async start(): Promise<void> {
    // Keys already enqueued (by this or an earlier process): not enqueued again, not even as a
    // recorded duplicate.
    const recent = await this.queue.jobs({ queue: NOTIFY_QUEUE, limit: 10_000 });
    for (const j of recent) this.known.add(j.requestKey);
    this.worker = this.queue.worker({
      operations: [this.op],
      queues: [NOTIFY_QUEUE],
      concurrency: 4,
      ...(this.o.leaseMs !== undefined ? { leaseMs: this.o.leaseMs } : {}),
    });
    await this.worker.start();
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = this.queue.clock.setTimeout(
      () => {
        this.scanning = this.runOnce()
          .then(() => undefined)
          .catch((err: unknown) =>
            this.queue.log.warn({ err: errorMessage(err) }, 'notification scan failed'),
          )
          .finally(() => this.schedule(this.o.scanIntervalMs ?? 5_000));
      },
      ms,
      { unref: true },
    );
  }

  /** One scan: enqueues a notification for each waiting job that has none. Returns how many. */
  async runOnce(): Promise<number> {
    const [awaiting, review] = await Promise.all([
      this.queue.approvals.list({ limit: SCAN_JOBS_MAX }),
      this.queue.jobs({ state: 'NEEDS_REVIEW', limit: SCAN_JOBS_MAX }),
    ]);
    const items = [
      ...awaiting.map((j) => this.item(j, 'awaiting_approval')),
      ...review
        .filter((j) => j.operation !== NOTIFY_OPERATION)
        .map((j) => this.item(j, 'needs_review')),
    ].filter((i) => !this.known.has(i.key));
    if (items.length === 0) return 0;
    await this.queue.enqueueMany(this.op, items, { actor: 'reckon:notify' });
    for (const i of items) this.known.add(i.key);
    return items.length;
  }

  private item(job: JobRecord, event: NotifyInput['event']) {
    const input: NotifyInput = {
      jobId: job.id,
      event,
      operation: job.operation,
      queue: job.queue,
      reason: event === 'awaiting_approval' ? job.approvalReason : null,
      url: `${this.o.consoleUrl.replace(/\/+$/, '')}/jobs/${encodeURIComponent(job.id)}`,
    };
    return {
      input,
      key: `${NOTIFY_OPERATION}:${job.id}:${job.state}:${job.attemptCount}`,
      queue: NOTIFY_QUEUE,
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.queue.clock.clearTimeout(this.timer);
    await this.scanning;
    await this.worker?.stop();
  }
}
