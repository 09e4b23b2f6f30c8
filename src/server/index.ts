/**
 * `reckon/server`: the HTTP app (JSON API, console, /metrics) to mount in your own server.
 *
 *   import { createReckonApp } from 'reckon/server';
 *   const reckon = createReckonApp({ queue: q, basePath: '/reckon' });
 *   http.createServer(reckon.listener)        // or parent.route('/', reckon.app) in Hono
 */
export { createReckonApp, type ReckonApp, type ReckonAppOptions } from './app.js';
export { newToken, tokenHash } from './auth.js';
export type { AppEnv, ConsoleDeps, HealthFn } from './context.js';
export type { HostPolicy } from './host-check.js';
export { ROLES, can, type Action, type Principal, type Role } from './principal.js';
export { SERVER_DEFAULTS, type ServerSettings } from './settings.js';
