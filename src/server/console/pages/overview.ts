/**
 * The overview: counts by state, UNKNOWN and NEEDS_REVIEW growth, the oldest due job per queue,
 * approvals waiting and the oldest, throughput over the last hour; pause and resume per queue
 * (flow control, for an admin).
 */
import { html } from 'hono/html';
import { JOB_STATES, type JobState } from '../../../core/states.js';
import type { Overview } from '../../../runtime/search.js';
import { can } from '../../principal.js';
import { duration, href, type Html, type View } from '../format.js';
import { csrfField, flash } from '../layout.js';
import { throughputChart } from '../partials/throughput-chart.js';
import type { PauseRecord } from '../../../store/store.js';

export interface OverviewData {
  overview: Overview;
  health: { healthy: boolean; checks: unknown[] };
  /** The paused queues by name, with who paused them (pause and resume are shown to an admin). */
  paused: Map<string, PauseRecord>;
  notice?: string;
  error?: string;
}

function stateCard(view: View, state: JobState, n: number, extra: Html | string = ''): Html {
  return html`<div class="card">
    <a href="${href(view.base, '/jobs', { state })}">
      <div class="muted">${state}</div>
      <div class="n">${n}</div></a
    >${extra}
  </div>`;
}

function totals(o: Overview): Record<JobState, number> {
  const t = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
  for (const q of o.stats.queues) for (const s of JOB_STATES) t[s] += q.counts[s] ?? 0;
  return t;
}

function queueRow(view: View, d: OverviewData, q: Overview['stats']['queues'][number]): Html {
  const now = d.overview.now;
  const pause = d.paused.get(q.queue);
  const paused = pause !== undefined;
  const act = paused ? 'resume' : 'pause';
  // Only an admin pauses (the server refuses anyone else): the column is shown to admins alone.
  const control = can(view.principal, 'admin')
    ? html`<td>
        <form method="post" action="${view.base}/queues/${encodeURIComponent(q.queue)}/${act}">
          ${csrfField(view)}<button>${paused ? 'Resume' : 'Pause'} ${q.queue}</button>
        </form>
      </td>`
    : '';
  return html`<tr>
    <th scope="row">
      <a href="${href(view.base, '/jobs', { queue: q.queue })}">${q.queue}</a
      >${pause ? html` <span class="bad">paused</span> <span class="muted">by ${pause.actor}${pause.reason ? `: ${pause.reason}` : ''}</span>` : ''}
    </th>
    ${JOB_STATES.map((s) => html`<td class="num">${q.counts[s] ?? 0}</td>`)}
    <td>${q.oldestDueAt === null ? '–' : duration(now - q.oldestDueAt)}</td>
    ${control}
  </tr>`;
}

export function overviewBody(view: View, d: OverviewData): Html {
  const o = d.overview;
  const t = totals(o);
  const a = o.activity;
  const growth = (g: { now: number; entered: number }) =>
    html`<div class="muted">+${g.entered} in the last hour</div>`;
  return html`<h1>Overview</h1>
    ${flash(d.notice, d.error)}
    <p>
      ${d.health.healthy ? html`<span class="ok">Healthy</span>` : html`<span class="bad">Unhealthy</span>`}
      <span class="muted">· store clock ${new Date(o.now).toISOString()}</span>
    </p>
    <section aria-labelledby="h-states">
      <h2 id="h-states">Jobs by state</h2>
      <div class="cards">
        ${stateCard(view, 'UNKNOWN', a.unknown.now, growth(a.unknown))}
        ${stateCard(view, 'NEEDS_REVIEW', a.needsReview.now, growth(a.needsReview))}
        <div class="card">
          <a href="${view.base}/approvals"
            ><div class="muted">Approvals waiting</div>
            <div class="n">${o.approvals.waiting}</div></a
          >
          <div class="muted">
            ${o.approvals.oldestAt === null ? 'none waiting' : `oldest ${duration(o.now - o.approvals.oldestAt)}`}
          </div>
        </div>
        ${JOB_STATES.filter((s) => s !== 'UNKNOWN' && s !== 'NEEDS_REVIEW' && s !== 'AWAITING_APPROVAL').map((s) => stateCard(view, s, t[s]))}
      </div>
    </section>
    <section aria-labelledby="h-throughput">
      <h2 id="h-throughput">Throughput, last hour (5-minute buckets)</h2>
      ${throughputChart(a)}
    </section>
    <section aria-labelledby="h-queues">
      <h2 id="h-queues">Queues</h2>
      ${
        o.stats.queues.length === 0
          ? html`<p class="muted">No jobs yet.</p>`
          : html`<table>
              <caption class="muted">
                Counts by state; oldest due: how long the oldest runnable job has waited
              </caption>
              <tr>
                <th scope="col">Queue</th>
                ${JOB_STATES.map((s) => html`<th scope="col" class="num">${s}</th>`)}
                <th scope="col">Oldest due</th>
                ${can(view.principal, 'admin') ? html`<th scope="col">Flow</th>` : ''}
              </tr>
              ${o.stats.queues.map((q) => queueRow(view, d, q))}
            </table>`
      }
    </section>
    ${
      o.stats.byOperation.length
        ? html`<section aria-labelledby="h-ops">
            <h2 id="h-ops">Open cases by operation</h2>
            <table>
              <tr>
                <th scope="col">Operation</th>
                <th scope="col" class="num">UNKNOWN</th>
                <th scope="col" class="num">NEEDS_REVIEW</th>
              </tr>
              ${o.stats.byOperation.map(
                (b) =>
                  html`<tr>
                    <th scope="row">
                      <a
                        href="${href(view.base, '/jobs', { operation: b.operation, state: ['UNKNOWN', 'NEEDS_REVIEW'] })}"
                        >${b.operation}</a
                      >
                    </th>
                    <td class="num">${b.unknown}</td>
                    <td class="num">${b.needsReview}</td>
                  </tr>`,
              )}
            </table>
          </section>`
        : ''
    }`;
}
