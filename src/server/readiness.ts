/**
 * `GET /readyz` for `reckon work --metrics-port`: a service manager or a load balancer asks
 * whether this worker takes jobs. Ready means started, not stopping, and its store answering
 * within `readinessStoreTimeoutMs`; `/healthz` (the process is alive) stays as it was.
 */
import type { Clock, ClockTimer } from '../core/clock.js';
import type { RouteHandler } from './metrics-server.js';

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

export function readinessRoute(options: ReadinessOptions): RouteHandler {
  const timeoutMs = options.readinessStoreTimeoutMs ?? READINESS_STORE_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1)
    throw new RangeError(`readinessStoreTimeoutMs must be a positive integer, got ${timeoutMs}`);
  return async (req, res, url) => {
    if (url.pathname !== '/readyz' || (req.method !== 'GET' && req.method !== 'HEAD')) return false;
    const answer = (ready: boolean, detail: Record<string, unknown>) =>
      res
        .writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
        .end(`${JSON.stringify({ ready, ...detail })}\n`);
    const phase = options.phase();
    if (phase !== 'ready') {
      answer(false, { phase });
      return true;
    }
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
      answer(true, { phase });
    } catch (err) {
      answer(false, { phase, reason: err instanceof Error ? err.message : String(err) });
    } finally {
      options.clock.clearTimeout(timer);
    }
    return true;
  };
}
