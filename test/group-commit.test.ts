/**
 * GroupCommit on its own (the PostgreSQL store's writes go through it): merging, isolation of a
 * failing caller, and what it reports to its commit observers.
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
});
