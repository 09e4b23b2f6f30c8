/** One job in a list: its id (a link to its page), state, operation, queue, key, age, attempts. */
import { html } from 'hono/html';
import type { JobRecord } from '../../../store/store.js';
import { duration, href, iso, type Html, type View } from '../format.js';
import { stateBadge } from './state-badge.js';

export function jobRow(view: View, job: JobRecord, now: number): Html {
  return html`<tr>
    <td>
      <a href="${href(view.base, `/jobs/${encodeURIComponent(job.id)}`)}"><code>${job.id}</code></a>
    </td>
    <td>${stateBadge(job.state)}</td>
    <td>${job.operation}</td>
    <td>${job.queue}</td>
    <td><code>${job.requestKey}</code></td>
    <td>
      <time datetime="${iso(job.createdAt)}" title="${iso(job.createdAt)}"
        >${duration(now - job.createdAt)} ago</time
      >
    </td>
    <td class="num">${job.attemptCount}/${job.maxAttempts}</td>
  </tr>`;
}

export const JOB_ROW_HEADER = html`<tr>
  <th scope="col">Job</th>
  <th scope="col">State</th>
  <th scope="col">Operation</th>
  <th scope="col">Queue</th>
  <th scope="col">Request key</th>
  <th scope="col">Created</th>
  <th scope="col" class="num">Attempts</th>
</tr>`;
