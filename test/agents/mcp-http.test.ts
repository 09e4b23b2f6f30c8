/**
 * `reckon/mcp` over Streamable HTTP, at its edge: sessions are bounded (idle expiry, a cap), an
 * unknown session answers 404 as the MCP specification asks, Host and Origin are checked on any
 * bind address, a token guards every request, the decide tool acts only for an authenticated
 * approver, and tools claim idempotency only with a durable key scope.
 */
import { request } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { openQueue, type Queue } from '../../src/index.js';
import { serveHttp, type HttpMcpEndpoint, type McpHttpOptions } from '../../src/agents/mcp.js';
import { refund } from '../fixtures/approval-ops.js';
import { tempSqliteStore, type TestStore } from '../helpers/stores.js';
import { until } from './harness.js';

let store: TestStore;
let q: Queue;
let endpoint: HttpMcpEndpoint | undefined;
const clients: Client[] = [];

beforeEach(async () => {
  store = tempSqliteStore();
  q = await openQueue({ store: store.url, operations: [refund] });
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await endpoint?.close();
  endpoint = undefined;
  await q.close();
  await store.drop();
});

async function serve(options: Partial<McpHttpOptions> = {}): Promise<HttpMcpEndpoint> {
  endpoint = await serveHttp(q, { operations: [refund], port: 0, ...options });
  return endpoint;
}

async function connect(url: string, token?: string): Promise<Client> {
  const client = new Client({ name: 'edge-test', version: '1' });
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }),
  );
  clients.push(client);
  return client;
}

const listTools = () => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });

/** A raw POST (node:http, which, unlike fetch, sends the Host header it is given). */
function post(
  url: string,
  headers: Record<string, string>,
  body = listTools(),
): Promise<{ status: number; headers: { get(name: string): string | null } }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...headers,
        },
      },
      (res) => {
        res.resume();
        resolve({
          status: res.statusCode ?? 0,
          headers: { get: (n) => (res.headers[n.toLowerCase()] as string | undefined) ?? null },
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('reckon mcp --http sessions', () => {
  it('answers 404 for an unknown session, so a client initializes a new one', async () => {
    const { url } = await serve();
    const res = await post(url, { 'mcp-session-id': 'no-such-session' });
    expect(res.status).toBe(404);
  });

  it('closes a session idle past sessionIdleMs, then answers its id with 404', async () => {
    const { url } = await serve({ sessionIdleMs: 200 });
    const client = await connect(url);
    await client.listTools();
    expect(endpoint!.sessions()).toBe(1);
    const transport = client.transport as StreamableHTTPClientTransport;
    const sessionId = transport.sessionId!;
    await until(() => endpoint!.sessions() === 0, 10_000);
    const res = await post(url, { 'mcp-session-id': sessionId });
    expect(res.status).toBe(404);
  });

  it('refuses a session past sessionsMax with 503 and Retry-After', async () => {
    const { url } = await serve({ sessionsMax: 2 });
    await connect(url);
    await connect(url);
    const third = new Client({ name: 'third', version: '1' });
    await expect(third.connect(new StreamableHTTPClientTransport(new URL(url)))).rejects.toThrow(
      /503|too many MCP sessions/,
    );
    const res = await post(
      url,
      {},
      JSON.stringify({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: {
          protocolVersion: '2025-06-18',
          capabilities: {},
          clientInfo: { name: 'raw', version: '1' },
        },
      }),
    );
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(endpoint!.sessions()).toBe(2);
  });
});

describe('reckon mcp --http edge', () => {
  it('checks Host on a non-loopback bind address (DNS rebinding)', async () => {
    const { url } = await serve({ host: '0.0.0.0' });
    const port = new URL(url).port;
    const loopback = `http://127.0.0.1:${port}/mcp`;
    expect((await post(loopback, { host: `rebound.example:${port}` })).status).toBe(421);
    const client = await connect(loopback);
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
  });

  it('refuses a cross-origin request from a web page', async () => {
    const { url } = await serve();
    expect((await post(url, { origin: 'https://evil.example' })).status).toBe(403);
  });

  it('requires the bearer token when one is set', async () => {
    const { url } = await serve({ token: 's3cret-token' });
    const res = await post(url, {});
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
    expect((await post(url, { authorization: 'Bearer wrong' })).status).toBe(401);
    const client = await connect(url, 's3cret-token');
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
  });
});

describe('reckon mcp tools', () => {
  it('declare idempotentHint only with a durable key scope', async () => {
    const session = await serve();
    const bySession = await connect(session.url);
    const tool = (await bySession.listTools()).tools.find((t) => t.name === 'payments_refund');
    expect(tool?.annotations?.idempotentHint).toBe(false);
    expect(tool?._meta?.['reckon/keyScope']).toBe('session');
    expect(tool?.description).toMatch(/reckon\/key/);
    await session.close();
    const scoped = await serve({ scope: 'run-42' });
    const byScope = await connect(scoped.url);
    const scopedTool = (await byScope.listTools()).tools.find((t) => t.name === 'payments_refund');
    expect(scopedTool?.annotations?.idempotentHint).toBe(true);
    expect(scopedTool?._meta?.['reckon/keyScope']).toBe('scope');
  });

  it('decide acts only for an authenticated approver, recorded as that person', async () => {
    const job = await q.enqueue(refund, { amount: 300 }, { key: 'refund-1' });
    expect(job.state).toBe('AWAITING_APPROVAL');
    const { url } = await serve({
      approvals: 'decide',
      token: 'agent-token',
      authenticate: (t) =>
        Promise.resolve(
          t === 'dana-token'
            ? { name: 'dana', role: 'approver', tokenId: 'tok_1', mayApprove: true }
            : undefined,
        ),
    });
    const agent = await connect(url, 'agent-token');
    const refused = await agent.callTool({
      name: 'reckon_approval_decide',
      arguments: { jobId: job.id, approve: true },
    });
    expect(refused.isError).toBe(true);
    expect(JSON.stringify(refused.content)).toMatch(/NOT_AUTHORIZED/);
    expect((await q.job(job.id))!.job.state).toBe('AWAITING_APPROVAL');

    const dana = await connect(url, 'dana-token');
    const decided = await dana.callTool({
      name: 'reckon_approval_decide',
      arguments: { jobId: job.id, approve: false, note: 'not this one' },
    });
    expect(decided.isError).toBeFalsy();
    const detail = (await q.job(job.id))!;
    expect(detail.job.state).toBe('CANCELLED');
    const decision = detail.events.find((e) => e.toState === 'CANCELLED');
    expect(decision?.actor).toBe('operator:mcp:dana');
  });
});
