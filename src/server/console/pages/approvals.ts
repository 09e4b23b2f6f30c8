/**
 * The approvals inbox: each waiting job's input, the operation's reason, its age and the time
 * left; approve or deny with a note, one job or several selected together. Every decision is
 * bound to the hash of the input shown here.
 */
import { html } from 'hono/html';
import type { ApprovalRequest } from '../../../runtime/approvals.js';
import { can, redactJob } from '../../principal.js';
import { duration, href, pretty, type Html, type View } from '../format.js';
import { csrfField, flash } from '../layout.js';
import { inputHashField } from '../partials/decision-forms.js';

function approvalRow(view: View, a: ApprovalRequest, decidable: boolean): Html {
  const shown = redactJob(view.principal, a);
  return html`<tr>
    ${decidable ? html`<td><input type="checkbox" name="id" value="${a.id}" id="pick-${a.id}" aria-label="Select job ${a.id}" />${inputHashField(a)}</td>` : ''}
    <td>
      <a href="${href(view.base, `/jobs/${encodeURIComponent(a.id)}`)}"><code>${a.id}</code></a
      ><br />${a.operation}<br /><code>${a.requestKey}</code>
    </td>
    <td><pre>${pretty(shown.input)}</pre></td>
    <td>${a.approvalReason ?? html`<span class="muted">–</span>`}</td>
    <td>${duration(a.ageMs)}</td>
    <td>${a.expiresInMs === null ? 'never expires' : duration(a.expiresInMs)}</td>
  </tr>`;
}

export function approvalsBody(
  view: View,
  d: { waiting: ApprovalRequest[]; notice?: string; error?: string },
): Html {
  const decidable = d.waiting.filter((a) => can(view.principal, 'approve', a.operation));
  const mayDecide = decidable.length > 0;
  const table = html`<table>
    <caption class="muted">
      ${d.waiting.length} job${d.waiting.length === 1 ? '' : 's'} awaiting approval, oldest first
    </caption>
    <tr>
      ${mayDecide ? html`<th scope="col"><input type="checkbox" data-select-all aria-label="Select all" /></th>` : ''}
      <th scope="col">Job</th>
      <th scope="col">Input</th>
      <th scope="col">Why it needs approval</th>
      <th scope="col">Waiting</th>
      <th scope="col">Time left</th>
    </tr>
    ${d.waiting.map((a) => approvalRow(view, a, mayDecide && decidable.includes(a)))}
  </table>`;
  const body = d.waiting.length === 0 ? html`<p>Nothing awaits approval.</p>` : table;
  return html`<h1>Approvals</h1>
    ${flash(d.notice, d.error)}
    ${
      mayDecide
        ? html`<form method="post" action="${view.base}/approvals/decide">
            ${csrfField(view)}<input type="hidden" name="back" value="${view.here}" />
            ${body}
            <div class="panel">
              <label class="field" for="bulk-note"
                >Note for the selected jobs (kept with each decision)</label
              >
              <textarea id="bulk-note" name="note" maxlength="10000"></textarea>
              <div class="actions">
                <button class="primary" name="decision" value="approve">Approve selected</button>
                <button class="danger" name="decision" value="deny">Deny selected</button>
              </div>
              <p class="muted">
                Each decision applies to the input shown above: a job whose input is not the one
                shown is not decided.
              </p>
            </div>
          </form>`
        : body
    }`;
}
