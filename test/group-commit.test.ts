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
