/**
 * `reckon/mcp`: reckon operations as the tools of a Model Context Protocol server (the official
 * TypeScript SDK), over stdio or Streamable HTTP. `reckon mcp --operations <module>` runs it.
 */
export {
  KEY_META,
  answerResult,
  createMcpServer,
  mcpToolName,
  serveStdio,
  toolError,
  type ApprovalsMode,
  type McpPrincipal,
  type McpQueue,
  type McpServerOptions,
} from './mcp-server.js';
export {
  MCP_HTTP_DEFAULTS,
  serveHttp,
  type HttpMcpEndpoint,
  type McpHttpOptions,
} from './mcp-http.js';
