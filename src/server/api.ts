/**
 * The HTTP API of `reckon serve`: read-only views of the store, and (only with a token)
 * review decisions. JSON in, JSON out; errors as `{ error: { code, message } }`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import { InvalidInput, JobNotFound, ReckonError } from '../core/errors.js';
import { isJobState } from '../core/states.js';
import type { Queue } from '../runtime/queue.js';
import type { ApprovalStats, JobRecord, StoreStats } from '../store/store.js';
import type { RouteHandler } from './metrics-server.js';
import { DASHBOARD_HTML } from './dashboard.js';

export interface ApiOptions {
  queue: Queue;
  /** Health of the store, with the thresholds the server was started with. */
  health: (stats: StoreStats, approvals?: ApprovalStats) => { healthy: boolean; checks: unknown[] };
  /** Bearer token for write routes (and for every /api route and /metrics when `protectReads`). No token: writes refused. */
  token?: string;
  protectReads?: boolean;
}

/** Request bodies are review decisions: a few hundred bytes. */
const BODY_BYTES_MAX = 64 * 1024;

export function apiRoutes(options: ApiOptions): RouteHandler {
  const { queue } = options;
  return async (req, res, url) => {
    if (url.pathname === '/' && req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(DASHBOARD_HTML);
      return true;
    }
    if (url.pathname === '/metrics' && options.protectReads) {
      try {
        authorize(req, options.token, false);
      } catch (err) {
        if (err instanceof HttpError)
          return send(res, err.status, { error: { code: err.code, message: err.message } });
        throw err;
      }
      return false;
    }
    if (!url.pathname.startsWith('/api/')) return false;
    const write = req.method !== 'GET' && req.method !== 'HEAD';
    try {
      if (write || options.protectReads) authorize(req, options.token, write);
      const parts = url.pathname.split('/').filter(Boolean).slice(1).map(decodeURIComponent);
      if (!write && parts[0] === 'status' && parts.length === 1) {
        return send(res, 200, await statusOf(options));
      }
      if (!write && parts[0] === 'jobs' && parts.length === 1) {
        return send(res, 200, { jobs: await listJobs(queue, url) });
      }
      if (!write && parts[0] === 'jobs' && parts.length === 2) {
        const detail = await queue.job(parts[1]!);
        if (!detail) throw new JobNotFound(parts[1]!);
        return send(res, 200, detail);
      }
      if (!write && parts[0] === 'review' && parts.length === 1) {
        return send(res, 200, { jobs: await queue.review.list() });
      }
      if (
        req.method === 'POST' &&
        parts[0] === 'review' &&
        parts.length === 3 &&
        parts[2] === 'resolve'
      ) {
        const body = await readJsonObject(req);
        const job = await queue.review.resolve(parts[1]!, {
          as: body.as as never,
          actor: typeof body.actor === 'string' ? body.actor : '',
          ...(typeof body.note === 'string' ? { note: body.note } : {}),
        });
        return send(res, 200, { job });
      }
      if (parts[0] === 'approvals') {
        const handled = await approvalRoutes(queue, req, res, url, parts);
        if (handled) return true;
      }
      return send(res, 404, {
        error: { code: 'NOT_FOUND', message: `no route ${req.method ?? ''} ${url.pathname}` },
      });
    } catch (err) {
      if (err instanceof HttpError)
        return send(res, err.status, { error: { code: err.code, message: err.message } });
      if (err instanceof JobNotFound)
        return send(res, 404, { error: { code: err.code, message: err.message } });
      if (err instanceof ReckonError)
        return send(res, CONFLICTS.has(err.code) ? 409 : 400, {
          error: { code: err.code, message: err.message },
        });
      throw err;
    }
  };
}

/** Errors that say the job's state no longer allows the request (HTTP 409). */
const CONFLICTS = new Set(['JOB_STATE_CONFLICT', 'APPROVAL_EXPIRED']);

/** GET /api/status: the store, its health checks, its stats and the approvals by operation. */
async function statusOf(options: ApiOptions): Promise<object> {
  const { queue } = options;
  const [stats, approvals] = await Promise.all([
    queue.store.statsGet(),
    queue.store.jobApprovalStats(),
  ]);
  return {
    store: queue.store.location,
    ...options.health(stats, approvals),
    ...stats,
    approvals: approvals.byOperation,
  };
}

/** GET /api/jobs (?state, ?queue, ?operation, ?before, ?limit). */
async function listJobs(queue: ApiOptions['queue'], url: URL): Promise<JobRecord[]> {
  const state = url.searchParams.getAll('state');
  for (const s of state)
    if (!isJobState(s)) throw new InvalidInput(`unknown state ${JSON.stringify(s)}`);
  const limit = url.searchParams.has('limit') ? Number(url.searchParams.get('limit')) : 100;
  const jobs = await queue.jobs({
    ...(state.length ? { state: state as never } : {}),
    ...(url.searchParams.get('queue') ? { queue: url.searchParams.get('queue')! } : {}),
    ...(url.searchParams.get('operation') ? { operation: url.searchParams.get('operation')! } : {}),
    ...(url.searchParams.get('before') ? { beforeId: url.searchParams.get('before')! } : {}),
    limit,
  });
  return jobs;
}

/** GET /api/approvals (?operation, ?limit) and POST /api/approvals/<id> { approve, actor, note }. */
async function approvalRoutes(
  queue: Queue,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  parts: string[],
): Promise<boolean> {
  if (req.method === 'GET' && parts.length === 1) {
    const operation = url.searchParams.get('operation');
    const limit = url.searchParams.has('limit') ? Number(url.searchParams.get('limit')) : 100;
    const jobs = await queue.approvals.list({ ...(operation ? { operation } : {}), limit });
    return send(res, 200, { jobs });
  }
  if (req.method === 'POST' && parts.length === 2) {
    const body = await readJsonObject(req);
    const job = await queue.approvals.decide(parts[1]!, {
      approve: body?.approve as boolean,
      actor: typeof body?.actor === 'string' ? body.actor : '',
      ...(typeof body?.note === 'string' ? { note: body.note } : {}),
    });
    return send(res, 200, { job });
  }
  return false;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function authorize(req: IncomingMessage, token: string | undefined, write: boolean): void {
  if (!token) {
    if (write)
      throw new HttpError(
        403,
        'WRITES_DISABLED',
        'this server is read-only; start reckon serve with --token to allow review decisions over HTTP',
      );
    return;
  }
  const given = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '';
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  if (a.length !== b.length || !timingSafeEqual(a, b))
    throw new HttpError(401, 'UNAUTHORIZED', 'missing or wrong bearer token');
}

function send(res: ServerResponse, status: number, body: unknown): true {
  res
    .writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'cache-control': 'no-store',
    })
    .end(JSON.stringify(body));
  return true;
}

/** A body that must be one JSON object: `null`, arrays and scalars are a 400, not a crash. */
async function readJsonObject(req: IncomingMessage): Promise<Record<string, unknown>> {
  const body = await readJson(req);
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new HttpError(
      400,
      'INVALID_BODY',
      `the request body must be a JSON object (the decision and its actor), got ${body === null ? 'null' : Array.isArray(body) ? 'an array' : typeof body}`,
    );
  return body as Record<string, unknown>;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > BODY_BYTES_MAX)
      throw new HttpError(413, 'BODY_TOO_LARGE', `request body over ${BODY_BYTES_MAX} bytes`);
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
  } catch {
    throw new HttpError(400, 'INVALID_JSON', 'the request body is not JSON');
  }
}
