/**
 * The forms a person decides with: approve or deny (bound to the hash of the input shown), resolve
 * a review (with the journal's warning on the choice that may repeat an effect), cancel before
 * dispatch. Plain forms that post and are redirected back: they work without script too.
 */
import { html } from 'hono/html';
import { inputHashOf } from '../../../runtime/approvals.js';
import type { JobDetail, JobRecord } from '../../../store/store.js';
import type { Html, View } from '../format.js';
import { csrfField } from '../layout.js';
import { repeatRisks } from '../timeline.js';

/** The hidden field carrying the hash of the input this page showed for `job`. */
export function inputHashField(job: JobRecord): Html {
  return html`<input type="hidden" name="hash.${job.id}" value="${inputHashOf(job.input)}" />`;
}

export function approvalForm(view: View, job: JobRecord): Html {
  const id = `note-${job.id}`;
  return html`<form method="post" action="${view.base}/approvals/decide" class="panel">
    ${csrfField(view)}<input type="hidden" name="id" value="${job.id}" />${inputHashField(job)}
    <input type="hidden" name="back" value="${view.here}" />
    <label class="field" for="${id}">Note (kept with the decision)</label>
    <textarea id="${id}" name="note" maxlength="10000"></textarea>
    <div class="actions">
      <button class="primary" name="decision" value="approve">Approve</button>
      <button class="danger" name="decision" value="deny">Deny</button>
    </div>
    <p class="muted">
      The decision applies to the input shown on this page only: if the job's input is not this one,
      nothing is decided.
    </p>
  </form>`;
}

export function reviewForm(view: View, detail: JobDetail): Html {
  const risks = repeatRisks(detail);
  const id = `note-${detail.job.id}`;
  const retryWarning = risks.length
    ? `Retrying may repeat the effect: ${risks.join('; ')}.`
    : 'No attempt of this job sent its request: a retry repeats no effect reckon knows of.';
  return html`<form
    method="post"
    action="${view.base}/review/${encodeURIComponent(detail.job.id)}/resolve"
    class="panel"
  >
    ${csrfField(view)}<input type="hidden" name="back" value="${view.here}" />
    <label class="field" for="${id}">Note (kept with the decision)</label>
    <textarea id="${id}" name="note" maxlength="10000"></textarea>
    <div class="actions">
      <button name="as" value="succeeded">Resolve: it succeeded</button>
      <button name="as" value="failed">Resolve: it failed</button>
      <button
        class="danger"
        name="as"
        value="retry"
        ${risks.length ? html`data-confirm="${retryWarning} Retry anyway?"` : ''}
      >
        Retry
      </button>
    </div>
    <p class="${risks.length ? 'warning' : 'muted'}">
      ${retryWarning} Resolving as succeeded or failed repeats nothing: it records what you know.
    </p>
  </form>`;
}

/** Cancel: only before the request left (QUEUED, AWAITING_APPROVAL, or leased without a marker). */
export function cancelForm(view: View, detail: JobDetail): Html {
  const { job } = detail;
  const latest = detail.attempts.at(-1);
  const cancellable =
    job.state === 'QUEUED' ||
    job.state === 'AWAITING_APPROVAL' ||
    (job.state === 'LEASED' && latest !== undefined && latest.dispatchedAt === null);
  if (!cancellable) return html``;
  return html`<form
    method="post"
    action="${view.base}/jobs/${encodeURIComponent(job.id)}/cancel"
    class="panel"
  >
    ${csrfField(view)}<input type="hidden" name="back" value="${view.here}" />
    <label class="field" for="reason-${job.id}">Reason</label>
    <textarea id="reason-${job.id}" name="reason" maxlength="10000"></textarea>
    <button class="danger">Cancel this job</button>
    <span class="muted"
      >Its request has not been sent: cancelling repeats and loses no effect.</span
    >
  </form>`;
}
