/**
 * The console's routes (HTML pages, htmx partials, SSE): engineer C2 replaces this placeholder.
 *
 * How it is mounted (src/server/app.ts): `app.route('/', consoleRoutes(deps))`, after the edge
 * checks, the authentication and the JSON API, so every route here already has
 *  - `c.get('principal')`: who is asking (anonymous readers get role viewer, `via: 'anonymous'`);
 *    call `authorize(principal, action, { protectReads: deps.protectReads, operation })` from
 *    ../principal.ts before showing or doing anything, and `redactJob` before showing a job;
 *  - `c.get('csrfToken')`: the form token of the session; put it in every form as `_csrf` (or
 *    send `x-csrf-token` from htmx): state-changing requests of a session without it get 403;
 *  - `c.get('secureHeadersNonce')`: the CSP nonce for any inline `<script nonce=…>`;
 *  - a Host check, CSP (`default-src 'self'`), `no-store` unless the route sets cache-control,
 *    a body limit and the rate limit.
 * Paths are relative to the app's base path: prefix links with `deps.basePath`. Sign-in is the
 * app's: `POST <base>/login` (form field `token`, optional `next`), `POST <base>/logout`; the
 * sign-in page itself (`GET <base>/login`) is the console's.
 */
import { Hono } from 'hono';
import type { AppEnv, ConsoleDeps } from '../context.js';
import { authorize } from '../principal.js';
import { DASHBOARD_HTML } from '../dashboard.js';

export function consoleRoutes(deps: ConsoleDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.get('/', (c) => {
    authorize(c.get('principal'), 'read', { protectReads: deps.protectReads });
    const nonce = c.get('secureHeadersNonce') ?? '';
    return c.html(
      DASHBOARD_HTML.replace('<script>', `<script nonce="${nonce}">`).replace(
        '<style>',
        `<style nonce="${nonce}">`,
      ),
    );
  });
  app.get('/login', (c) =>
    c.html(
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in · reckon</title></head>` +
        `<body><form method="post" action="${deps.basePath}/login"><label>Token <input name="token" type="password" autocomplete="off"></label>` +
        `<button>Sign in</button></form></body></html>`,
    ),
  );
  return app;
}
