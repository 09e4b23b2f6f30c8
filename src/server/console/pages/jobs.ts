/**
 * The jobs list: filters by state, operation, queue and creation time, a search box (job id,
 * request key, run id, fingerprint, text in the input), keyset pagination. Every filter is in
 * the query string, so every view is a URL to share or reload.
 */
import { html } from 'hono/html';
import { JOB_STATES, isJobState, type JobState } from '../../../core/states.js';
import type { JobSearchQuery } from '../../../runtime/search.js';
import type { JobSearchPage } from '../../../store/store.js';
import { href, type Html, type View } from '../format.js';
import { JOB_ROW_HEADER, jobRow } from '../partials/job-row.js';

/** The relative ranges the time filter offers, in ms. */
export const SINCE: Record<string, number> = {
  '15m': 15 * 60_000,
  '1h': 60 * 60_000,
  '24h': 24 * 60 * 60_000,
  '7d': 7 * 24 * 60 * 60_000,
};

/** The filters as they are in the URL (strings), to fill the form and build links. */
export interface JobFilters {
  state: JobState[];
  operation: string;
  queue: string;
  since: string;
  from: string;
  to: string;
  q: string;
  before: string;
}

function parseTime(value: string, name: string): number | undefined {
  if (value === '') return undefined;
  const ms = /^\d+$/.test(value) ? Number(value) : Date.parse(value);
  if (!Number.isFinite(ms))
    throw new Error(`${name}: not a time (use ISO 8601, e.g. 2026-01-31T12:00:00Z)`);
  return ms;
}

/** The filters of a URL, and the library query they make (or why they make none). */
export function filtersOf(
  params: URLSearchParams,
  now: number,
): { filters: JobFilters; query: JobSearchQuery | null; error: string | null } {
  const get = (k: string) => (params.get(k) ?? '').trim();
  const states = params.getAll('state').filter((s) => s !== '');
  const filters: JobFilters = {
    state: states.filter(isJobState),
    operation: get('operation'),
    queue: get('queue'),
    since: get('since'),
    from: get('from'),
    to: get('to'),
    q: get('q'),
    before: get('before'),
  };
  try {
    const bad = states.find((s) => !isJobState(s));
    if (bad !== undefined) throw new Error(`state: unknown state ${JSON.stringify(bad)}`);
    if (filters.since !== '' && SINCE[filters.since] === undefined)
      throw new Error(`since: one of ${Object.keys(SINCE).join(', ')}`);
    const from =
      filters.since !== '' ? now - SINCE[filters.since]! : parseTime(filters.from, 'from');
    const to = parseTime(filters.to, 'to');
    const query: JobSearchQuery = { limit: 50 };
    if (filters.state.length) query.state = filters.state;
    if (filters.operation) query.operation = filters.operation;
    if (filters.queue) query.queue = filters.queue;
    if (from !== undefined) query.from = from;
    if (to !== undefined) query.to = to;
    if (filters.q) query.text = filters.q;
    if (filters.before) query.before = filters.before;
    return { filters, query, error: null };
  } catch (err) {
    return { filters, query: null, error: (err as Error).message };
  }
}

function linkWith(view: View, f: JobFilters, before: string): string {
  return href(view.base, '/jobs', { ...f, state: f.state, before });
}

function filterForm(view: View, f: JobFilters): Html {
  return html`<form class="filters" method="get" action="${view.base}/jobs" role="search">
      <label
        >Search
        <input
          id="q"
          name="q"
          type="search"
          value="${f.q}"
          size="34"
          placeholder="job id, request key, run id, fingerprint, text"
          aria-describedby="q-help"
      /></label>
      <label
        >State
        <select name="state" multiple size="3">
          ${JOB_STATES.map((s) => html`<option value="${s}" ${f.state.includes(s) ? 'selected' : ''}>${s}</option>`)}
        </select></label
      >
      <label>Operation <input name="operation" value="${f.operation}" size="16" /></label>
      <label>Queue <input name="queue" value="${f.queue}" size="10" /></label>
      <label
        >Created
        <select name="since">
          <option value="" ${f.since === '' ? 'selected' : ''}>any time</option>
          ${Object.keys(SINCE).map((k) => html`<option value="${k}" ${f.since === k ? 'selected' : ''}>last ${k}</option>`)}
        </select></label
      >
      <label
        >From <input name="from" value="${f.from}" size="20" placeholder="2026-01-31T12:00Z"
      /></label>
      <label>To <input name="to" value="${f.to}" size="20" placeholder="ISO 8601 (UTC)" /></label>
      <button class="primary">Apply</button> <a href="${view.base}/jobs">Clear</a>
    </form>
    <p id="q-help" class="muted">
      Press <kbd>/</kbd> to search. A job id or request key is found wherever it is; other searches
      and filters read the newest jobs first, a window at a time.
    </p>`;
}

export function jobsBody(
  view: View,
  d: { filters: JobFilters; page: JobSearchPage | null; error: string | null; now: number },
): Html {
  const f = d.filters;
  const p = d.page;
  const results = !p
    ? ''
    : p.jobs.length === 0 && !p.scanStopped
      ? html`<p>No jobs match.</p>`
      : html`<table>
          <caption class="muted">
            ${p.jobs.length} job${p.jobs.length === 1 ? '' : 's'}, newest first
          </caption>
          ${JOB_ROW_HEADER}${p.jobs.map((j) => jobRow(view, j, d.now))}
        </table>`;
  const more = p?.nextBeforeId
    ? html`<a rel="next" href="${linkWith(view, f, p.nextBeforeId)}"
        >${p.scanStopped ? 'Search older jobs →' : 'Older →'}</a
      >`
    : '';
  return html`<h1>Jobs</h1>
    ${filterForm(view, f)} ${d.error ? html`<div class="error" role="alert">${d.error}</div>` : ''}
    ${p?.scanStopped ? html`<p class="warning">Searched a window of the newest jobs${f.before ? ' before this page' : ''} without filling the page: older jobs were not searched yet.</p>` : ''}
    ${results}
    <nav class="pager" aria-label="Pages">
      ${f.before ? html`<a href="${linkWith(view, f, '')}">← Newest</a>` : ''}${more}
    </nav>`;
}
