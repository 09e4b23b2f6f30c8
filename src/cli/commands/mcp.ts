/**
 * `reckon mcp --operations <module>`: the operations as the tools of a Model Context Protocol
 * server, over stdio (default) or Streamable HTTP (`--http <port>`). The MCP SDK is an optional
 * peer dependency, loaded only here, so `reckon` works without it.
 */
import { Option, type Command } from 'commander';
import { createLogger, type LoggerOptions } from '../../observe/logger.js';
import type { Worker } from '../../runtime/worker.js';
import type { ApprovalsMode, McpQueue } from '../../agents/mcp.js';
import { MCP_HTTP_DEFAULTS } from '../../agents/mcp-limits.js';
import { parseAllowedHosts } from '../../server/host-check.js';
import { UsageError } from '../exit.js';
import { loadOperations, OPERATIONS_HELP } from '../operations-module.js';
import { intOption } from '../parse.js';
import { addStoreOption, openCliQueue, type StoreFlags } from '../store-option.js';

interface McpFlags extends StoreFlags {
  operations: string;
  http?: number;
  host: string;
  allowedHosts?: string;
  sessionIdleMs: number;
  sessionsMax: number;
  scope?: string;
  waitMs: number;
  approvals: ApprovalsMode;
  work?: boolean;
  logLevel: NonNullable<LoggerOptions['level']>;
}

export function registerMcp(program: Command): void {
  const cmd = program
    .command('mcp')
    .summary('serve the operations as tools of an MCP server (stdio or Streamable HTTP)')
    .description(
      'Each operation of --operations becomes an MCP tool (its input schema, destructive and ' +
        "idempotent hints); each call is a durable job. A call is keyed by the client's " +
        '_meta["reckon/key"], or by a key derived from the arguments within --scope (default: ' +
        'the MCP session), and waits up to --wait-ms for the outcome. A pending outcome answers ' +
        'with the job id and state; the reckon_job tool reads it later.\n\n' +
        'Only a durable --scope (or a client key) survives a reconnect or a restart, so only ' +
        'with --scope do the tools declare idempotentHint. Jobs run on workers (`reckon work`), ' +
        'or in this process with --work. Logs go to stderr; stdout is the MCP stream.\n\n' +
        '--http checks the Host and Origin of every request, closes idle sessions and bounds ' +
        'their number; RECKON_MCP_TOKEN (environment) makes every request carry ' +
        '`Authorization: Bearer <token>`.',
    )
    .requiredOption('--operations <module>', OPERATIONS_HELP)
    .option(
      '--http <port>',
      'serve Streamable HTTP at /mcp on this port (0 = any free port)',
      intOption(0, 65_535),
    )
    .option(
      '--host <host>',
      'address for --http; off loopback, set RECKON_MCP_TOKEN so every request needs the token',
      '127.0.0.1',
    )
    .option(
      '--allowed-hosts <names>',
      'more Host names --http answers for (comma-separated; * any), besides the bound address, localhost and IPs',
    )
    .option(
      '--session-idle-ms <ms>',
      'close an --http session after this long without a request',
      intOption(1_000, 86_400_000),
      MCP_HTTP_DEFAULTS.sessionIdleMs,
    )
    .option(
      '--sessions-max <n>',
      'most --http sessions at once (503 past it)',
      intOption(1, 100_000),
      MCP_HTTP_DEFAULTS.sessionsMax,
    )
    .option(
      '--scope <id>',
      'scope of derived keys, e.g. the agent run id (default: the MCP session)',
    )
    .option(
      '--wait-ms <ms>',
      'how long a call waits for its outcome',
      intOption(0, 3_600_000),
      30_000,
    )
    .addOption(
      new Option(
        '--approvals <mode>',
        'expose the approval queue: list, or decide too (--http only: decisions act for the person an approver token names)',
      )
        .choices(['none', 'list', 'decide'])
        .default('none'),
    )
    .option('--work', 'also run a worker for the operations in this process')
    .addOption(
      new Option('--log-level <level>', 'log level (stderr)')
        .choices(['trace', 'debug', 'info', 'warn', 'error', 'silent'])
        .default('warn'),
    )
    .addHelpText(
      'after',
      '\nExamples:\n  $ reckon mcp --operations ./ops.js --work\n' +
        '  $ reckon mcp --operations ./ops.js --http 8788 --approvals list',
    );
  addStoreOption(cmd);
  cmd.action(runMcp);
}

async function runMcp(flags: McpFlags): Promise<void> {
  if (flags.approvals === 'decide' && flags.http === undefined)
    throw new UsageError(
      '--approvals decide needs --http: a decision acts for an authenticated person, and stdio has none',
    );
  const mcp = await loadMcp();
  const operations = await loadOperations(flags.operations);
  const logger = createLogger({ level: flags.logLevel });
  const q = await openCliQueue(flags.store, { mustExist: true, operations, logger });
  let worker: Worker | undefined;
  try {
    if (flags.work) {
      worker = q.worker({ operations });
      await worker.start();
    }
    const options = {
      operations,
      waitMs: flags.waitMs,
      approvals: flags.approvals,
      ...(flags.scope !== undefined ? { scope: flags.scope } : {}),
    };
    const queue: McpQueue = q;
    if (flags.http === undefined) {
      const { closed } = await mcp.serveStdio(queue, options);
      // The client went away (even killed, without closing): stdin ends, so do we.
      const stdinEnded = new Promise<void>((resolve) => process.stdin.once('end', resolve));
      await Promise.race([closed, stdinEnded, stopSignal()]);
    } else {
      const token = process.env.RECKON_MCP_TOKEN;
      const endpoint = await mcp.serveHttp(queue, {
        ...options,
        port: flags.http,
        host: flags.host,
        allowedHosts: parseAllowedHosts(flags.allowedHosts),
        sessionIdleMs: flags.sessionIdleMs,
        sessionsMax: flags.sessionsMax,
        ...(token ? { token } : {}),
      });
      process.stderr.write(`reckon: MCP server at ${endpoint.url}\n`);
      await stopSignal();
      await endpoint.close();
    }
  } finally {
    await worker?.stop();
    await q.close();
  }
}

async function loadMcp(): Promise<typeof import('../../agents/mcp.js')> {
  try {
    return await import('../../agents/mcp.js');
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' && String(err).includes('@modelcontextprotocol/sdk'))
      throw new UsageError(
        'reckon mcp needs the MCP SDK: npm install @modelcontextprotocol/sdk@1',
        'MCP_SDK_MISSING',
      );
    throw err;
  }
}

function stopSignal(): Promise<void> {
  return new Promise((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
}
