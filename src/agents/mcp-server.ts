/**
 * One MCP server (the official TypeScript SDK's `Server`) whose tools are reckon operations.
 *
 * Each tool call is one job. Its request key is the client's, given in `_meta["reckon/key"]`,
 * or else derived: `mcp:<scope>:<tool>:<input hash>`, where the scope is `scope` (say, the
 * agent's run id, so a restarted agent attaches to its jobs) or else the MCP session. Either way
 * the key comes back in the result's `_meta`, and the same key never causes a second effect.
 * Only a durable scope survives a reconnect or a restart of the server, so only with one do the
 * tools tell the host they are idempotent (`idempotentHint`): a host retries on that hint.
 */
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
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
  /**
   * Who this session authenticated as (`serveHttp` with tokens). The approval decide tool acts
   * only for a principal that may approve; it never acts for an unauthenticated caller.
   */
  principal?: McpPrincipal;
}

/** The person (or service) an MCP session authenticated as. */
export interface McpPrincipal {
  name: string;
  role?: string;
  tokenId?: string;
  /** May decide approvals through `reckon_approval_decide`. */
  mayApprove: boolean;
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
  const extra = jobTools(q, options.approvals ?? 'none', options.principal);
  const durableScope = options.scope !== undefined;
  const tools: Tool[] = [
    ...[...byTool].map(([name, op]) => operationTool(name, op, durableScope)),
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

function operationTool(name: string, op: AnyOperation, durableScope: boolean): Tool {
  return {
    name,
    description: durableScope
      ? describe(op)
      : `${describe(op)} A call is safe to repeat with the same arguments in the same session; across sessions, pass _meta["${KEY_META}"] to attach to the same job.`,
    inputSchema: inputJsonSchema(op) as Tool['inputSchema'],
    annotations: {
      title: op.name,
      readOnlyHint: false,
      destructiveHint: op.spec.destructive ?? true,
      // The same arguments in the same scope make the same key. Only a durable scope (not a
      // session, not a process) keeps that true when the host reconnects and retries.
      idempotentHint: durableScope,
      openWorldHint: true,
    },
    _meta: { 'reckon/operation': op.name, 'reckon/keyScope': durableScope ? 'scope' : 'session' },
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
