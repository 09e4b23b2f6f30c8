/**
 * GroupCommit on its own (the PostgreSQL store's writes go through it): merging, isolation of a
 * failing caller, what it reports to its commit observers, and one group yielding to another.
 */
import { describe, expect, it } from 'vitest';
import { CommitObservers } from '../src/store/commit-observers.js';
import { GroupCommit } from '../src/store/group-commit.js';

/**
 * A GroupCommit (one merged call at a time) over a store call that doubles its items, failing on
 * negative ones (nothing written, as a rollback); records each run and each reported commit.
 */
function rig(listener?: () => void) {
  const runs: number[][] = [];
  const commits: number[] = [];
  const observers = new CommitObservers();
  observers.add(listener ?? ((c) => void commits.push(c.callers)));
  const g = new GroupCommit<number, number>({
    run: (items) => {
      runs.push(items);
      return items.some((i) => i < 0)
        ? Promise.reject(new Error(`refused ${items.join(',')}`))
        : Promise.resolve(items.map((i) => i * 2));
    },
    inFlightMax: 1,
    itemsMax: 100,
    isAmbiguous: () => false,
    commits: { observers, write: 'test' },
  });
  return { runs, commits, g };
}

describe('GroupCommit', () => {
  it('merges the calls that wait while one runs, answers each with its own slice, and reports each commit with its callers', async () => {
    const { runs, commits, g } = rig();
    const answers = await Promise.all([g.call([1]), g.call([2, 3]), g.call([4])]);
    expect(answers).toEqual([[2], [4, 6], [8]]);
    expect(runs).toEqual([[1], [2, 3, 4]]);
    expect(commits).toEqual([1, 2]);
  });

  it('what answered callers ask for next, in their promise continuations, rides in the next merged call with the waiting calls', async () => {
    const { runs, g } = rig();
    // Each caller of the first call asks again once answered, a few promise hops later (as a
    // worker whose marker committed runs its function and asks for its outcome).
    const chained = (n: number) =>
      g.call([n]).then(async () => {
        await Promise.resolve();
        await Promise.resolve();
        return g.call([n + 10]);
      });
    const first = g.call([0]);
    const [a, b] = await Promise.all([chained(1), chained(2), first]);
    expect([a, b]).toEqual([[22], [24]]);
    expect(runs).toEqual([[0], [1, 2], [11, 12]]);
    // A call on an idle group (a turn of the event loop later) still starts at once.
    await new Promise((r) => setImmediate(r));
    const idle = g.call([5]);
    expect(runs.at(-1)).toEqual([5]);
    await idle;
  });

  it('a failing caller is rejected alone: the others are run again on their own, and those commits are reported', async () => {
    const { runs, commits, g } = rig();
    const [first, ok, bad] = await Promise.allSettled([g.call([1]), g.call([2]), g.call([-3])]);
    expect(first).toEqual({ status: 'fulfilled', value: [2] });
    expect(ok).toEqual({ status: 'fulfilled', value: [4] });
    expect(bad).toMatchObject({ status: 'rejected', reason: { message: 'refused -3' } });
    expect(runs).toEqual([[1], [2, -3], [2], [-3]]);
    expect(commits).toEqual([1, 1]);
  });

  it('a listener that throws changes nothing: every caller is answered, nothing is run twice', async () => {
    const { runs, g } = rig(() => {
      throw new Error('metrics broke');
    });
    expect(await Promise.all([g.call([1]), g.call([2]), g.call([3])])).toEqual([[2], [4], [6]]);
    expect(runs).toEqual([[1], [2, 3]]);
  });

  describe('yieldTo', () => {
    /** A group whose calls run until `release()`d: the calls others yield to. */
    function held() {
      const gates: (() => void)[] = [];
      const g = new GroupCommit<number, number>({
        run: (items) => new Promise((resolve) => gates.push(() => resolve(items))),
        inFlightMax: 1,
        itemsMax: 100,
        isAmbiguous: () => false,
      });
      const release = () => gates.shift()!();
      return { g, release };
    }

    function yielding(to: GroupCommit<number, number>, maxMs: number) {
      const runs: { items: number[]; at: number }[] = [];
      const g = new GroupCommit<number, number>({
        run: (items) => {
          runs.push({ items, at: performance.now() });
          return Promise.resolve(items);
        },
        inFlightMax: 1,
        itemsMax: 100,
        isAmbiguous: () => false,
        yieldTo: { group: to, maxMs },
      });
      return { g, runs };
    }

    const turn = () => new Promise((r) => setImmediate(r));

    it('starts at once while the group it yields to is idle', async () => {
      const first = held();
      const { g, runs } = yielding(first.g, 10_000);
      const answer = g.call([1]);
      expect(runs.map((r) => r.items)).toEqual([[1]]);
      expect(await answer).toEqual([1]);
    });

    it('waits while that group is busy, and starts as soon as it turns idle, with whatever asked meanwhile', async () => {
      const first = held();
      const { g, runs } = yielding(first.g, 10_000);
      const marker = first.g.call([100]);
      const a = g.call([1]);
      await turn();
      const b = g.call([2]);
      await turn();
      expect(runs).toEqual([]);
      const released = performance.now();
      first.release();
      expect(await marker).toEqual([100]);
      expect(await Promise.all([a, b])).toEqual([[1], [2]]);
      expect(runs.map((r) => r.items)).toEqual([[1, 2]]);
      // Told by the group turning idle, not by its own wait (10 s) running out.
      expect(runs[0]!.at - released).toBeLessThan(1_000);
    });

    it('waits no longer than maxMs while that group stays busy', async () => {
      const first = held();
      const { g, runs } = yielding(first.g, 40);
      void first.g.call([100]);
      const t0 = performance.now();
      const a = g.call([1]);
      // Bounded by timer order, not by the host's speed: this 10 ms timer expires before the
      // group's 40 ms one, and Node runs due timers in expiry order (with the microtasks of each
      // before the next), so however late both fire, this check runs before the group's.
      await new Promise((r) => setTimeout(r, 10));
      expect(runs).toEqual([]);
      expect(await a).toEqual([1]);
      // Timers may fire a millisecond early by performance.now(); never much before maxMs.
      expect(runs[0]!.at - t0).toBeGreaterThanOrEqual(38);
      // Still busy: the next call again waits (up to maxMs after the last one was taken).
      const b = g.call([2]);
      await turn();
      expect(runs).toHaveLength(1);
      expect(await b).toEqual([2]);
      expect(runs[1]!.at - runs[0]!.at).toBeGreaterThanOrEqual(38);
      first.release();
    });
  });
});
