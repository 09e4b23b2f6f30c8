/**
 * Who wants to hear of a store's commits (for metrics): a store calls `emit` after each commit
 * of shared writes. With nobody listening, `active` is false and the store does not even read
 * the clock for it.
 */
import type { StoreCommit } from './store.js';

export class CommitObservers {
  private readonly fns = new Set<(c: StoreCommit) => void>();

  get active(): boolean {
    return this.fns.size > 0;
  }

  add(fn: (c: StoreCommit) => void): () => void {
    this.fns.add(fn);
    return () => void this.fns.delete(fn);
  }

  /** `write` and `callers` of a commit that began at `since` (performance.now()) and is durable. */
  emit(write: string, callers: number, since: number): void {
    const c: StoreCommit = { write, callers, ms: performance.now() - since };
    // A listener's failure is its own: the commit happened, and its callers are answered anyway.
    for (const fn of this.fns) {
      try {
        fn(c);
      } catch {
        // (metrics must never break a write)
      }
    }
  }
}
