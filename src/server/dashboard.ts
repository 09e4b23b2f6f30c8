/**
 * A one-page dashboard served at `/` by `reckon serve`: health, queues, and the jobs that need
 * a person, refreshed every few seconds from the JSON API. No build step, no external assets.
 */
export const DASHBOARD_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>reckon</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body{font:14px/1.4 system-ui,sans-serif;margin:2rem;color:#1d2330;background:#fafbfc}
 h1{font-size:1.3rem;margin:0 0 .2rem} h2{font-size:1rem;margin:1.6rem 0 .4rem}
 table{border-collapse:collapse;background:#fff;min-width:40rem} td,th{border:1px solid #dde1e7;padding:.3rem .6rem;text-align:left}
 th{background:#f0f2f5} .ok{color:#137333} .bad{color:#b3261e;font-weight:600} .muted{color:#667}
 code{background:#eef0f3;padding:0 .25rem;border-radius:3px}
</style></head><body>
<h1>reckon <span id="health" class="muted">…</span></h1>
<div class="muted" id="store"></div>
<h2>Checks</h2><table id="checks"><tr><td class="muted">no thresholds set (reckon serve --max-queue-age …)</td></tr></table>
<h2>Queues</h2><table id="queues"></table>
<h2>UNKNOWN and NEEDS_REVIEW by operation</h2><table id="ops"></table>
<h2>Needs review</h2><table id="review"></table>
<p class="muted">Decide with <code>reckon review resolve &lt;id&gt; --as succeeded|failed|retry --actor you</code>. Metrics: <a href="/metrics">/metrics</a>.</p>
<h2>Awaiting approval</h2><table id="approvals"></table>
<p class="muted">Decide with <code>reckon approvals approve|deny &lt;id&gt; --actor you --note why</code>.</p>
<script>
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
const row = (cells, th) => '<tr>' + cells.map((c) => th ? '<th>' + esc(c) + '</th>' : '<td>' + c + '</td>').join('') + '</tr>';
const age = (ms) => ms < 1000 ? ms + ' ms' : ms < 60000 ? (ms / 1000).toFixed(1) + ' s' : (ms / 60000).toFixed(1) + ' min';
async function refresh() {
  try {
    const s = await (await fetch('/api/status')).json();
    document.getElementById('health').innerHTML = s.healthy ? '<span class="ok">healthy</span>' : '<span class="bad">unhealthy</span>';
    document.getElementById('store').textContent = s.store + ' · ' + new Date(s.now).toISOString();
    if (s.checks.length) document.getElementById('checks').innerHTML = row(['check', 'value', 'limit', ''], true) + s.checks.map((c) => row([esc(c.name), esc(c.value), esc(c.limit), c.ok ? '<span class="ok">ok</span>' : '<span class="bad">FAIL</span> ' + esc(c.detail)])).join('');
    const states = ['AWAITING_APPROVAL', 'QUEUED', 'LEASED', 'UNKNOWN', 'NEEDS_REVIEW', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
    document.getElementById('queues').innerHTML = row(['queue', ...states, 'oldest due'], true) + s.queues.map((q) => row([esc(q.queue), ...states.map((st) => esc(q.counts[st])), q.oldestDueAt === null ? '–' : age(s.now - q.oldestDueAt)])).join('');
    document.getElementById('ops').innerHTML = row(['operation', 'UNKNOWN', 'NEEDS_REVIEW'], true) + (s.byOperation.map((o) => row([esc(o.operation), esc(o.unknown), o.needsReview ? '<span class="bad">' + esc(o.needsReview) + '</span>' : '0'])).join('') || row(['<span class="muted">none</span>', '', '']));
    const r = await (await fetch('/api/review')).json();
    document.getElementById('review').innerHTML = row(['job', 'operation', 'request key', 'attempts', 'last event'], true) + (r.jobs.map((d) => { const e = d.events[d.events.length - 1] || {}; return row(['<code>' + esc(d.job.id) + '</code>', esc(d.job.operation), esc(d.job.requestKey), esc(d.attempts.length), esc(e.kind || '') + ' ' + esc((e.detail && e.detail.why) || '')]); }).join('') || row(['<span class="muted">nothing to review</span>', '', '', '', '']));
    const a = await (await fetch('/api/approvals')).json();
    document.getElementById('approvals').innerHTML = row(['job', 'operation', 'input', 'reason', 'waiting', 'expires in'], true) + (a.jobs.map((j) => row(['<code>' + esc(j.id) + '</code>', esc(j.operation), esc(JSON.stringify(j.input).slice(0, 200)), esc(j.approvalReason || '–'), age(j.ageMs), j.expiresInMs === null ? 'never' : age(j.expiresInMs)])).join('') || row(['<span class="muted">nothing awaits approval</span>', '', '', '', '', '']));
  } catch (e) { document.getElementById('health').innerHTML = '<span class="bad">cannot reach the server</span>'; }
}
refresh(); setInterval(refresh, 3000);
</script></body></html>`;
