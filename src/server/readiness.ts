/**
 * `GET /readyz` for `reckon work --metrics-port`: a service manager or a load balancer asks
 * whether this worker takes jobs. Ready means started, not stopping, and its store answering
 * within `readinessStoreTimeoutMs`; `/healthz` (the process is alive) stays as it was.
 */
import { Hono } from 'hono';
import type { Clock, ClockTimer } from '../core/clock.js';
import type { MetricsRoutes } from './metrics-server.js';

export type WorkerPhase = 'starting' | 'ready' | 'stopping';

/** How long /readyz waits for the store: a probe answers in well under a second when healthy. */
export const READINESS_STORE_TIMEOUT_MS = 2_000;

export interface ReadinessOptions {
  phase(): WorkerPhase;
  /** Resolves when the store answers (a clock read is the cheapest round trip). */
  storeAnswers(): Promise<unknown>;
  clock: Clock;
  readinessStoreTimeoutMs?: number;
}

export function readinessRoute(options: ReadinessOptions): MetricsRoutes {
  const timeoutMs = options.readinessStoreTimeoutMs ?? READINESS_STORE_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1)
    throw new RangeError(`readinessStoreTimeoutMs must be a positive integer, got ${timeoutMs}`);
  const app = new Hono();
  app.get('/readyz', async (c) => {
    const answer = (ready: boolean, detail: Record<string, unknown>) =>
      c.body(`${JSON.stringify({ ready, ...detail })}\n`, ready ? 200 : 503, {
        'content-type': 'application/json',
      });
    const phase = options.phase();
    if (phase !== 'ready') return answer(false, { phase });
    let timer: ClockTimer | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = options.clock.setTimeout(
        () => reject(new Error(`the store did not answer within ${timeoutMs} ms`)),
        timeoutMs,
        { unref: true },
      );
    });
    try {
      await Promise.race([options.storeAnswers(), late]);
      return answer(true, { phase });
    } catch (err) {
      return answer(false, { phase, reason: err instanceof Error ? err.message : String(err) });
    } finally {
      options.clock.clearTimeout(timer);
    }
  });
  return app;
}
