/**
 * The bounds of `reckon mcp --http`, apart from the server so that the CLI can show them without
 * loading the MCP SDK (an optional peer).
 */
export const MCP_HTTP_DEFAULTS = {
  /** An idle session holds a server and a transport: close it after 10 minutes without a request. */
  sessionIdleMs: 600_000,
  /** Sessions at once: enough for many agents on one host, few enough to bound memory. */
  sessionsMax: 100,
} as const;
