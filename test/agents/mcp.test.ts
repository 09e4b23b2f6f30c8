/**
 * The MCP SDK's own client against `reckon mcp` (the built CLI) over stdio: the operations are
 * listed as tools with their schema and hints, a call keyed twice has one effect, a bad input
 * is a tool error naming the field, and reckon_job reads the outcome.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { openQueue } from '../../src/index.js';
import { tempSqliteStore, type TestStore } from '../helpers/stores.js';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CLI,
  email,
  mcpClient,
  OPERATIONS_MODULE,
  startChild,
  until,
  type Mailbox,
} from './harness.js';

const { connectReckon, sendOneEmail } = mcpClient;

let store: TestStore;
let mailbox: Mailbox;
let client: Client | undefined;

beforeEach(async () => {
  store = tempSqliteStore();
  await (await openQueue({ store: store.url })).close();
  mailbox = await email.startMailbox();
});
afterEach(async () => {
  await client?.close();
  client = undefined;
  await mailbox.close();
  await store.drop();
});

describe('reckon mcp over stdio', () => {
  it('has --help', async () => {
    const help = startChild([CLI, 'mcp', '--help'], {});
    expect((await help.exited).code).toBe(0);
    expect(help.stdout.join('\n')).toMatch(/--operations <module>[\s\S]*--http <port>/);
  });

  it('lists tools, calls one twice with one key for one effect, names a bad field', async () => {
    client = await connectReckon({
      store: store.url,
      args: ['--work', '--wait-ms', '20000'],
      env: mailbox.env,
    });
    const { tools } = await client.listTools();
    const send = tools.find((t) => t.name === 'email_send');
    expect(send?.inputSchema).toMatchObject({
      type: 'object',
      properties: { to: { type: 'string', format: 'email' } },
      required: ['to', 'subject', 'body'],
    });
    // No --scope: the derived key is the session's, which a reconnect does not keep.
    expect(send?.annotations).toMatchObject({ destructiveHint: true, idempotentHint: false });
    expect(tools.map((t) => t.name)).toContain('reckon_job');
    expect(tools.map((t) => t.name)).not.toContain('reckon_approval_decide');

    const meta = { 'reckon/key': 'client-key-1' };
    const first = await sendOneEmail(client, meta);
    const second = await sendOneEmail(client, meta);
    expect(first.isError).toBe(false);
    expect(first.answer).toMatchObject({ status: 'succeeded', requestKey: 'client-key-1' });
    expect(second.answer).toEqual(first.answer);
    expect(mailbox.messages().map((m) => m.key)).toEqual(['client-key-1']);

    const job = await client.callTool({
      name: 'reckon_job',
      arguments: { jobId: first.answer.jobId },
    });
    expect(job.structuredContent).toMatchObject({ state: 'SUCCEEDED', requestKey: 'client-key-1' });

    const bad = await client.callTool({
      name: 'email_send',
      arguments: { to: 'not-an-address', subject: 'x', body: 'y' },
    });
    expect(bad.isError).toBe(true);
    expect(JSON.stringify(bad.content)).toMatch(/INVALID_INPUT: .*to: Invalid email/);
    expect(mailbox.messages()).toHaveLength(1);
  });

  it('derives the key from the scope and the arguments when the client gives none', async () => {
    client = await connectReckon({
      store: store.url,
      args: ['--work', '--scope', 'run-7'],
      env: mailbox.env,
    });
    const a = await sendOneEmail(client);
    const b = await sendOneEmail(client);
    expect(a.answer.requestKey).toMatch(/^mcp:run-7:email_send:[0-9a-f]{32}$/);
    expect(a.meta['reckon/key']).toBe(a.answer.requestKey);
    expect(b.answer.jobId).toBe(a.answer.jobId);
    const send = (await client.listTools()).tools.find((t) => t.name === 'email_send');
    expect(send?.annotations?.idempotentHint).toBe(true);
    // A restarted server with the same scope (the host retries after a reconnect): same job.
    await client.close();
    client = await connectReckon({
      store: store.url,
      args: ['--work', '--scope', 'run-7'],
      env: mailbox.env,
    });
    const c = await sendOneEmail(client);
    expect(c.answer.jobId).toBe(a.answer.jobId);
    expect(mailbox.messages()).toHaveLength(1);
  });

  it('refuses --approvals decide over stdio: no authenticated person to decide for', async () => {
    const child = startChild(
      [
        CLI,
        'mcp',
        '--operations',
        OPERATIONS_MODULE,
        '--store',
        store.url,
        '--approvals',
        'decide',
      ],
      {},
    );
    const { code } = await child.exited;
    expect(code).toBe(64);
    expect(child.stderr.join('')).toMatch(/--approvals decide needs --http/);
  });

  it('serves Streamable HTTP on loopback with --http', async () => {
    const server = startChild(
      [
        CLI,
        'mcp',
        '--operations',
        OPERATIONS_MODULE,
        '--store',
        store.url,
        '--http',
        '0',
        '--work',
      ],
      mailbox.env,
    );
    try {
      let url = '';
      await until(() => {
        url = /MCP server at (\S+)/.exec(server.stderr.join(''))?.[1] ?? '';
        return url !== '';
      });
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
      client = new McpClient({ name: 'http-test', version: '1' });
      await client.connect(new StreamableHTTPClientTransport(new URL(url)));
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('email_send');
      const meta = { 'reckon/key': 'http-key-1' };
      const first = await sendOneEmail(client, meta);
      const second = await sendOneEmail(client, meta);
      expect(first.answer).toMatchObject({ status: 'succeeded', requestKey: 'http-key-1' });
      expect(second.answer.jobId).toBe(first.answer.jobId);
      expect(mailbox.messages()).toHaveLength(1);
      await client.close();
      client = undefined;
    } finally {
      server.proc.kill('SIGTERM');
      expect((await server.exited).code).toBe(0);
    }
  });
});
