/**
 * The console's script, beside htmx: pausing live updates (kept per browser), holding an update
 * back while the person is typing in the region it would replace, "select all" for decisions
 * made together, a confirmation before an action that says it may repeat an effect, and `/` to
 * jump to the search box. No eval, no inline handlers: it runs under `script-src 'self'`.
 */
export const CONSOLE_JS = `(function () {
  'use strict';
  var KEY = 'reckon.live';
  var paused = localStorage.getItem(KEY) === 'paused';
  var waiting = false;
  function status(text) {
    var s = document.getElementById('live-status');
    if (s) s.textContent = text;
  }
  function render() {
    var b = document.getElementById('live-toggle');
    if (!b) return;
    b.setAttribute('aria-pressed', paused ? 'true' : 'false');
    b.textContent = paused ? 'Resume live updates' : 'Pause live updates';
    status(paused ? (waiting ? 'Paused: changes waiting' : 'Paused') : 'Live');
  }
  function busy(region) {
    var a = document.activeElement;
    if (a && region.contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName)) return true;
    var fields = region.querySelectorAll('textarea, input[type=checkbox]');
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === 'checkbox' ? f.checked !== f.defaultChecked : f.value !== f.defaultValue) return true;
    }
    return false;
  }
  document.addEventListener('htmx:beforeRequest', function (e) {
    var elt = e.detail && e.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute('data-live')) return;
    if (paused || busy(elt)) {
      e.preventDefault();
      waiting = true;
      status(paused ? 'Paused: changes waiting' : 'Changes waiting: finish or clear your edit');
      return;
    }
    waiting = false;
  });
  document.addEventListener('htmx:afterSwap', function () { render(); });
  document.addEventListener('htmx:sseOpen', function () {
    document.documentElement.setAttribute('data-live-open', '');
    render();
  });
  document.addEventListener('htmx:sseError', function () {
    document.documentElement.removeAttribute('data-live-open');
    status('Reconnecting…');
  });
  document.addEventListener('click', function (e) {
    var t = e.target;
    if (t && t.id === 'live-toggle') {
      paused = !paused;
      localStorage.setItem(KEY, paused ? 'paused' : 'live');
      render();
      var region = document.getElementById('live');
      if (!paused && waiting && region && window.htmx) window.htmx.trigger(region, 'reckon:refresh');
    }
  });
  document.addEventListener('change', function (e) {
    var t = e.target;
    if (!t || !t.hasAttribute || !t.hasAttribute('data-select-all')) return;
    var boxes = t.form ? t.form.querySelectorAll('input[type=checkbox][name=id]') : [];
    for (var i = 0; i < boxes.length; i++) boxes[i].checked = t.checked;
  });
  document.addEventListener('submit', function (e) {
    var s = e.submitter;
    var msg = (s && s.getAttribute('data-confirm')) || e.target.getAttribute('data-confirm');
    if (msg && !window.confirm(msg)) e.preventDefault();
  });
  document.addEventListener('keydown', function (e) {
    if (e.key !== '/' || e.ctrlKey || e.metaKey || e.altKey) return;
    var a = document.activeElement;
    if (a && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName)) return;
    var q = document.getElementById('q');
    if (q) { e.preventDefault(); q.focus(); }
  });
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', render);
  else render();
})();
`;
