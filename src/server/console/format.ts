/**
 * Small pieces every page uses: the request's view of the console (who, where, form token), a
 * duration and a time as people read them, and JSON shown as text.
 */
import type { Context } from 'hono';
import type { HtmlEscapedString } from 'hono/utils/html';
import type { AppEnv, ConsoleDeps } from '../context.js';
import type { Principal } from '../principal.js';

/** What a template returns (hono/html: escaped by default). */
export type Html = HtmlEscapedString | Promise<HtmlEscapedString>;

/** One request as the templates see it. */
export interface View {
  /** The console's base path ('' or like '/reckon'): every link starts with it. */
  base: string;
  principal: Principal;
  /** The session's form token (null: no session, e.g. a bearer token or an anonymous reader). */
  csrf: string | null;
  /** The path and query of this request, for links back to it and for live refresh. */
  here: string;
}

export function viewOf(c: Context<AppEnv>, deps: ConsoleDeps): View {
  const url = new URL(c.req.url);
  return {
    base: deps.basePath,
    principal: c.get('principal'),
    csrf: c.get('csrfToken') ?? null,
    here: url.pathname + url.search,
  };
}

/** A duration as people read it: `850 ms`, `12 s`, `4 min`, `3 h 5 min`, `2 d 4 h`. */
export function duration(ms: number): string {
  const a = Math.abs(ms);
  if (a < 1_000) return `${Math.round(ms)} ms`;
  if (a < 60_000) return `${Math.round(ms / 1_000)} s`;
  if (a < 3_600_000) return `${Math.floor(ms / 60_000)} min`;
  if (a < 86_400_000) {
    const m = Math.floor((a % 3_600_000) / 60_000);
    return `${Math.floor(ms / 3_600_000)} h${m ? ` ${m} min` : ''}`;
  }
  const h = Math.floor((a % 86_400_000) / 3_600_000);
  return `${Math.floor(ms / 86_400_000)} d${h ? ` ${h} h` : ''}`;
}

/** An instant as ISO 8601 UTC to the millisecond (the journal's precision). */
export function iso(ms: number | null): string {
  return ms === null ? '–' : new Date(ms).toISOString();
}

/** JSON for a person to read (two-space indent); escaped by the template like any text. */
export function pretty(value: unknown): string {
  return JSON.stringify(value, null, 2) ?? 'null';
}

/** A link inside the console: the base path, then `path`, then the query without empty values. */
export function href(
  base: string,
  path: string,
  query: Record<string, string | string[] | undefined> = {},
): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    for (const one of Array.isArray(v) ? v : [v])
      if (one !== undefined && one !== '') q.append(k, one);
  }
  const s = q.toString();
  return `${base}${path}${s ? `?${s}` : ''}`;
}
