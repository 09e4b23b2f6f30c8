/**
 * A downstream for flow-control tests: records every request it receives (arrival time, key,
 * request key) and how many requests of one key it was serving at once, answers after `holdMs`,
 * and can refuse with 429 + Retry-After while `refuseUntil` is in the future. Its verdicts are the
 * business outcome: what reached the service, counted per key.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Hit {
  at: number;
  key: string;
  requestKey: string;
  refused: boolean;
  /** The sending process's pid (`pid` in the query), or ''. */
  pid: string;
}

export class FlowDownstream {
  readonly hits: Hit[] = [];
  /** Requests of one key in progress at once, most seen. */
  maxConcurrentPerKey = 0;
  maxConcurrent = 0;
  /** Until this time (ms) every request is refused with 429 and this Retry-After (ms). */
  refuseUntil = 0;
  retryAfterMs = 1_000;
  holdMs = 0;
  private readonly inFlight = new Map<string, number>();
  private total = 0;
  url = '';

  private constructor(private readonly server: Server) {}

  static async start(): Promise<FlowDownstream> {
    const holder: { self?: FlowDownstream } = {};
    const server = createServer((req, res) => holder.self!.handle(req.url ?? '', res));
    const self = new FlowDownstream(server);
    holder.self = self;
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    self.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return self;
  }

  private handle(path: string, res: import('node:http').ServerResponse): void {
    const u = new URL(path, 'http://x');
    if (u.pathname === '/warm') {
      res.end();
      return;
    }
    const key = u.searchParams.get('key') ?? '';
    const requestKey = u.searchParams.get('rk') ?? '';
    const pid = u.searchParams.get('pid') ?? '';
    const at = Date.now();
    if (at < this.refuseUntil) {
      this.hits.push({ at, key, requestKey, refused: true, pid });
      res.writeHead(429, { 'retry-after-ms': String(this.retryAfterMs) });
      res.end();
      return;
    }
    this.hits.push({ at, key, requestKey, refused: false, pid });
    const n = (this.inFlight.get(key) ?? 0) + 1;
    this.inFlight.set(key, n);
    this.total++;
    this.maxConcurrentPerKey = Math.max(this.maxConcurrentPerKey, n);
    this.maxConcurrent = Math.max(this.maxConcurrent, this.total);
    setTimeout(() => {
      this.inFlight.set(key, (this.inFlight.get(key) ?? 1) - 1);
      this.total--;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    }, this.holdMs);
  }

  /** Accepted requests per request key (each should be 1). */
  perRequestKey(): Map<string, number> {
    const m = new Map<string, number>();
    for (const h of this.hits) if (!h.refused) m.set(h.requestKey, (m.get(h.requestKey) ?? 0) + 1);
    return m;
  }

  /** Accepted requests per whole second of arrival, from `from` to `to` (ms). */
  perSecond(from: number, to: number): number[] {
    const out: number[] = [];
    for (let s = from; s + 1000 <= to; s += 1000)
      out.push(this.hits.filter((h) => !h.refused && h.at >= s && h.at < s + 1000).length);
    return out;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}
