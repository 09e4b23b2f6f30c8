/**
 * Who made a person's decision (approve, deny, resolve, cancel), as the journal records it. Over
 * HTTP it is the principal the server authenticated; from the CLI or the library, which already
 * hold the store's credentials, it is the stated actor with where it came from (`cli:<os user>`).
 */
import { InvalidInput } from '../core/errors.js';

export interface DecisionBy {
  /** The authenticated principal (a token's name), or the stated actor. */
  principal: string;
  /** Its role on the server; null or absent outside it. */
  role?: string | null;
  /** The token it authenticated with; null or absent outside the server. */
  tokenId?: string | null;
  /** Where the decision came from: `http:bearer`, `http:session`, `cli:<os user>`, `mcp`. */
  via: string;
}

/**
 * The event's actor (`operator:<name>`) and the `by` to record in its detail: from `by` when
 * given (its principal wins over any stated actor), else from the stated `actor`.
 */
export function deciderOf(
  options: { actor?: string; by?: DecisionBy },
  what: string,
): { actor: string; by: DecisionBy | undefined } {
  const by = options.by;
  if (by !== undefined) {
    if (
      typeof by !== 'object' ||
      by === null ||
      typeof by.principal !== 'string' ||
      by.principal.trim() === ''
    )
      throw new InvalidInput(`${what}: by.principal must name who decided`);
    return { actor: `operator:${by.principal.trim()}`, by };
  }
  if (typeof options.actor !== 'string' || options.actor.trim() === '')
    throw new InvalidInput(`${what} needs an actor: who made this decision`);
  return { actor: `operator:${options.actor.trim()}`, by: undefined };
}
