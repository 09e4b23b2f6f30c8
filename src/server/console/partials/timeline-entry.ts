/** One step of a job's trail: when, which phase, what happened, who did it, and its detail. */
import { html } from 'hono/html';
import { iso, pretty, type Html } from '../format.js';
import type { TimelineEntry } from '../timeline.js';

export function timelineEntry(e: TimelineEntry): Html {
  return html`<li class="phase-${e.phase}">
    <div>
      <span class="phase">${e.phase}</span> · <time datetime="${iso(e.at)}">${iso(e.at)}</time>${
        e.attemptNo === null ? '' : html` · attempt ${e.attemptNo}`
      }
    </div>
    <div>
      <strong>${e.title}</strong
      >${e.transition ? html` <span class="muted">(${e.transition})</span>` : ''}
      <span class="muted">by</span> <code>${e.actor}</code>
    </div>
    ${e.summary ? html`<div>${e.summary}</div>` : ''}
    ${
      e.detail === null
        ? ''
        : html`<details>
            <summary>Detail</summary>
            <pre>${pretty(e.detail)}</pre>
          </details>`
    }
  </li>`;
}
