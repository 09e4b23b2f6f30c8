/**
 * The checks a request passes before any route: its Host (DNS rebinding), where a
 * state-changing request comes from (Origin, Sec-Fetch-Site) and its form token, how often its
 * principal asks (rate limit), and how big and deep its JSON body is (before parsing).
 */
import type { Context } from 'hono';
import type { Clock } from '../core/clock.js';
import {
  CrossSiteRequest,
  HostNotAllowed,
  InvalidInput,
  TooManyRequests,
  RequestTooLarge,
} from '../core/errors.js';
import { hostAllowed, hostName, type HostPolicy } from './host-check.js';
import { sameText } from './session.js';

export const HOST_REFUSAL =
  "is not this server's address: refused, so that a web page cannot reach it by DNS rebinding. " +
  'Use the address it listens on or localhost, or start it with --allowed-hosts <name> ' +
  '(or RECKON_SERVE_ALLOWED_HOSTS)';

export function checkHost(header: string | undefined, policy: HostPolicy | undefined): void {
  if (policy && !hostAllowed(header, policy))
    throw new HostNotAllowed(`Host ${JSON.stringify(header)} ${HOST_REFUSAL}`);
}

/** GET, HEAD and OPTIONS change nothing; everything else must come from this site. */
export function isStateChanging(method: string): boolean {
  return method !== 'GET' && method !== 'HEAD' && method !== 'OPTIONS';
}

/**
 * A browser says where a request comes from: `Sec-Fetch-Site` (cross-site, same-site,
 * same-origin, none) and `Origin`. Anything but same-origin or a user's own navigation is
 * refused; a request without either header is not a browser's (curl, Python).
 */
export function checkSameOrigin(c: Context): void {
  const site = c.req.header('sec-fetch-site');
  if (site !== undefined && site !== 'same-origin' && site !== 'none')
    throw new CrossSiteRequest(
      `a ${site} request may not change anything here (Sec-Fetch-Site: ${site}); use this server's own pages or an API token`,
    );
  const origin = c.req.header('origin');
  if (origin === undefined) return;
  // The request's own URL: built from its Host header by the Node adapter.
  const host = new URL(c.req.url).host.toLowerCase();
  let originHost: string;
  try {
    originHost = new URL(origin).host.toLowerCase();
  } catch {
    throw new CrossSiteRequest(`Origin ${JSON.stringify(origin)} is not this server's`);
  }
  if (originHost !== host)
    throw new CrossSiteRequest(
      `Origin ${JSON.stringify(origin)} is not this server (${hostName(host)}): refused`,
    );
}

/** A cookie session's state-changing request must carry its form token (header or form field). */
export async function checkFormToken(c: Context, expected: string): Promise<void> {
  let given = c.req.header('x-csrf-token');
  if (given === undefined) {
    const type = c.req.header('content-type') ?? '';
    if (/^(application\/x-www-form-urlencoded|multipart\/form-data)/i.test(type)) {
      const form = await c.req.parseBody();
      given = typeof form._csrf === 'string' ? form._csrf : undefined;
    }
  }
  if (given === undefined || !sameText(given, expected))
    throw new CrossSiteRequest(
      'this request has no valid form token (_csrf field or x-csrf-token header): reload the page and try again',
    );
}

/**
 * Fixed windows per key (a token id, or a client address): at most `max` requests in each
 * `windowMs`. Windows are measured on the app's clock; old keys are dropped once a window.
 */
export class RateLimiter {
  private readonly counts = new Map<string, { start: number; n: number }>();
  private swept: number;
  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly clock: Clock,
  ) {
    this.swept = clock.monotonic();
  }

  take(key: string): void {
    const now = this.clock.monotonic();
    if (now - this.swept > this.windowMs) {
      for (const [k, w] of this.counts) if (now - w.start >= this.windowMs) this.counts.delete(k);
      this.swept = now;
    }
    let w = this.counts.get(key);
    if (!w || now - w.start >= this.windowMs) {
      w = { start: now, n: 0 };
      this.counts.set(key, w);
    }
    w.n++;
    if (w.n > this.max) {
      const retryAfterMs = Math.max(1, Math.ceil(w.start + this.windowMs - now));
      throw new TooManyRequests(
        `more than ${this.max} requests in ${this.windowMs} ms from this token (rateLimitMax); retry after ${Math.ceil(retryAfterMs / 1000)} s`,
        retryAfterMs,
      );
    }
  }
}

/** Depth of nesting of a JSON text, scanned without parsing it (strings skipped). */
export function jsonDepth(text: string, stopAbove: number): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    if (inString) {
      if (ch === 92)
        i++; // backslash: skip the escaped character
      else if (ch === 34) inString = false;
      continue;
    }
    if (ch === 34) inString = true;
    else if (ch === 123 || ch === 91) {
      depth++;
      if (depth > max) max = depth;
      if (max > stopAbove) return max;
    } else if (ch === 125 || ch === 93) depth--;
  }
  return max;
}

/** The request's JSON body, its size and depth checked before it is parsed. */
export async function readJson(
  c: Context,
  limits: { bodyBytesMax: number; jsonDepthMax: number },
): Promise<unknown> {
  const text = await c.req.text();
  if (Buffer.byteLength(text) > limits.bodyBytesMax)
    throw new RequestTooLarge(
      `the request body is over ${limits.bodyBytesMax} bytes (bodyBytesMax)`,
    );
  if (jsonDepth(text, limits.jsonDepthMax) > limits.jsonDepthMax)
    throw new RequestTooLarge(
      `the request body nests objects and arrays deeper than ${limits.jsonDepthMax} (jsonDepthMax)`,
    );
  if (text.trim() === '') throw new InvalidInput('the request body is empty; send a JSON object');
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new InvalidInput('the request body is not JSON');
  }
}
