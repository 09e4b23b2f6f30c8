/**
 * Where a decision made at the command line comes from: `cli:<os user>`. The CLI holds the
 * store's credentials, so the actor a person states is recorded with the account that ran it.
 */
import { userInfo } from 'node:os';
import type { DecisionBy } from '../runtime/decision-by.js';

export function cliVia(): string {
  try {
    return `cli:${userInfo().username}`;
  } catch {
    return `cli:uid-${process.getuid?.() ?? 'unknown'}`;
  }
}

/** The `by` of a decision made with `--actor <name>`. */
export function cliDecisionBy(actor: string): DecisionBy {
  return { principal: actor.trim(), role: null, tokenId: null, via: cliVia() };
}
