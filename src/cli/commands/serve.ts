/**
 * `reckon serve`: the store-wide view over HTTP: `/metrics` for Prometheus, a JSON API under
 * `/api`, and a dashboard at `/`.
 */
import type { Command } from 'commander';
import { Metrics } from '../../observe/metrics.js';
import { apiRoutes, type ApiOptions } from '../../server/api.js';
import { parseAllowedHosts } from '../../server/host-check.js';
import { startMetricsServer } from '../../server/metrics-server.js';
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
}

const INT_MAX = Number.MAX_SAFE_INTEGER;

export function registerServe(program: Command): void {
  const cmd = program
    .command('serve')
    .summary('HTTP: /metrics, a JSON API and a dashboard')
    .description(
      'Serves the store-wide view: GET /metrics (Prometheus: queue depth and age, UNKNOWN and ' +
        'NEEDS_REVIEW counts, expired leases, from the store, right across every worker), ' +
        'GET /api/status, /api/jobs, /api/jobs/<id>, /api/review, /api/approvals, a dashboard ' +
        'at /, and GET /healthz. POST /api/review/<id>/resolve {as, actor, note} and POST ' +
        '/api/approvals/<id> {approve, actor, note} need --token.\n\n' +
        'Listens on 127.0.0.1 unless --host says otherwise: the journal holds inputs and results. ' +
        'Requests whose Host header names another server are refused (421), so that a web page ' +
        'cannot read the journal by DNS rebinding; name the host you serve under with --allowed-hosts.',
    )
    .option('--port <port>', 'port to listen on', intOption(0, 65_535), 9464)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option(
      '--token <token>',
      'bearer token that allows review decisions over HTTP; prefer the environment variable ' +
        'RECKON_SERVE_TOKEN: a token on the command line shows in ps to every user of the host',
      process.env.RECKON_SERVE_TOKEN,
    )
    .option('--protect-reads', 'require the token for every /api route and /metrics too')
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
  addStoreOption(cmd);
  cmd.action(runServe);
}

async function runServe(flags: ServeFlags): Promise<void> {
  const q = await openCliQueue(flags.store, { mustExist: true });
  const metrics = new Metrics({ store: q.store });
  const health = (...[stats, approvals]: Parameters<ApiOptions['health']>) => {
    const checks = healthChecks(stats, flags, approvals);
    return { healthy: checks.every((c) => c.ok), checks };
  };
  const endpoint = await startMetricsServer({
    metrics,
    port: flags.port,
    host: flags.host,
    allowedHosts: parseAllowedHosts(flags.allowedHosts),
    routes: [
      apiRoutes({
        queue: q,
        health,
        ...(flags.token ? { token: flags.token } : {}),
        ...(flags.protectReads ? { protectReads: true } : {}),
      }),
    ],
  });
  process.stderr.write(
    `reckon: serving ${storeLabel(flags.store)} at ${endpoint.url}/ (metrics at /metrics)\n`,
  );
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await endpoint.close();
  await q.close();
}
