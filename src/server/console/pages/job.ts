/**
 * A job: its facts and provenance, its input and outcome, the evidence for an UNKNOWN, every
 * lookup with its answer and the next one due, the duplicates prevented on it, one timeline of
 * delivery, dispatch, execution and reconciliation, and the decisions the person may make.
 */
import { html } from 'hono/html';
import type { JobDetail } from '../../../store/store.js';
import { can, redactJob } from '../../principal.js';
import { duration, href, iso, pretty, type Html, type View } from '../format.js';
import { flash } from '../layout.js';
import { approvalForm, cancelForm, reviewForm } from '../partials/decision-forms.js';
import { stateBadge } from '../partials/state-badge.js';
import { timelineEntry } from '../partials/timeline-entry.js';
import { duplicatesPrevented, lookupsOf, timelineOf, unknownEvidence } from '../timeline.js';

function facts(view: View, d: JobDetail, now: number): Html {
  const j = d.job;
  return html`<dl class="facts">
    <dt>State</dt>
    <dd>${stateBadge(j.state)}</dd>
    <dt>Operation</dt>
    <dd><a href="${href(view.base, '/jobs', { operation: j.operation })}">${j.operation}</a></dd>
    <dt>Queue</dt>
    <dd>${j.queue}</dd>
    <dt>Request key</dt>
    <dd><code>${j.requestKey}</code></dd>
    <dt>Fingerprint</dt>
    <dd><code>${j.fingerprint}</code></dd>
    <dt>Attempts</dt>
    <dd>${j.attemptCount} of at most ${j.maxAttempts}</dd>
    <dt>Created</dt>
    <dd>
      <time datetime="${iso(j.createdAt)}">${iso(j.createdAt)}</time>
      (${duration(now - j.createdAt)} ago)
    </dd>
    <dt>Runs at</dt>
    <dd>${iso(j.runAt)}</dd>
    <dt>Finished</dt>
    <dd>${iso(j.finishedAt)}</dd>
    ${
      j.approvalReason
        ? html`<dt>Why approval</dt>
            <dd>${j.approvalReason}</dd>`
        : ''
    }
  </dl>`;
}

function provenance(view: View, d: JobDetail): Html {
  const j = d.job;
  const enqueuedBy = d.enqueuedBy;
  return html`<dl class="facts">
    <dt>Run id</dt>
    <dd>
      ${j.runId ? html`<a href="${href(view.base, '/jobs', { q: j.runId })}"><code>${j.runId}</code></a>` : '–'}
    </dd>
    <dt>Step / tool call</dt>
    <dd>${j.stepId ? html`<code>${j.stepId}</code>` : '–'}</dd>
    <dt>Enqueued by</dt>
    <dd>${enqueuedBy ? html`<code>${enqueuedBy}</code>` : '–'}</dd>
  </dl>`;
}

function evidence(d: JobDetail): Html {
  const cases = unknownEvidence(d);
  if (!cases.length) return html``;
  return html`<section aria-labelledby="h-evidence">
    <h2 id="h-evidence">Why UNKNOWN: the evidence</h2>
    ${cases.map(
      (e) =>
        html`<div class="panel">
          <dl class="facts">
            <dt>Attempt</dt>
            <dd>${e.attemptNo}</dd>
            <dt>Request key sent</dt>
            <dd><code>${e.requestKey}</code></dd>
            <dt>Dispatch marker</dt>
            <dd>
              ${iso(e.markerAt)} <span class="muted">(from here on the request may have left)</span>
            </dd>
            <dt>Leased</dt>
            <dd>${iso(e.leasedAt)}</dd>
            <dt>Last heartbeat</dt>
            <dd>
              ${e.lastHeartbeatAt === null ? 'unknown' : iso(e.lastHeartbeatAt)}
              <span class="muted">(lease ran to ${iso(e.leaseExpiresAt)})</span>
            </dd>
            <dt>Marked UNKNOWN by</dt>
            <dd>
              ${e.markedBy ? html`<code>${e.markedBy}</code>` : 'unknown'} at ${iso(e.markedAt)}
            </dd>
            <dt>Why</dt>
            <dd>${e.why ?? '–'}</dd>
            <dt>Resolution</dt>
            <dd>${e.resolution ? `${e.resolution} (${e.resolutionSource ?? '?'})` : 'none yet'}</dd>
          </dl>
        </div>`,
    )}
  </section>`;
}

function lookups(d: JobDetail): Html {
  const list = lookupsOf(d);
  const next = d.job.state === 'UNKNOWN' ? d.job.nextCheckAt : null;
  if (!list.length && next === null) return html``;
  return html`<section aria-labelledby="h-lookups">
    <h2 id="h-lookups">Lookups</h2>
    ${
      list.length
        ? html`<ol class="timeline">
            ${list.map(timelineEntry)}
          </ol>`
        : html`<p class="muted">No lookup yet.</p>`
    }
    <p>
      ${next === null ? 'No lookup is due.' : html`Next lookup due: <time datetime="${iso(next)}">${iso(next)}</time> (failed lookups so far: ${d.job.lookupFailures})`}
    </p>
  </section>`;
}

function duplicates(d: JobDetail): Html {
  const list = duplicatesPrevented(d);
  return html`<section aria-labelledby="h-dups">
    <h2 id="h-dups">Duplicates prevented</h2>
    ${
      list.length
        ? html`<ul>
            ${list.map((x) => html`<li><strong>${x.kind}</strong> at ${iso(x.at)}: ${x.text}</li>`)}
          </ul>`
        : html`<p class="muted">None on this job.</p>`
    }
  </section>`;
}

function actions(view: View, d: JobDetail): Html {
  const p = view.principal;
  const op = d.job.operation;
  const forms = [
    d.job.state === 'AWAITING_APPROVAL' && can(p, 'approve', op) ? approvalForm(view, d.job) : '',
    d.job.state === 'NEEDS_REVIEW' && can(p, 'review', op) ? reviewForm(view, d) : '',
    can(p, 'cancel', op) ? cancelForm(view, d) : '',
  ];
  return html`<section aria-labelledby="h-actions">
    <h2 id="h-actions">Decide</h2>
    ${forms}
  </section>`;
}

export function jobBody(
  view: View,
  detail: JobDetail,
  o: { now: number; notice?: string; error?: string },
): Html {
  const d = { ...detail, job: redactJob(view.principal, detail.job) };
  const j = d.job;
  return html`<h1>Job <code>${j.id}</code></h1>
    ${flash(o.notice, o.error)}
    <div class="panel">${facts(view, d, o.now)}</div>
    <section aria-labelledby="h-prov">
      <h2 id="h-prov">Provenance</h2>
      <div class="panel">${provenance(view, d)}</div>
    </section>
    <section aria-labelledby="h-input">
      <h2 id="h-input">Input</h2>
      <pre>${pretty(j.input)}</pre>
      ${
        j.result !== null
          ? html`<h2>Result</h2>
              <pre>${pretty(j.result)}</pre>`
          : ''
      }
      ${
        j.error !== null
          ? html`<h2>Error</h2>
              <pre>${pretty(j.error)}</pre>`
          : ''
      }
    </section>
    ${actions(view, detail)} ${evidence(d)} ${lookups(d)} ${duplicates(d)}
    <section aria-labelledby="h-timeline">
      <h2 id="h-timeline">Timeline</h2>
      <ol class="timeline">
        ${timelineOf(d).map(timelineEntry)}
      </ol>
    </section>`;
}
