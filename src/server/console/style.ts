/**
 * The console's stylesheet: system fonts, a light and a dark palette (prefers-color-scheme), a
 * visible focus ring, and colours that keep at least 4.5:1 contrast on their background.
 */
export const CONSOLE_CSS = `
:root{color-scheme:light dark;--bg:#f7f8fa;--panel:#fff;--fg:#1b1f27;--muted:#535b69;--line:#d5d9e0;
--accent:#0b57d0;--ok:#0f6b2f;--bad:#a1231b;--warn:#7a4d00;--warn-bg:#fff4d6;--code:#eef0f3;--focus:#1a73e8}
@media (prefers-color-scheme:dark){:root{--bg:#121418;--panel:#1b1e24;--fg:#e6e8ec;--muted:#a7afbd;
--line:#353a44;--accent:#8ab4f8;--ok:#7bd88f;--bad:#ff8a80;--warn:#ffd27a;--warn-bg:#3a2e12;--code:#262a31;--focus:#8ab4f8}}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;background:var(--bg);color:var(--fg)}
a{color:var(--accent)} a:focus-visible,button:focus-visible,input:focus-visible,select:focus-visible,textarea:focus-visible,summary:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
.skip{position:absolute;left:-999px;top:0;background:var(--panel);padding:.5rem;z-index:9}.skip:focus{left:.5rem}
header{display:flex;flex-wrap:wrap;gap:1rem;align-items:center;padding:.6rem 1.2rem;background:var(--panel);border-bottom:1px solid var(--line)}
header .brand{font-weight:700;font-size:1.05rem;text-decoration:none;color:var(--fg)}
header nav ul{display:flex;gap:.9rem;list-style:none;margin:0;padding:0}
header nav a[aria-current=page]{font-weight:700;text-decoration:none;color:var(--fg)}
header .who{margin-left:auto;display:flex;gap:.6rem;align-items:center;color:var(--muted)}
main{padding:1rem 1.2rem 3rem;max-width:80rem}
h1{font-size:1.35rem;margin:.2rem 0 .8rem} h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
table{border-collapse:collapse;background:var(--panel);width:100%}
th,td{border:1px solid var(--line);padding:.35rem .55rem;text-align:left;vertical-align:top}
th{background:var(--code);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em;background:var(--code);border-radius:3px}
code{padding:0 .25rem;overflow-wrap:anywhere} pre{padding:.6rem;overflow:auto;max-height:24rem;white-space:pre-wrap;overflow-wrap:anywhere}
.muted{color:var(--muted)} .ok{color:var(--ok)} .bad{color:var(--bad);font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(11rem,1fr));gap:.7rem}
.card{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:.6rem .8rem}
.card .n{font-size:1.5rem;font-weight:700;font-variant-numeric:tabular-nums}
.card a{text-decoration:none}
.state{display:inline-block;padding:0 .4rem;border-radius:3px;border:1px solid var(--line);font-size:.85em;font-weight:600;white-space:nowrap}
.state-SUCCEEDED{color:var(--ok)} .state-FAILED,.state-NEEDS_REVIEW,.state-UNKNOWN{color:var(--bad)}
.state-AWAITING_APPROVAL{color:var(--warn)}
.panel{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:.8rem 1rem;margin:.8rem 0}
.warning{background:var(--warn-bg);color:var(--fg);border-left:4px solid var(--warn);padding:.5rem .8rem;margin:.5rem 0}
.notice{border-left:4px solid var(--ok);background:var(--panel);padding:.5rem .8rem;margin:.5rem 0}
.error{border-left:4px solid var(--bad);background:var(--panel);padding:.5rem .8rem;margin:.5rem 0}
form.filters{display:flex;flex-wrap:wrap;gap:.6rem;align-items:flex-end;margin-bottom:.8rem}
form.filters label,.field{display:flex;flex-direction:column;gap:.15rem;font-size:.9em}
input,select,textarea,button{font:inherit;color:inherit;background:var(--panel);border:1px solid var(--line);border-radius:4px;padding:.3rem .45rem}
button{cursor:pointer;background:var(--code)} button.primary{background:var(--accent);color:var(--panel);border-color:var(--accent)}
button.danger{color:var(--bad)}
textarea{width:100%;min-height:3rem}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;margin:0}
dl.facts dt{color:var(--muted)} dl.facts dd{margin:0;overflow-wrap:anywhere}
ol.timeline{list-style:none;margin:0;padding:0;border-left:2px solid var(--line)}
ol.timeline li{margin:0 0 .6rem;padding-left:.9rem;position:relative}
ol.timeline li::before{content:"";position:absolute;left:-.42rem;top:.45rem;width:.7rem;height:.7rem;border-radius:50%;background:var(--line)}
ol.timeline li.phase-execution::before{background:var(--accent)} ol.timeline li.phase-reconciliation::before{background:var(--warn)}
ol.timeline li.phase-delivery::before{background:var(--ok)} ol.timeline li.phase-decision::before{background:var(--bad)}
.phase{font-size:.8em;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.actions{display:flex;flex-wrap:wrap;gap:.6rem;align-items:flex-start}
.live{display:flex;gap:.4rem;align-items:center}
.pager{display:flex;gap:1rem;margin:.8rem 0}
svg.chart{max-width:100%;height:auto} svg.chart .s{fill:var(--ok)} svg.chart .f{fill:var(--bad)} svg.chart .c{fill:var(--muted)}
svg.chart text{fill:var(--muted);font-size:10px} svg.chart line{stroke:var(--line)}
.legend span{margin-right:1rem} .sw{display:inline-block;width:.7rem;height:.7rem;margin-right:.25rem}
.sw.s{background:var(--ok)} .sw.f{background:var(--bad)} .sw.c{background:var(--muted)}
.signin{max-width:26rem;margin:4rem auto}
`;
