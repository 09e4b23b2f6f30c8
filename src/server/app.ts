/**
 * The HTTP app of reckon, on Hono: the JSON API (`/api/...`), the console (`/`), `/metrics` and
 * `/healthz`, behind one set of edge checks. `reckon serve` runs it; a user mounts it in their
 * own server under a path prefix (`createReckonApp({ queue, basePath: '/reckon' })`), as a
 * fetch handler (`app.fetch`, any runtime) or a Node `(req, res)` listener.
 *
 * Order of what a request meets: the Host check, security headers (CSP with a nonce), the body
 * limit, authentication (bearer token or session cookie: `c.get('principal')`), the rate limit
 * of its principal, and for a state-changing request the same-origin check and (for a cookie
 * session) its form token. Then the routes, which authorize the principal's role.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { getConnInfo } from '@hono/node-server/conninfo';
import { Hono, type Context, type Next } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { NONCE, secureHeaders } from 'hono/secure-headers';
import { AuthenticationRequired, InvalidInput, RequestTooLarge } from '../core/errors.js';
import type { Metrics } from '../observe/metrics.js';
import type { Queue } from '../runtime/queue.js';
import { apiRoutes } from './api.js';
import { authenticator, type Authenticator } from './auth.js';
import { consoleRoutes, signInPage } from './console/index.js';
import type { AppEnv, ConsoleDeps, HealthFn } from './context.js';
import {
  checkFormToken,
  checkHost,
  checkSameOrigin,
  isStateChanging,
  RateLimiter,
} from './edge.js';
import type { HostPolicy } from './host-check.js';
import { ANONYMOUS, authorize, type Principal } from './principal.js';
import { problem } from './problem.js';
import { SESSION_COOKIE, SessionKeys } from './session.js';
import { serverSettings, type ServerSettings } from './settings.js';

export interface ReckonAppOptions {
  queue: Queue;
  /** The path the app is mounted under, e.g. '/reckon' (default: the root). */
  basePath?: string;
  /** A single admin token (`reckon serve --token`), besides the named tokens of the store. */
  token?: string;
  /** Reads need a token too (default: anyone who reaches the server may read, redacted). */
  protectReads?: boolean;
  /** Check the Host header against these names (DNS rebinding); absent: no check. */
  hosts?: HostPolicy;
  /** Health of the store for /api/status (default: healthy, no checks). */
  health?: HealthFn;
  /** Served at /metrics (default: none, 404). */
  metrics?: Metrics;
  /** Signs session cookies; give one to keep sessions across restarts and replicas. */
  sessionSecret?: string | Uint8Array;
  /** Refuse an approval by the principal that enqueued the job (four eyes). */
  refuseSelfApproval?: boolean;
  /** Limits: see ServerSettings. */
  settings?: Partial<ServerSettings>;
}

export interface ReckonApp {
  /** The Hono app: `parent.route('/', app)`, or `app.request(path)` in tests. */
  readonly app: Hono<AppEnv>;
  /** A fetch handler (`Request` in, `Response` out). */
  readonly fetch: (request: Request) => Promise<Response>;
  /** A Node listener: `http.createServer(listener)`, or call it for requests under basePath. */
  readonly listener: (req: IncomingMessage, res: ServerResponse) => void;
  readonly basePath: string;
}

/** What the API routes get from the app. */
export interface ApiDeps extends ConsoleDeps {
  refuseSelfApproval: boolean;
}

export function createReckonApp(options: ReckonAppOptions): ReckonApp {
  const basePath = normalizeBase(options.basePath);
  const settings = serverSettings(options.settings);
  const { queue } = options;
  const deps: ApiDeps = {
    queue,
    basePath,
    settings,
    health: options.health ?? (() => ({ healthy: true, checks: [] })),
    protectReads: options.protectReads ?? false,
    refuseSelfApproval: options.refuseSelfApproval ?? false,
  };
  const auth = authenticator({
    store: queue.store,
    serveToken: options.token,
    now: () => queue.clock.now(),
  });
  const keys = new SessionKeys(options.sessionSecret);
  const limiter = new RateLimiter(settings.rateLimitMax, settings.rateLimitWindowMs, queue.clock);

  const app = basePath ? new Hono<AppEnv>().basePath(basePath) : new Hono<AppEnv>();
  app.onError((err, c) => problem(c, err));
  app.notFound((c) =>
    problem(c, new NotFoundRoute(`no route ${c.req.method} ${new URL(c.req.url).pathname}`)),
  );
  edgeChecks(app, options.hosts, settings);
  app.use((c, next) =>
    authenticate(c, next, { auth, keys, limiter, basePath, now: () => queue.clock.now() }),
  );

  app.get('/healthz', (c) => c.text('ok\n'));
  app.get('/metrics', async (c) => {
    authorize(c.get('principal'), 'metrics', { protectReads: deps.protectReads });
    if (!options.metrics) throw new NotFoundRoute('this server serves no metrics');
    const body = await options.metrics.text();
    return c.body(body, 200, { 'content-type': options.metrics.contentType });
  });
  app.post('/login', (c) =>
    signIn(c, { auth, keys, basePath, settings, now: () => queue.clock.now(), deps }),
  );
  app.post('/logout', (c) => {
    deleteCookie(c, SESSION_COOKIE, { path: basePath || '/' });
    return c.redirect(`${basePath}/login`, 303);
  });
  app.route('/api', apiRoutes(deps));
  app.route('/', consoleRoutes(deps));

  const fetch = (request: Request) => Promise.resolve(app.fetch(request));
  // @hono/node-server answers its own errors (500) and aborted requests: nothing to await here.
  const nodeListener = getRequestListener(app.fetch);
  const listener = (req: IncomingMessage, res: ServerResponse) => void nodeListener(req, res);
  return { app, fetch, listener, basePath };
}

/** The Host check, `no-store` by default, security headers with a CSP nonce, the body limit. */
function edgeChecks(
  app: Hono<AppEnv>,
  hosts: HostPolicy | undefined,
  settings: ServerSettings,
): void {
  app.use(async (c, next) => {
    checkHost(c.req.header('host'), hosts);
    await next();
    if (!c.res.headers.has('cache-control')) c.res.headers.set('cache-control', 'no-store');
  });
  app.use(
    secureHeaders({
      contentSecurityPolicy: {
        defaultSrc: ["'self'"],
        scriptSrc: ["'self'", NONCE],
        styleSrc: ["'self'", NONCE],
        imgSrc: ["'self'", 'data:'],
        objectSrc: ["'none'"],
        baseUri: ["'self'"],
        formAction: ["'self'"],
        frameAncestors: ["'none'"],
      },
      xFrameOptions: 'DENY',
      referrerPolicy: 'same-origin',
      strictTransportSecurity: false,
    }),
  );
  app.use(
    bodyLimit({
      maxSize: settings.bodyBytesMax,
      onError: () => {
        throw new RequestTooLarge(
          `the request body is over ${settings.bodyBytesMax} bytes (bodyBytesMax)`,
        );
      },
    }),
  );
}

class NotFoundRoute extends InvalidInput {
  override readonly code = 'NOT_FOUND';
}

function normalizeBase(base: string | undefined): string {
  if (base === undefined || base === '' || base === '/') return '';
  if (!/^\/[A-Za-z0-9._~\-/]*$/.test(base))
    throw new InvalidInput(`basePath must be a path like /reckon, got ${JSON.stringify(base)}`);
  return base.replace(/\/+$/, '');
}

/**
 * Puts the principal (and a session's form token) on the context, counts the request against
 * its principal's rate limit, and checks where a state-changing request comes from.
 */
async function authenticate(
  c: Context<AppEnv>,
  next: Next,
  p: {
    auth: Authenticator;
    keys: SessionKeys;
    limiter: RateLimiter;
    basePath: string;
    now: () => number;
  },
): Promise<void> {
  let principal: Principal = ANONYMOUS;
  let csrfToken: string | null = null;
  const bearer = /^Bearer\s+(.+)$/i.exec(c.req.header('authorization') ?? '')?.[1]?.trim();
  if (bearer !== undefined) {
    principal = await p.auth.bearer(bearer);
  } else {
    const cookie = getCookie(c, SESSION_COOKIE);
    const claims = p.keys.open(cookie, p.now());
    const fromSession = claims ? await p.auth.session(claims) : null;
    if (fromSession) {
      principal = fromSession;
      csrfToken = p.keys.csrfToken(cookie!);
    }
  }
  c.set('principal', principal);
  c.set('csrfToken', csrfToken);
  p.limiter.take(principal.tokenId ?? `address:${clientAddress(c)}`);
  if (isStateChanging(c.req.method)) {
    checkSameOrigin(c);
    // Signing in again needs no form token (there may be no page yet); Origin still applies.
    const signIn = new URL(c.req.url).pathname === `${p.basePath}/login`;
    if (principal.via === 'session' && !signIn) await checkFormToken(c, csrfToken!);
  }
  await next();
}

function clientAddress(c: Context): string {
  try {
    return getConnInfo(c).remote.address ?? 'unknown';
  } catch {
    return 'unknown'; // not on Node's server (app.request in tests, another runtime)
  }
}

/** POST <base>/login: a token (form field `token`) for a session cookie. */
async function signIn(
  c: Context<AppEnv>,
  p: {
    auth: Authenticator;
    keys: SessionKeys;
    basePath: string;
    settings: ServerSettings;
    now: () => number;
    deps: ConsoleDeps;
  },
): Promise<Response> {
  const form = await c.req.parseBody();
  const token = typeof form.token === 'string' ? form.token.trim() : '';
  const next = typeof form.next === 'string' ? form.next : '';
  let principal: Principal;
  try {
    principal = await p.auth.bearer(token);
  } catch (err) {
    if (!(err instanceof AuthenticationRequired)) throw err;
    // A person at the sign-in form: the form again, saying why (401), not a problem document.
    const error = 'That token was not accepted: it is unknown, revoked or expired.';
    return signInPage(c, p.deps, { next, error }, 401);
  }
  const expiresAt = p.now() + p.settings.sessionTtlMs;
  const value = p.keys.seal({ tokenId: principal.tokenId!, expiresAt });
  setCookie(c, SESSION_COOKIE, value, {
    path: p.basePath || '/',
    httpOnly: true,
    sameSite: 'Strict',
    secure: new URL(c.req.url).protocol === 'https:',
    expires: new Date(expiresAt),
  });
  // Only a path of this app: never an absolute URL or //host (an open redirect).
  const target =
    next.startsWith(`${p.basePath}/`) && !next.startsWith('//') ? next : `${p.basePath}/`;
  return c.redirect(target, 303);
}
