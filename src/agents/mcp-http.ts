/**
 * `reckon mcp --http`: Streamable HTTP at `/mcp`, one MCP server per session, with the edge
 * `reckon serve` has. Every request passes the Host check (DNS rebinding) and, when it carries
 * one, the Origin check (a web page's cross-site request), and the bearer token when one is set.
 * Sessions are bounded: idle ones are closed after `sessionIdleMs`, and at most `sessionsMax`
 * live at once. An unknown session answers 404, as the MCP specification asks, so a client that
 * outlived its session initializes a new one.
 */
import { randomUUID, timingSafeEqual, createHash } from 'node:crypto';
import {
  createServer,
  type IncomingMessage,
  type Server as HttpServer,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InvalidInput, errorMessage } from '../core/errors.js';
import { hostAllowed, hostName } from '../server/host-check.js';
import type { McpQueue } from './mcp-tools.js';
import { createMcpServer, type McpPrincipal, type McpServerOptions } from './mcp-server.js';

export interface McpHttpOptions extends McpServerOptions {
  port: number;
  /** Address to listen on. Default 127.0.0.1. */
  host?: string;
  /** More Host names to accept besides the bound address, localhost and IP literals (`*`: any). */
  allowedHosts?: readonly string[];
  /**
   * Who a bearer token is: undefined refuses the request (401). Without it, `token` (if set) is
   * the one accepted token, for a principal that may not decide approvals.
   */
  authenticate?: (token: string) => Promise<McpPrincipal | undefined>;
  /** The one bearer token every request must carry (compared in constant time). */
  token?: string;
  /** A session with no request for this long is closed (ms). Default 10 minutes. */
  sessionIdleMs?: number;
  /** At most this many sessions at once; a new one past it answers 503. Default 100. */
  sessionsMax?: number;
}

import { MCP_HTTP_DEFAULTS } from './mcp-limits.js';

export { MCP_HTTP_DEFAULTS };

export interface HttpMcpEndpoint {
  /** The MCP endpoint, e.g. http://127.0.0.1:8788/mcp */
  url: string;
  /** Sessions open now. */
  sessions(): number;
  close(): Promise<void>;
}

interface Session {
  transport: StreamableHTTPServerTransport;
  principal: McpPrincipal | undefined;
  lastSeen: number;
  inFlight: number;
}

const BODY_BYTES_MAX = 4 * 1024 * 1024;

/** Serves Streamable HTTP at `/mcp` on `host:port` until `close()`. */
export async function serveHttp(q: McpQueue, options: McpHttpOptions): Promise<HttpMcpEndpoint> {
  const host = options.host ?? '127.0.0.1';
  const idleMs = options.sessionIdleMs ?? MCP_HTTP_DEFAULTS.sessionIdleMs;
  const sessionsMax = options.sessionsMax ?? MCP_HTTP_DEFAULTS.sessionsMax;
  if (!Number.isInteger(idleMs) || idleMs < 1)
    throw new InvalidInput('sessionIdleMs must be a positive integer (ms)');
  if (!Number.isInteger(sessionsMax) || sessionsMax < 1)
    throw new InvalidInput('sessionsMax must be a positive integer');
  const edge: Edge = {
    q,
    options,
    policy: { bound: host, allowed: options.allowedHosts ?? [] },
    authenticate: authenticator(options),
    sessions: new Map(),
    idleMs,
    sessionsMax,
  };
  const http: HttpServer = createServer((req, res) => {
    handle(edge, req, res).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(errorMessage(err));
    });
  });
  const sweep = setInterval(
    () => closeIdle(edge),
    Math.max(10, Math.min(60_000, Math.floor(idleMs / 4))),
  );
  sweep.unref();
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port, host, () => resolve());
  });
  const port = (http.address() as AddressInfo).port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/mcp`,
    sessions: () => edge.sessions.size,
    close: async () => {
      clearInterval(sweep);
      await Promise.all([...edge.sessions.values()].map((s) => s.transport.close()));
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

interface Edge {
  q: McpQueue;
  options: McpHttpOptions;
  policy: { bound: string; allowed: readonly string[] };
  authenticate: (header: string | undefined) => Promise<Authenticated>;
  sessions: Map<string, Session>;
  idleMs: number;
  sessionsMax: number;
}

/** One request: the edge checks, then its session (an existing one, or a new one on initialize). */
async function handle(edge: Edge, req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (new URL(req.url ?? '/', 'http://x').pathname !== '/mcp') return void res.writeHead(404).end();
  if (!hostAllowed(req.headers.host, edge.policy))
    return rpcError(res, 421, 'this server does not answer for that Host name');
  const origin = req.headers.origin;
  if (origin !== undefined && !originAllowed(origin, edge.policy))
    return rpcError(res, 403, 'cross-origin requests are refused');
  const auth = await edge.authenticate(req.headers.authorization);
  if (auth === 'refused') {
    res.setHeader('www-authenticate', 'Bearer');
    return rpcError(res, 401, 'a valid bearer token is required');
  }
  const body = req.method === 'POST' ? await readJson(req) : undefined;
  const id = req.headers['mcp-session-id'];
  let session = typeof id === 'string' ? edge.sessions.get(id) : undefined;
  if (typeof id === 'string' && !session)
    return rpcError(res, 404, 'unknown or expired MCP session: initialize a new one');
  if (session && session.principal?.name !== auth?.name)
    return rpcError(res, 403, 'this session belongs to another token');
  if (!session) {
    if (req.method !== 'POST' || !isInitializeRequest(body))
      return rpcError(res, 400, 'no MCP session: initialize first');
    if (edge.sessions.size >= edge.sessionsMax) {
      res.setHeader('retry-after', String(Math.ceil(edge.idleMs / 1000)));
      return rpcError(res, 503, `too many MCP sessions (${edge.sessionsMax}); try again later`);
    }
    session = await openSession(edge, auth);
  }
  session.lastSeen = Date.now();
  // A call in progress keeps its session; a client's standing GET stream (server-sent
  // messages) does not: it stays open as long as the client's connection, used or not.
  const counted = req.method === 'POST';
  if (counted) session.inFlight += 1;
  try {
    await session.transport.handleRequest(req, res, body);
  } finally {
    if (counted) session.inFlight -= 1;
    session.lastSeen = Date.now();
  }
}

async function openSession(edge: Edge, principal: McpPrincipal | undefined): Promise<Session> {
  const session: Session = {
    principal,
    lastSeen: Date.now(),
    inFlight: 0,
    transport: new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => void edge.sessions.set(sid, session),
    }),
  };
  session.transport.onclose = () => {
    if (session.transport.sessionId) edge.sessions.delete(session.transport.sessionId);
  };
  await createMcpServer(edge.q, {
    ...edge.options,
    ...(principal ? { principal } : {}),
  }).connect(session.transport);
  return session;
}

function closeIdle(edge: Edge): void {
  const cutoff = Date.now() - edge.idleMs;
  for (const s of edge.sessions.values())
    if (s.inFlight === 0 && s.lastSeen <= cutoff) void s.transport.close();
}

type Authenticated = McpPrincipal | undefined | 'refused';

function authenticator(
  options: McpHttpOptions,
): (header: string | undefined) => Promise<Authenticated> {
  const { token, authenticate } = options;
  if (token === undefined && authenticate === undefined) return () => Promise.resolve(undefined);
  const tokenHash = token === undefined ? undefined : digest(token);
  return async (header) => {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
    if (!m) return 'refused';
    const given = m[1]!;
    if (tokenHash && timingSafeEqual(digest(given), tokenHash))
      return { name: 'token', mayApprove: false };
    return (await authenticate?.(given)) ?? 'refused';
  };
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** An Origin (a browser's request) is accepted only for a host the Host check accepts. */
function originAllowed(origin: string, policy: { bound: string; allowed: readonly string[] }) {
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  return hostAllowed(url.host, policy) && hostName(url.host) !== '';
}

function rpcError(res: ServerResponse, status: number, message: string): void {
  res
    .writeHead(status, { 'content-type': 'application/json' })
    .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > BODY_BYTES_MAX) throw new InvalidInput('request body over 4 MiB');
    chunks.push(chunk as Buffer);
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
}
