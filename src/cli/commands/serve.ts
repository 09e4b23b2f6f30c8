/**
 * `reckon serve`: the store-wide view over HTTP: `/metrics` for Prometheus, a JSON API under
 * `/api`, and a dashboard at `/`.
 */
import { Option, type Command } from 'commander';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Metrics } from '../../observe/metrics.js';
import { createReckonApp } from '../../server/app.js';
import type { HealthFn } from '../../server/context.js';
import { parseAllowedHosts } from '../../server/host-check.js';
import { Notifier } from '../../server/notify.js';
import { loadOperations } from '../operations-module.js';
import { intOption } from '../parse.js';
import { addStoreOption, openCliQueue, storeLabel, type StoreFlags } from '../store-option.js';
import { healthChecks } from './status.js';

interface ServeFlags extends StoreFlags {
  port: number;
  host: string;
  token?: string;
  protectReads?: boolean;
  allowedHosts?: string;
  maxQueueAge?: number;
  maxUnknown?: number;
  maxReview?: number;
  maxExpiredLeases?: number;
  maxApprovalAge?: number;
  operations?: string;
  basePath?: string;
  refuseSelfApproval?: boolean;
  rateLimitMax?: number;
  rateLimitWindowMs?: number;
  notifyUrl?: string;
  notifyFormat: 'slack' | 'json';
  publicUrl?: string;
  notifyLeaseMs?: number;
}

const INT_MAX = Number.MAX_SAFE_INTEGER;

export function registerServe(program: Command): void {
  const cmd = program
    .command('serve')
    .summary('HTTP: the JSON API, the console and /metrics')
    .description(
      'Serves the store over HTTP: the JSON API under /api (its OpenAPI document at ' +
        '/api/openapi.json: enqueue, call, read jobs, approve, resolve, cancel), the console at /, ' +
        'GET /metrics (Prometheus, store-wide) and GET /healthz. Every decision records the ' +
        'token that made it. Tokens: `reckon tokens create <name> --role …`; --token adds one ' +
        'admin token. Without --protect-reads anyone who reaches the server may read (inputs ' +
        'and results redacted).\n\n' +
        'Listens on 127.0.0.1 unless --host says otherwise: the journal holds inputs and results. ' +
        'Requests whose Host header names another server are refused (421), so that a web page ' +
        'cannot read the journal by DNS rebinding; name the host you serve under with --allowed-hosts. ' +
        'Set RECKON_SESSION_SECRET to keep browser sessions across restarts. See docs/server.md.',
    )
    .option('--port <port>', 'port to listen on', intOption(0, 65_535), 9464)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option(
      '--token <token>',
      'an admin bearer token, besides the named tokens of `reckon tokens`; prefer the environment variable ' +
        'RECKON_SERVE_TOKEN: a token on the command line shows in ps to every user of the host',
      process.env.RECKON_SERVE_TOKEN,
    )
    .option('--protect-reads', 'require a token for every /api route, the console and /metrics too')
    .option(
      '--operations <module>',
      'module exporting operations: lets producers enqueue and call them by name over HTTP',
    )
    .option('--base-path <path>', 'serve everything under this path, e.g. /reckon')
    .option(
      '--refuse-self-approval',
      'refuse an approval by the token that enqueued the job (four eyes)',
    )
    .option(
      '--rate-limit-max <n>',
      'requests per token (or client address) per window; beyond it 429 (default 600)',
      intOption(1, 2 ** 31),
    )
    .option(
      '--rate-limit-window-ms <ms>',
      'the rate limit window (default 60000)',
      intOption(1, 2 ** 31),
    )
    .option(
      '--allowed-hosts <names>',
      'comma-separated host names the server also answers to (Host header), besides its ' +
        'address, localhost and IP addresses; * for any (env RECKON_SERVE_ALLOWED_HOSTS)',
      process.env.RECKON_SERVE_ALLOWED_HOSTS,
    )
    .option(
      '--max-queue-age <ms>',
      'health check for /api/status and the dashboard',
      intOption(0, INT_MAX),
    )
    .option('--max-unknown <n>', 'health check: most UNKNOWN jobs', intOption(0, INT_MAX))
    .option('--max-review <n>', 'health check: most NEEDS_REVIEW jobs', intOption(0, INT_MAX))
    .option(
      '--max-expired-leases <n>',
      'health check: most expired, unreclaimed leases',
      intOption(0, INT_MAX),
    )
    .option(
      '--max-approval-age <ms>',
      'health check: longest a job may await approval',
      intOption(0, INT_MAX),
    )
    .addHelpText(
      'after',
      '\nExample:\n  $ reckon serve --port 9464 --max-unknown 0 --max-review 5',
    );
  addNotifyOptions(cmd);
  addStoreOption(cmd);
  cmd.action(runServe);
}

/** --notify-url and its company (see server/notify.ts). */
function addNotifyOptions(cmd: Command): void {
  cmd
    .option(
      '--notify-url <url>',
      'POST a notification here when a job awaits approval or needs review, with a link to its ' +
        'page; delivered as a reckon job (queue reckon.notify). Prefer RECKON_NOTIFY_URL: a ' +
        'webhook URL is a secret',
      process.env.RECKON_NOTIFY_URL,
    )
    .addOption(
      new Option('--notify-format <format>', 'slack: { text }; json: the job fields')
        .choices(['slack', 'json'])
        .default('json'),
    )
    .option(
      '--public-url <url>',
      'the address people reach this server at, for links in notifications (default: its own)',
    )
    .option(
      '--notify-lease-ms <ms>',
      'lease of a notification delivery: how soon one a killed server left is taken over',
      intOption(1_000, 2 ** 31),
    );
}

async function runServe(flags: ServeFlags): Promise<void> {
  const operations = flags.operations ? await loadOperations(flags.operations) : [];
  const q = await openCliQueue(flags.store, { mustExist: true, operations });
  const metrics = new Metrics({ store: q.store });
  const health: HealthFn = (stats, approvals) => {
    const checks = healthChecks(stats, flags, approvals);
    return { healthy: checks.every((c) => c.ok), checks };
  };
  const { listener, basePath } = createReckonApp({
    queue: q,
    metrics,
    health,
    hosts: { bound: flags.host, allowed: parseAllowedHosts(flags.allowedHosts) },
    ...(flags.basePath ? { basePath: flags.basePath } : {}),
    ...(flags.token ? { token: flags.token } : {}),
    ...(flags.protectReads ? { protectReads: true } : {}),
    ...(flags.refuseSelfApproval ? { refuseSelfApproval: true } : {}),
    ...(process.env.RECKON_SESSION_SECRET
      ? { sessionSecret: process.env.RECKON_SESSION_SECRET }
      : {}),
    settings: {
      ...(flags.rateLimitMax !== undefined ? { rateLimitMax: flags.rateLimitMax } : {}),
      ...(flags.rateLimitWindowMs !== undefined
        ? { rateLimitWindowMs: flags.rateLimitWindowMs }
        : {}),
    },
  });
  const server = createServer(listener);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(flags.port, flags.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://${flags.host.includes(':') ? `[${flags.host}]` : flags.host}:${port}`;
  process.stderr.write(
    `reckon: serving ${storeLabel(flags.store)} at ${url}${basePath}/ (metrics at ${basePath}/metrics)\n`,
  );
  const notifier = flags.notifyUrl
    ? new Notifier(q, {
        url: flags.notifyUrl,
        format: flags.notifyFormat,
        consoleUrl: (flags.publicUrl ?? url) + basePath,
        ...(flags.notifyLeaseMs !== undefined ? { leaseMs: flags.notifyLeaseMs } : {}),
      })
    : undefined;
  await notifier?.start();
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await notifier?.stop();
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await q.close();
}
