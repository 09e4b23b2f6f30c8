/**
 * Who wants to hear of a store's commits (for metrics): a store takes `start()` before a commit
 * of shared writes and calls `emit` after it. With nobody listening, `start()` does not even
 * read the clock, and returns 0, which `emit` takes for "not timed".
 */
import type { StoreCommit } from './store.js';

export class CommitObservers {
  private readonly fns = new Set<(c: StoreCommit) => void>();

  add(fn: (c: StoreCommit) => void): () => void {
    this.fns.add(fn);
    return () => void this.fns.delete(fn);
  }

  /** When a commit begins: performance.now(), or 0 when nobody listens. */
  start(): number {
    return this.fns.size > 0 ? performance.now() : 0;
  }

  /** `write` and `callers` of a commit that began at `since` (from `start`) and is durable. */
  emit(write: string, callers: number, since: number): void {
    if (since === 0) return;
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
