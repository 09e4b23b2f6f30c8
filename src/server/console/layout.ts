/**
 * The page every console view shares: the navigation, who is signed in, the live-update switch,
 * and the scripts (htmx and its SSE extension from their packages, then the console's own).
 */
import { html } from 'hono/html';
import { can } from '../principal.js';
import { ASSETS } from './assets.js';
import { href, type Html, type View } from './format.js';

export type Section = 'overview' | 'jobs' | 'approvals' | 'review' | 'job' | 'sign-in';

/** htmx without eval, without its injected <style> (the CSP allows neither), without history cache of job data. */
const HTMX_CONFIG = JSON.stringify({
  allowEval: false,
  allowScriptTags: false,
  includeIndicatorStyles: false,
  historyCacheSize: 0,
  selfRequestsOnly: true,
});

function navLink(view: View, path: string, label: string, current: boolean): Html {
  return html`<li>
    <a href="${view.base}${path}" aria-current="${current ? 'page' : 'false'}">${label}</a>
  </li>`;
}

function who(view: View): Html {
  const p = view.principal;
  if (p.via === 'anonymous')
    return html`<span class="who"
      ><a href="${href(view.base, '/login', { next: view.here })}">Sign in</a></span
    >`;
  const out =
    p.via === 'session'
      ? html`<form method="post" action="${view.base}/logout">
          <input type="hidden" name="_csrf" value="${view.csrf ?? ''}" /><button>Sign out</button>
        </form>`
      : '';
  return html`<span class="who">Signed in as <strong>${p.name}</strong> (${p.role})${out}</span>`;
}

/** The live switch: the console script pauses and resumes it (and remembers which). */
function liveSwitch(): Html {
  return html`<span class="live">
    <button type="button" id="live-toggle" aria-pressed="false" aria-controls="live">
      Pause live updates
    </button>
    <span id="live-status" role="status" aria-live="polite">Live</span>
  </span>`;
}

export interface PageOptions {
  title: string;
  section: Section;
  body: Html;
  /**
   * The live region: `source` is the SSE stream whose `change` events refresh the body (the page
   * is fetched again and its #live region swapped in). Absent: a page without live updates.
   */
  live?: { source: string };
}

export function page(view: View, o: PageOptions): Html {
  const s = o.section;
  const nav = view.principal.via === 'anonymous' && s === 'sign-in';
  const body = o.live
    ? html`<div hx-ext="sse" sse-connect="${o.live.source}">
        <div
          id="live"
          data-live
          hx-get="${view.here}"
          hx-trigger="sse:change, reckon:refresh"
          hx-select="#live"
          hx-swap="outerHTML"
        >
          ${o.body}
        </div>
      </div>`
    : html`<div id="live">${o.body}</div>`;
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="htmx-config" content="${HTMX_CONFIG}" />
        <title>${o.title} · reckon</title>
        <link rel="stylesheet" href="${view.base}${ASSETS.css.path}" />
      </head>
      <body hx-headers="${view.csrf ? JSON.stringify({ 'x-csrf-token': view.csrf }) : '{}'}">
        <a class="skip" href="#main">Skip to content</a>
        <header>
          <a class="brand" href="${view.base}/">reckon</a>
          ${
            nav
              ? ''
              : html`<nav aria-label="Console">
                  <ul>
                    ${navLink(view, '/', 'Overview', s === 'overview')}
                    ${navLink(view, '/jobs', 'Jobs', s === 'jobs' || s === 'job')}
                    ${navLink(view, '/approvals', can(view.principal, 'approve') ? 'Approvals' : 'Awaiting approval', s === 'approvals')}
                    ${navLink(view, '/review', 'Review', s === 'review')}
                  </ul>
                </nav>`
          }
          ${o.live ? liveSwitch() : ''} ${s === 'sign-in' ? '' : who(view)}
        </header>
        <main id="main" tabindex="-1">${body}</main>
        <script src="${view.base}${ASSETS.htmx.path}"></script>
        <script src="${view.base}${ASSETS.sse.path}"></script>
        <script src="${view.base}${ASSETS.js.path}"></script>
      </body>
    </html>`;
}

/** A notice or an error carried back by a redirect after an action (`?notice=` / `?error=`). */
export function flash(notice: string | undefined, error: string | undefined): Html {
  return html`${notice ? html`<div class="notice" role="status">${notice}</div>` : ''}${
    error ? html`<div class="error" role="alert">${error}</div>` : ''
  }`;
}

/** The form token every state-changing form carries. */
export function csrfField(view: View): Html {
  return html`<input type="hidden" name="_csrf" value="${view.csrf ?? ''}" />`;
}
