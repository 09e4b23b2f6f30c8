/** A job's or an attempt's state, as a labelled badge (colour is never the only signal: the name is shown). */
import { html } from 'hono/html';
import type { Html } from '../format.js';

export function stateBadge(state: string): Html {
  return html`<span class="state state-${state}">${state}</span>`;
}
