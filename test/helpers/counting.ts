/** Store wrappers that count calls while the real store does the work. */
import type { Store } from '../../src/store/store.js';

/** The store, with its claims counted (the real store does the work). */
export function countingClaims(store: Store): {
  store: Store;
  /** Claims sent. */
  claims: () => number;
  /** Claims answered. */
  claimsDone: () => number;
} {
  let n = 0;
  let done = 0;
  const counted = new Proxy(store, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      if (prop === 'attemptClaimMany')
        return (...args: unknown[]) => {
          n++;
          const answer = (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          return answer.finally(() => done++);
        };
      return (value as (...a: unknown[]) => unknown).bind(target);
    },
  });
  return { store: counted, claims: () => n, claimsDone: () => done };
}
