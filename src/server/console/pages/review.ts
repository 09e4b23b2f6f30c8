/**
 * The review queue: each NEEDS_REVIEW job with its evidence, resolved as succeeded or failed with
 * a note, or retried under a warning, written from the journal, when a retry may repeat an effect.
 */
import { html } from 'hono/html';
import type { JobDetail } from '../../../store/store.js';
import { can } from '../../principal.js';
import { href, iso, type Html, type View } from '../format.js';
import { flash } from '../layout.js';
import { reviewForm } from '../partials/decision-forms.js';
import { unknownEvidence } from '../timeline.js';

function reviewCase(view: View, d: JobDetail): Html {
  const why = d.events.filter((e) => e.kind === 'review').at(-1);
  const ev = unknownEvidence(d).at(-1);
  return html`<article class="panel" aria-labelledby="case-${d.job.id}">
    <h2 id="case-${d.job.id}">
      <a href="${href(view.base, `/jobs/${encodeURIComponent(d.job.id)}`)}"
        ><code>${d.job.id}</code></a
      >
      · ${d.job.operation}
    </h2>
    <dl class="facts">
      <dt>Request key</dt>
      <dd><code>${d.job.requestKey}</code></dd>
      <dt>Why review</dt>
      <dd>${(why?.detail as { why?: string } | null)?.why ?? '–'}</dd>
      ${
        ev
          ? html`<dt>Request sent</dt>
              <dd>${iso(ev.markerAt)} (attempt ${ev.attemptNo})</dd>
              <dt>Marked UNKNOWN</dt>
              <dd>by <code>${ev.markedBy ?? '?'}</code>: ${ev.why ?? '–'}</dd>`
          : ''
      }
      <dt>In review since</dt>
      <dd>${iso(why?.at ?? d.job.updatedAt)}</dd>
    </dl>
    ${can(view.principal, 'review', d.job.operation) ? reviewForm(view, d) : ''}
  </article>`;
}

export function reviewBody(
  view: View,
  d: { cases: JobDetail[]; notice?: string; error?: string },
): Html {
  return html`<h1>Review</h1>
    ${flash(d.notice, d.error)}
    <p class="muted">
      Jobs whose outcome nothing could prove: decide what happened. Open a job for its whole
      timeline.
    </p>
    ${d.cases.length === 0 ? html`<p>Nothing to review.</p>` : d.cases.map((c) => reviewCase(view, c))}`;
}
