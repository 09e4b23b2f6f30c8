/**
 * Live updates over SSE: a `change` event when jobs may have changed, which refreshes the page's
 * live region (htmx's SSE extension; the person can pause it). Where the store announces changes
 * (`jobChangeSubscribe`: a job became terminal, UNKNOWN, NEEDS_REVIEW or AWAITING_APPROVAL) they
 * are passed on, at most one event per `liveEventIntervalMs`; a job's page also reads that job
 * every `liveJobPollMs`, so that its other moves (leased, queued) arrive too.
 */
import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import type { Clock, ClockTimer } from '../../core/clock.js';
import type { Queue } from '../../runtime/queue.js';
import type { JobDetail } from '../../store/store.js';
import type { AppEnv } from '../context.js';

export interface LiveSettings {
  /** The least time between two `change` events of one stream (ms): a burst of commits is one refresh. */
  liveEventIntervalMs: number;
  /** How often a job's page reads its job for moves the store does not announce (ms). */
  liveJobPollMs: number;
  /** A comment line this often keeps proxies from closing an idle stream (ms). */
  liveKeepAliveMs: number;
}

export const LIVE_DEFAULTS: LiveSettings = {
  liveEventIntervalMs: 1_000,
  liveJobPollMs: 2_000,
  liveKeepAliveMs: 15_000,
};

/** What a job's page shows changes when this does (the page sends the one it was rendered from). */
export function signatureOf(d: JobDetail | null): string {
  return d ? `${d.job.state}.${d.job.updatedAt}.${d.events.length}.${d.attempts.length}` : 'gone';
}

async function readSignature(queue: Queue, jobId: string): Promise<string> {
  return signatureOf(await queue.job(jobId));
}

/** One stream's timers, on the queue's clock; `stop` clears them all. */
function timers(clock: Clock) {
  const live = new Set<ClockTimer>();
  return {
    after(ms: number, fn: () => void): void {
      const t = clock.setTimeout(
        () => {
          live.delete(t);
          fn();
        },
        ms,
        { unref: true },
      );
      live.add(t);
    },
    stop(): void {
      for (const t of live) clock.clearTimeout(t);
      live.clear();
    },
  };
}

/**
 * The stream of one page. `job`: the job a job's page shows, and `seen` the signature it was
 * rendered from; a change between the render and the stream's start is sent at once.
 */
export function liveStream(
  c: Context<AppEnv>,
  queue: Queue,
  s: LiveSettings,
  job?: { id: string; seen: string },
) {
  const jobId = job?.id;
  return streamSSE(c, async (stream) => {
    const clock = queue.clock;
    const t = timers(clock);
    let closed = false;
    let lastSent = 0;
    let due = false;
    const send = () => {
      if (closed || due) return;
      const wait = Math.max(0, lastSent + s.liveEventIntervalMs - clock.monotonic());
      due = true;
      t.after(wait, () => {
        due = false;
        lastSent = clock.monotonic();
        if (!closed)
          void stream.writeSSE({ event: 'change', data: jobId ?? '*' }).catch(() => undefined);
      });
    };
    const sub = queue.store.jobChangeSubscribe
      ? await queue.store.jobChangeSubscribe({
          onChange: (ids) => {
            if (!jobId || ids.length === 0 || ids.includes(jobId)) send();
          },
        })
      : null;
    let signature = job ? job.seen : '';
    const poll = () =>
      t.after(s.liveJobPollMs, () => {
        void readSignature(queue, jobId!)
          .then((now) => {
            if (now !== signature) {
              signature = now;
              send();
            }
          })
          .catch(() => undefined)
          .finally(() => !closed && poll());
      });
    if (jobId) {
      const now = await readSignature(queue, jobId);
      if (now !== signature) {
        signature = now;
        send();
      }
      poll();
    }
    const keepAlive = () =>
      t.after(s.liveKeepAliveMs, () => {
        if (closed) return;
        void stream.write(': keep-alive\n\n').catch(() => undefined);
        keepAlive();
      });
    keepAlive();
    await new Promise<void>((resolve) => {
      stream.onAbort(() => {
        closed = true;
        t.stop();
        resolve();
      });
    });
    await sub?.close();
  });
}
