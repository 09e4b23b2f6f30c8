/**
 * An MCP client "agent" using reckon as its tool server: it starts `reckon mcp` over stdio (as
 * Claude Desktop, OpenClaw or any MCP host does), lists the tools and sends one email.
 *
 * Keys: with `--scope <run id>` the server derives each call's key from the run id and the
 * arguments, so a restarted agent that calls again attaches to the job it already made; a
 * client may instead give its own key in `_meta["reckon/key"]`.
 *
 *   RECKON_STORE=sqlite:./reckon.db RUN_ID=run-1 MAILBOX_SMTP_PORT=… MAILBOX_URL=… \
 *     node examples/agent/mcp-client.js
 */
/* global URL */
import process from 'node:process';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

/** The reckon CLI of this package (dist/cli/main.js beside dist/index.js). */
const RECKON_BIN = fileURLToPath(new URL('./cli/main.js', import.meta.resolve('reckon')));
const OPERATIONS = fileURLToPath(new URL('./email.js', import.meta.url));

/** Connects to a `reckon mcp` child serving the email operations. */
export async function connectReckon({ store, args = [], env = {} }) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [RECKON_BIN, 'mcp', '--operations', OPERATIONS, '--store', store, ...args],
    env: { ...process.env, ...env },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'example-agent', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

export async function sendOneEmail(client, meta) {
  const email = { to: 'ada@example.com', subject: 'Report', body: 'The report is ready.' };
  const res = await client.callTool({
    name: 'email_send',
    arguments: email,
    ...(meta ? { _meta: meta } : {}),
  });
  return { isError: res.isError ?? false, answer: res.structuredContent, meta: res._meta };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const runId = process.env.RUN_ID ?? 'run-1';
  const client = await connectReckon({
    store: process.env.RECKON_STORE ?? 'sqlite:./reckon.db',
    args: ['--scope', runId, '--wait-ms', process.env.AGENT_WAIT_MS ?? '60000'],
  });
  try {
    const { tools } = await client.listTools();
    const out = await sendOneEmail(client);
    process.stdout.write(`${JSON.stringify({ tools: tools.map((t) => t.name), ...out })}\n`);
  } finally {
    await client.close();
  }
}
