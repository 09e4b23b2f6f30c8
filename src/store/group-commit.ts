/**
 * Group commit for stores whose writes go over the network (PostgreSQL): concurrent calls of one
 * batch-shaped method are merged into one call, so N callers share one transaction and one
 * commit instead of paying for N.
 *
 * - While fewer than `inFlightMax` merged calls are running, a call starts at once (no added
 *   latency when the store is idle); calls that arrive meanwhile wait and go together in the
 *   next one. Batches therefore grow exactly as fast as the store is busy. When a merged call
 *   ends, the next waits for the event loop's next turn, so that what its callers ask for next
 *   in their promise continuations rides in it too (measured on PostgreSQL at concurrency 10:
 *   without the wait, the worker's slots split into two halves whose commits alternated, each
 *   job waiting for two).
 * - Priority (`yieldTo`): a kind of write off the critical path may wait, up to `maxMs`, while
 *   a kind on it is busy, so that it goes in fewer, bigger calls that take less of the server
 *   from the calls that others wait on (PostgreSQL: outcomes yield to dispatch markers, see
 *   postgres/store.ts). It starts as soon as that kind is idle: no added latency on an idle store.
 * - Each caller is answered with its own slice of the results, after the merged call resolved,
 *   i.e. after its write is durable.
 * - Isolation: if the merged call fails with an error that proves nothing was written (the
 *   transaction rolled back: a RequestKeyConflict, a broken invariant, a deadlock), each caller's
 *   part is run again on its own, so only the caller whose element fails is rejected. An error
 *   that leaves the outcome unknown (`isAmbiguous`, e.g. the connection dropped during COMMIT) is
 *   passed to every caller unchanged, as each would have seen it alone; nothing is re-run.
 */
import { assert } from '../core/errors.js';
import type { CommitObservers } from './commit-observers.js';

interface Waiting<I, O> {
  items: I[];
  resolve: (out: O[]) => void;
  reject: (err: unknown) => void;
}

export interface GroupCommitOptions<I, O> {
  /** The store's real batch write: one result per item, in order. */
  run: (items: I[]) => Promise<O[]>;
  /** Merged calls running at once. */
  inFlightMax: number;
  /** Most items in one merged call; a bigger single caller still goes alone, whole. */
  itemsMax: number;
  /** Errors after which the merged call may have committed: never re-run. */
  isAmbiguous: (err: unknown) => boolean;
  /** Told of each call that succeeded (as `write`, with the callers it answered), if listened to. */
  commits?: { observers: CommitObservers; write: string };
  /**
   * While `group` is busy (a call running, about to run or waiting), a merged call of this one
   * waits, up to `maxMs` after its oldest caller asked (or after the last call was taken). It
   * starts at once when `group` turns idle.
   */
  yieldTo?: { group: Yieldable; maxMs: number };
}

/** What a group can yield to (`yieldTo`): another GroupCommit, of any item types. */
export interface Yieldable {
  readonly busy: boolean;
  /** `fn` is called whenever this group turns idle. */
  whenIdle(fn: () => void): void;
}

export class GroupCommit<I, O> implements Yieldable {
  private queue: Waiting<I, O>[] = [];
  private inFlight = 0;
  /** When the oldest waiting caller asked, or the last call was taken (`yieldTo`'s clock). */
  private waitingSince = 0;
  private yieldTimer: NodeJS.Timeout | undefined;
  /** Told whenever this group turns idle (groups that yield to it). */
  private readonly idleListeners: (() => void)[] = [];

  constructor(private readonly o: GroupCommitOptions<I, O>) {
    o.yieldTo?.group.whenIdle(() => this.pump());
  }

  whenIdle(fn: () => void): void {
    this.idleListeners.push(fn);
  }

  /** A call is running, settling (see `pump`) or waiting. */
  get busy(): boolean {
    return this.inFlight > 0 || this.settling || this.queue.length > 0;
  }

  call(items: I[]): Promise<O[]> {
    if (items.length === 0) return Promise.resolve([]);
    return new Promise<O[]>((resolve, reject) => {
      if (this.queue.length === 0 && this.inFlight === 0) this.waitingSince = performance.now();
      this.queue.push({ items, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    if (this.yielding()) return;
    while (!this.settling && this.inFlight < this.o.inFlightMax && this.queue.length > 0) {
      const group = this.take();
      this.inFlight++;
      void this.runGroup(group).finally(() => {
        this.inFlight--;
        // The callers just answered act on it in promise continuations (a worker's marker
        // resolves, its function runs, its outcome and the next job's marker are asked for):
        // the next merged call waits for them until the event loop's next turn, so they ride
        // in it instead of the one after.
        this.settling = true;
        setImmediate(this.settled);
      });
    }
  }

  private settling = false;
  private readonly settled = (): void => {
    this.settling = false;
    this.pump();
    if (!this.busy) for (const fn of this.idleListeners) fn();
  };

  /**
   * Whether a call that could start now waits for the group it yields to (`yieldTo`); if so, a
   * timer starts it when its wait is up, unless that group turns idle first.
   */
  private yielding(): boolean {
    const y = this.o.yieldTo;
    if (!y || this.queue.length === 0 || this.inFlight > 0 || this.settling) return false;
    if (!y.group.busy) return false;
    const left = this.waitingSince + y.maxMs - performance.now();
    if (left <= 0) return false;
    this.yieldTimer ??= setTimeout(this.yieldDone, left);
    return true;
  }

  private readonly yieldDone = (): void => {
    this.yieldTimer = undefined;
    this.pump();
  };

  /** Takes waiting callers, whole, up to itemsMax items (at least one caller). */
  private take(): Waiting<I, O>[] {
    const group: Waiting<I, O>[] = [];
    let n = 0;
    while (this.queue.length > 0) {
      const next = this.queue[0]!;
      if (group.length > 0 && n + next.items.length > this.o.itemsMax) break;
      group.push(this.queue.shift()!);
      n += next.items.length;
    }
    this.waitingSince = performance.now();
    if (this.yieldTimer) {
      clearTimeout(this.yieldTimer);
      this.yieldTimer = undefined;
    }
    return group;
  }

  private async runGroup(group: Waiting<I, O>[]): Promise<void> {
    const since = this.o.commits?.observers.start() ?? 0;
    if (group.length === 1) {
      const only = group[0]!;
      await this.o.run(only.items).then((out) => {
        only.resolve(out);
        this.committed(1, since);
      }, only.reject);
      return;
    }
    let out: O[];
    try {
      out = await this.o.run(group.flatMap((w) => w.items));
    } catch (err) {
      if (this.o.isAmbiguous(err)) {
        for (const w of group) w.reject(err);
        return;
      }
      // Nothing of the merged call was written: each caller's part alone decides its fate.
      await Promise.all(
        group.map((w) => {
          const alone = this.o.commits?.observers.start() ?? 0;
          return this.o.run(w.items).then((out) => {
            w.resolve(out);
            this.committed(1, alone);
          }, w.reject);
        }),
      );
      return;
    }
    let at = 0;
    for (const w of group) {
      const slice = out.slice(at, at + w.items.length);
      at += w.items.length;
      w.resolve(slice);
    }
    assert(at === out.length, 'a merged store call answered once per item');
    this.committed(group.length, since);
  }

  /**
   * Reports a commit, after its callers were answered and outside the merged call's try (a
   * listener's failure must never pass for a failed write, re-running every caller; the
   * observers contain it anyway).
   */
  private committed(callers: number, since: number): void {
    const c = this.o.commits;
    c?.observers.emit(c.write, callers, since);
  }
}
