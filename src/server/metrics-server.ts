/**
 * A small HTTP endpoint for Prometheus: `GET /metrics` (text exposition) and `GET /healthz`, on
 * Hono like `reckon serve`'s app (the same Host check and problem documents). Used by
 * `reckon work --metrics-port` (this worker's counters plus the store's gauges, and `/readyz`).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import type { Metrics } from '../observe/metrics.js';
import { checkHost } from './edge.js';
import { problem } from './problem.js';

export interface HttpEndpoint {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** More routes for the endpoint (`/readyz`): a Hono app mounted at its root. */
export type MetricsRoutes = Hono;

export interface MetricsServerOptions {
  metrics: Metrics;
  port: number;
  /** Loopback by default: metrics say a lot about a business; expose them on purpose. */
  host?: string;
  /** Extra routes, tried before /metrics and /healthz. */
  routes?: MetricsRoutes[];
  /**
   * Check the `Host` header (DNS rebinding): accept the bound address, localhost, IP literals
   * and these names (`*`: any). Unset: no check.
   */
  allowedHosts?: readonly string[];
}

/** The endpoint's app: the Host check, then the routes; GET and HEAD only. */
export function metricsApp(options: Omit<MetricsServerOptions, 'port'>): Hono {
  const host = options.host ?? '127.0.0.1';
  const allowed = options.allowedHosts;
  const app = new Hono();
  app.onError((err, c) => problem(c, err));
  app.use(async (c, next) => {
    if (allowed) checkHost(c.req.header('host'), { bound: host, allowed });
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD')
      return c.body(null, 405, { allow: 'GET, HEAD' });
    await next();
  });
  for (const routes of options.routes ?? []) app.route('/', routes);
  app.get('/metrics', async (c) =>
    c.body(await options.metrics.text(), 200, { 'content-type': options.metrics.contentType }),
  );
  app.get('/healthz', (c) => c.text('ok\n'));
  app.notFound((c) => c.text('not found: try /metrics\n', 404));
  return app;
}

export async function startMetricsServer(options: MetricsServerOptions): Promise<HttpEndpoint> {
  const host = options.host ?? '127.0.0.1';
  const listener = getRequestListener(metricsApp(options).fetch);
  const server = createServer((req, res) => void listener(req, res));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
