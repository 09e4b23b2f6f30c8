/**
 * Jobs ended per bucket over the last hour, as an inline SVG bar chart (no chart library, no
 * CDN): succeeded, failed and cancelled stacked, with a text equivalent for screen readers.
 */
import { html } from 'hono/html';
import type { ActivityStats } from '../../../store/store.js';
import type { Html } from '../format.js';

const W = 600;
const H = 140;
const PAD = 18;

export function throughputChart(activity: ActivityStats): Html {
  const buckets = activity.finished;
  const max = Math.max(1, ...buckets.map((b) => b.succeeded + b.failed + b.cancelled));
  const bw = (W - PAD) / Math.max(1, buckets.length);
  const scale = (n: number) => (n / max) * (H - PAD * 2);
  const total = buckets.reduce(
    (t, b) => ({ s: t.s + b.succeeded, f: t.f + b.failed, c: t.c + b.cancelled }),
    { s: 0, f: 0, c: 0 },
  );
  const bars = buckets.map((b, i) => {
    const x = PAD + i * bw + 2;
    let y = H - PAD;
    const rect = (n: number, cls: string) => {
      const h = scale(n);
      y -= h;
      return n > 0
        ? html`<rect
            class="${cls}"
            x="${x.toFixed(1)}"
            y="${y.toFixed(1)}"
            width="${(bw - 4).toFixed(1)}"
            height="${h.toFixed(1)}"
          ></rect>`
        : '';
    };
    const label = `${new Date(b.at).toISOString().slice(11, 16)}: ${b.succeeded} succeeded, ${b.failed} failed, ${b.cancelled} cancelled`;
    return html`<g
      ><title>${label}</title
      >${rect(b.succeeded, 's')}${rect(b.failed, 'f')}${rect(b.cancelled, 'c')}</g
    >`;
  });
  const first = buckets[0];
  const summary = `Jobs ended in the last hour: ${total.s} succeeded, ${total.f} failed, ${total.c} cancelled; busiest 5 minutes: ${max === 1 && total.s + total.f + total.c === 0 ? 0 : max}.`;
  return html`<figure>
    <svg class="chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${summary}">
      <line x1="${PAD}" y1="${H - PAD}" x2="${W}" y2="${H - PAD}"></line>
      <text x="0" y="${PAD}">${max}</text>
      ${bars}
      ${first ? html`<text x="${PAD}" y="${H - 4}">${new Date(first.at).toISOString().slice(11, 16)} UTC</text>` : ''}
      <text x="${W - 40}" y="${H - 4}">now</text>
    </svg>
    <figcaption class="legend">
      <span><span class="sw s"></span>succeeded ${total.s}</span
      ><span><span class="sw f"></span>failed ${total.f}</span
      ><span><span class="sw c"></span>cancelled ${total.c}</span>
    </figcaption>
  </figure>`;
}
