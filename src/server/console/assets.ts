/**
 * The console's static files: htmx and its SSE extension from their npm packages (no CDN, no
 * bundler), and the console's own stylesheet and script. Each is served under a path that names
 * its version or content hash, so a browser may keep it for a year and never runs a stale one.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Hono } from 'hono';
import type { AppEnv } from '../context.js';
import { CONSOLE_CSS } from './style.js';
import { CONSOLE_JS } from './script.js';

interface Asset {
  path: string;
  type: string;
  body: () => string;
}

const require = createRequire(import.meta.url);

function packageVersion(name: string): string {
  return (require(`${name}/package.json`) as { version: string }).version;
}

/** A file of an npm package, read once, when first asked for. */
function packageFile(file: string): () => string {
  let text: string | undefined;
  return () => (text ??= readFileSync(require.resolve(file), 'utf8'));
}

const hashOf = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 12);

const JS = 'text/javascript; charset=utf-8';

/** Paths relative to the console's base path. */
export const ASSETS = {
  htmx: {
    path: `/assets/htmx-${packageVersion('htmx.org')}/htmx.min.js`,
    type: JS,
    body: packageFile('htmx.org/dist/htmx.min.js'),
  },
  sse: {
    path: `/assets/htmx-ext-sse-${packageVersion('htmx-ext-sse')}/sse.min.js`,
    type: JS,
    body: packageFile('htmx-ext-sse/dist/sse.min.js'),
  },
  css: {
    path: `/assets/console-${hashOf(CONSOLE_CSS)}.css`,
    type: 'text/css; charset=utf-8',
    body: () => CONSOLE_CSS,
  },
  js: {
    path: `/assets/console-${hashOf(CONSOLE_JS)}.js`,
    type: JS,
    body: () => CONSOLE_JS,
  },
} satisfies Record<string, Asset>;

/** A year: the paths change whenever the content does. */
const IMMUTABLE = 'public, max-age=31536000, immutable';

export function assetRoutes(app: Hono<AppEnv>): void {
  for (const asset of Object.values(ASSETS)) {
    app.get(asset.path, (c) => {
      c.header('content-type', asset.type);
      c.header('cache-control', IMMUTABLE);
      c.header('x-content-type-options', 'nosniff');
      return c.body(asset.body());
    });
  }
}
