/**
 * `reckon/mcp`: reckon operations as the tools of a Model Context Protocol server (the official
 * TypeScript SDK), over stdio or Streamable HTTP. `reckon mcp --operations <module>` runs it.
 *
 * Each tool call is one job. Its request key is the client's, given in `_meta["reckon/key"]`,
 * or else derived: `mcp:<scope>:<tool>:<input hash>`, where the scope is `--scope` (say, the
 * agent's run id, so a restarted agent attaches to its jobs) or the MCP session. Either way
 * the key comes back in the result's `_meta`, and the same key never causes a second effect.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  isInitializeRequest,
  type CallToolResult,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { InvalidInput, errorMessage } from '../core/errors.js';
import { canonicalJson, sha256Hex } from '../core/json.js';
import type { AnyOperation } from '../core/operation.js';
import { jobTools, type ApprovalsMode, type McpQueue } from './mcp-tools.js';
import { callAsTool, describe, inputJsonSchema, type ToolAnswer } from './outcome.js';

export type { ApprovalsMode, McpQueue } from './mcp-tools.js';

/** Where a client puts its own request key for a call. */
export const KEY_META = 'reckon/key';

export interface McpServerOptions {
  operations: AnyOperation[];
  /** Scope of derived keys, e.g. the agent's run id. Default: the MCP session (stdio: the process). */
  scope?: string;
  /** How long one call waits for the outcome before answering "pending". Default 30 s. */
  waitMs?: number;
  /** Expose the approval queue: `list` reads it, `decide` also approves and denies. Default `none`. */
  approvals?: ApprovalsMode;
  /** The server's name in the MCP handshake. Default `reckon`. */
  name?: string;
}

/** The MCP tool name of an operation: `.`, `:` and `/` become `_`. */
export function mcpToolName(op: { name: string }): string {
  return op.name.replace(/[^A-Za-z0-9_-]/g, '_');
}

/** One MCP server (one session) answering with the operations and reckon's own tools. */
export function createMcpServer(q: McpQueue, options: McpServerOptions): Server {
  const byTool = new Map<string, AnyOperation>();
  for (const op of options.operations) {
    const name = mcpToolName(op);
    const other = byTool.get(name);
    if (other)
      throw new InvalidInput(`operations ${other.name} and ${op.name} share tool name ${name}`);
    byTool.set(name, op);
  }
  const extra = jobTools(q, options.approvals ?? 'none');
  const tools: Tool[] = [
    ...[...byTool].map(([name, op]) => operationTool(name, op)),
    ...extra.map((t) => t.tool),
  ];
  const server = new Server(
    { name: options.name ?? 'reckon', version: '1' },
    {
      capabilities: { tools: {} },
      instructions:
        'Each tool call is a durable job in reckon. A "pending" answer means the outcome is not known yet: do not call again for the same request; read it later with reckon_job.',
    },
  );
  const fallbackScope = options.scope ?? randomUUID();
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools }));
  server.setRequestHandler(CallToolRequestSchema, async (req, ctx): Promise<CallToolResult> => {
    const { name, arguments: args = {}, _meta } = req.params;
    const own = extra.find((t) => t.tool.name === name);
    if (own) return own.call(args).catch(toolError);
    const op = byTool.get(name);
    if (!op) return toolError(new InvalidInput(`unknown tool ${JSON.stringify(name)}`));
    const given = _meta?.[KEY_META];
    if (given !== undefined && (typeof given !== 'string' || given.length === 0))
      return toolError(new InvalidInput(`_meta["${KEY_META}"] must be a non-empty string`));
    const scope = options.scope ?? ctx.sessionId ?? fallbackScope;
    const key = given ?? `mcp:${scope}:${name}:${sha256Hex(canonicalJson(args)).slice(0, 32)}`;
    try {
      const answer = await callAsTool({
        q,
        op,
        input: args,
        key: { key },
        ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}),
        signal: ctx.signal,
      });
      return answerResult(answer);
    } catch (err) {
      return toolError(err, key);
    }
  });
  return server;
}

function operationTool(name: string, op: AnyOperation): Tool {
  return {
    name,
    description: describe(op),
    inputSchema: inputJsonSchema(op) as Tool['inputSchema'],
    annotations: {
      title: op.name,
      readOnlyHint: false,
      destructiveHint: op.spec.destructive ?? true,
      // The same arguments in the same scope make the same key: one effect however often called.
      idempotentHint: true,
      openWorldHint: true,
    },
    _meta: { 'reckon/operation': op.name },
  };
}

/** A pending outcome is not an error: the model is told the job id, the state, and not to retry. */
export function answerResult(answer: ToolAnswer): CallToolResult {
  return {
    content: [{ type: 'text', text: JSON.stringify(answer) }],
    structuredContent: answer,
    isError: answer.status === 'failed' || answer.status === 'denied',
    _meta: { [KEY_META]: answer.requestKey, 'reckon/jobId': answer.jobId },
  };
}

/** A typed reckon error (a bad input names its field) as a tool error the model can correct. */
export function toolError(err: unknown, key?: string): CallToolResult {
  const code = (err as { code?: unknown }).code;
  return {
    content: [
      { type: 'text', text: `${typeof code === 'string' ? `${code}: ` : ''}${errorMessage(err)}` },
    ],
    isError: true,
    ...(key ? { _meta: { [KEY_META]: key } } : {}),
  };
}

/** Serves one MCP session over stdin/stdout until the client closes it. */
export async function serveStdio(
  q: McpQueue,
  options: McpServerOptions,
): Promise<{ closed: Promise<void> }> {
  const server = createMcpServer(q, options);
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    server.onclose = () => resolve();
  });
  await server.connect(transport);
  return { closed };
}

export interface HttpMcpEndpoint {
  /** The MCP endpoint, e.g. http://127.0.0.1:8788/mcp */
  url: string;
  close(): Promise<void>;
}

/**
 * Serves Streamable HTTP at `/mcp` on `host:port` (loopback by default: there is no auth, so
 * put it behind your own proxy before exposing it). One MCP server per session.
 */
export async function serveHttp(
  q: McpQueue,
  options: McpServerOptions & { port: number; host?: string },
): Promise<HttpMcpEndpoint> {
  const host = options.host ?? '127.0.0.1';
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const http: HttpServer = createServer((req, res) => {
    void (async () => {
      if (new URL(req.url ?? '/', 'http://x').pathname !== '/mcp') {
        res.writeHead(404).end();
        return;
      }
      const body = req.method === 'POST' ? await readJson(req) : undefined;
      const id = req.headers['mcp-session-id'];
      let transport = typeof id === 'string' ? sessions.get(id) : undefined;
      if (!transport && req.method === 'POST' && isInitializeRequest(body)) {
        const t = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => void sessions.set(sid, t),
          ...rebindingGuard(host, (http.address() as AddressInfo).port),
        });
        t.onclose = () => {
          if (t.sessionId) sessions.delete(t.sessionId);
        };
        await createMcpServer(q, options).connect(t);
        transport = t;
      }
      if (!transport) {
        res.writeHead(400, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            jsonrpc: '2.0',
            error: { code: -32000, message: 'no valid MCP session: initialize first' },
            id: null,
          }),
        );
        return;
      }
      await transport.handleRequest(req, res, body);
    })().catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(errorMessage(err));
    });
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port, host, () => resolve());
  });
  const port = (http.address() as AddressInfo).port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/mcp`,
    close: async () => {
      await Promise.all([...sessions.values()].map((t) => t.close()));
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

/**
 * On loopback, only requests addressed to loopback are served: a web page that rebinds its DNS
 * name to 127.0.0.1 sends its own Host header and is refused.
 */
function rebindingGuard(
  host: string,
  port: number,
): { enableDnsRebindingProtection?: boolean; allowedHosts?: string[] } {
  if (!['127.0.0.1', 'localhost', '::1'].includes(host)) return {};
  return {
    enableDnsRebindingProtection: true,
    allowedHosts: [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`],
  };
}

const BODY_BYTES_MAX = 4 * 1024 * 1024;

async function readJson(req: import('node:http').IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > BODY_BYTES_MAX) throw new InvalidInput('request body over 4 MiB');
    chunks.push(chunk as Buffer);
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
}
