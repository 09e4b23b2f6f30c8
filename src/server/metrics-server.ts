/**
 * A small HTTP endpoint for Prometheus: `GET /metrics` (text exposition) and `GET /healthz`.
 * Used by `reckon work --metrics-port` (this worker's counters plus the store's gauges) and by
 * `reckon serve`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Metrics } from '../observe/metrics.js';
import { hostAllowed } from './host-check.js';

export interface HttpEndpoint {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

export type RouteHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
) => Promise<boolean> | boolean;

export interface MetricsServerOptions {
  metrics: Metrics;
  port: number;
  /** Loopback by default: metrics say a lot about a business; expose them on purpose. */
  host?: string;
  /** Extra routes tried before /metrics and /healthz; return true when handled. */
  routes?: RouteHandler[];
  /**
   * Check the `Host` header (DNS rebinding): accept the bound address, localhost, IP literals
   * and these names (`*`: any). Unset: no check.
   */
  allowedHosts?: readonly string[];
}

export async function startMetricsServer(options: MetricsServerOptions): Promise<HttpEndpoint> {
  const host = options.host ?? '127.0.0.1';
  const server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    });
  });
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const allowed = options.allowedHosts;
    if (allowed && !hostAllowed(req.headers.host, { bound: host, allowed })) {
      const message =
        `Host ${JSON.stringify(req.headers.host)} is not this server's address: refused, so that ` +
        'a web page cannot reach it by DNS rebinding. Use the address it listens on or ' +
        'localhost, or start it with --allowed-hosts <name> (or RECKON_SERVE_ALLOWED_HOSTS)';
      res
        .writeHead(421, { 'content-type': 'application/json; charset=utf-8' })
        .end(JSON.stringify({ error: { code: 'HOST_NOT_ALLOWED', message } }));
      return;
    }
    const url = new URL(req.url ?? '/', `http://${req.headers.host ?? 'localhost'}`);
    for (const route of options.routes ?? []) if (await route(req, res, url)) return;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (url.pathname === '/metrics') {
      const body = await options.metrics.text();
      res.writeHead(200, { 'content-type': options.metrics.contentType }).end(body);
      return;
    }
    if (url.pathname === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics\n');
  }
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
