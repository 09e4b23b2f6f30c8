/**
 * What every route of the app sees (Hono's context variables) and what the console routes are
 * given. Kept apart from app.ts so that src/server/console/ imports types only, never the app.
 */
import type { Queue } from '../runtime/queue.js';
import type { ApprovalStats, StoreStats } from '../store/store.js';
import type { Principal } from './principal.js';
import type { ServerSettings } from './settings.js';

export interface AppEnv {
  Variables: {
    /** Who is asking: always set (anonymous readers get `ANONYMOUS`). */
    principal: Principal;
    /**
     * The form token of this browser session (sign-in cookie), null without one. Every
     * state-changing request of a session sends it as the `_csrf` form field or the
     * `x-csrf-token` header (htmx: `hx-headers`).
     */
    csrfToken: string | null;
    /** The CSP nonce of this response, for inline `<script nonce>` / `<style nonce>`. */
    secureHeadersNonce?: string;
  };
}

export type HealthFn = (
  stats: StoreStats,
  approvals?: ApprovalStats,
) => { healthy: boolean; checks: unknown[] };

/** What the console routes get from the app (see console/index.ts). */
export interface ConsoleDeps {
  queue: Queue;
  /** Where the app is mounted ('' at the root, else like '/reckon'): prefix every link with it. */
  basePath: string;
  health: HealthFn;
  settings: ServerSettings;
  /** Reads need a token too (`--protect-reads`): pass to `authorize`. */
  protectReads: boolean;
}
