/** Sign in: a token (from `reckon tokens create`) for a session cookie, posted to the app's `/login`. */
import { html } from 'hono/html';
import type { Html, View } from '../format.js';

export function signInBody(view: View, d: { next: string; error?: string }): Html {
  return html`<div class="signin panel">
    <h1>Sign in to reckon</h1>
    ${d.error ? html`<div class="error" role="alert">${d.error}</div>` : ''}
    <form method="post" action="${view.base}/login">
      <input type="hidden" name="next" value="${d.next}" />
      <label class="field" for="token">Token</label>
      <input id="token" name="token" type="password" autocomplete="off" required size="40" />
      <p class="muted">
        A token from <code>reckon tokens create &lt;name&gt; --role …</code>. It is exchanged for a
        session cookie; the page never stores it.
      </p>
      <button class="primary">Sign in</button>
    </form>
  </div>`;
}
