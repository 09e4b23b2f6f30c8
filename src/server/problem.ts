/**
 * Errors over HTTP as problem details (RFC 9457, `application/problem+json`): `type` names the
 * kind of problem, `code` is reckon's error code (the one the CLI prints), `detail` says what to
 * do. Refusals at the edge carry their own status; the queue's typed errors map by class.
 */
import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import {
  ApprovalExpired,
  ApprovalInputChanged,
  HttpRefusal,
  InvalidInput,
  JobNotFound,
  JobStateConflict,
  OutcomePending,
  PayloadTooLarge,
  TooManyRequests,
  ReckonError,
  RequestKeyConflict,
  TokenNameTaken,
  TokenNotFound,
  UnknownOperation,
} from '../core/errors.js';

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  instance?: string;
  [extension: string]: unknown;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Content Too Large',
  421: 'Misdirected Request',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
};

/** The status a typed error is answered with (500: not an error reckon expects). */
export function statusOf(err: unknown): number {
  if (err instanceof HttpRefusal) return err.status;
  if (err instanceof JobNotFound || err instanceof TokenNotFound) return 404;
  if (
    err instanceof JobStateConflict ||
    err instanceof ApprovalExpired ||
    err instanceof ApprovalInputChanged ||
    err instanceof RequestKeyConflict ||
    err instanceof TokenNameTaken
  )
    return 409;
  if (err instanceof PayloadTooLarge) return 413;
  if (err instanceof InvalidInput || err instanceof UnknownOperation) return 400;
  if (err instanceof OutcomePending) return 202;
  if (err instanceof ReckonError) return 400;
  return 500;
}

export function problemOf(err: unknown, instance?: string): Problem {
  const status = statusOf(err);
  const code = err instanceof ReckonError ? err.code : 'INTERNAL';
  const detail =
    status === 500
      ? 'the server failed on this request; its log has the details'
      : (err as Error).message;
  const p: Problem = {
    type: `urn:reckon:problem:${code.toLowerCase().replace(/_/g, '-')}`,
    title: TITLES[status] ?? 'Error',
    status,
    detail,
    code,
    ...(instance ? { instance } : {}),
  };
  if (err instanceof InvalidInput && err.path !== '$') p.path = err.path;
  if (err instanceof JobStateConflict) p.state = err.state;
  if (err instanceof RequestKeyConflict) p.existingJobId = err.existingJobId;
  return p;
}

/** Answers `problem` as `application/problem+json`, with Retry-After for a 429. */
export function problemResponse(c: Context, p: Problem, err?: unknown): Response {
  c.header('content-type', 'application/problem+json; charset=utf-8');
  c.header('cache-control', 'no-store');
  if (err instanceof TooManyRequests)
    c.header('retry-after', String(Math.max(1, Math.ceil(err.retryAfterMs / 1000))));
  return c.body(JSON.stringify(p), p.status as ContentfulStatusCode);
}

export function problem(c: Context, err: unknown): Response {
  return problemResponse(c, problemOf(err, new URL(c.req.url).pathname), err);
}
