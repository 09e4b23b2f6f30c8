/**
 * GroupCommit on its own (the PostgreSQL store's writes go through it): merging, isolation of a
 * failing caller, and what it reports to `onCommit`.
 */
import { describe, expect, it } from 'vitest';
import { GroupCommit } from '../src/store/group-commit.js';

/** A store call that doubles its items, failing on negative ones (nothing written, as a rollback). */
function store() {
  const runs: number[][] = [];
  const run = (items: number[]) => {
    runs.push(items);
    return items.some((i) => i < 0)
      ? Promise.reject(new Error(`refused ${items.join(',')}`))
      : Promise.resolve(items.map((i) => i * 2));
  };
  return { runs, run };
}

describe('GroupCommit', () => {
  it('merges the calls that wait while one runs, answers each with its own slice, and reports each commit with its callers', async () => {
    const s = store();
    const commits: number[] = [];
    const g = new GroupCommit<number, number>({
      run: s.run,
      inFlightMax: 1,
      itemsMax: 100,
      isAmbiguous: () => false,
      onCommit: (callers) => commits.push(callers),
    });
    const answers = await Promise.all([g.call([1]), g.call([2, 3]), g.call([4])]);
    expect(answers).toEqual([[2], [4, 6], [8]]);
    expect(s.runs).toEqual([[1], [2, 3, 4]]);
    expect(commits).toEqual([1, 2]);
  });

  it('a failing caller is rejected alone: the others are run again on their own, and those commits are reported', async () => {
    const s = store();
    const commits: number[] = [];
    const g = new GroupCommit<number, number>({
      run: s.run,
      inFlightMax: 1,
      itemsMax: 100,
      isAmbiguous: () => false,
      onCommit: (callers) => commits.push(callers),
    });
    const [first, ok, bad] = await Promise.allSettled([g.call([1]), g.call([2]), g.call([-3])]);
    expect(first).toEqual({ status: 'fulfilled', value: [2] });
    expect(ok).toEqual({ status: 'fulfilled', value: [4] });
    expect(bad).toMatchObject({ status: 'rejected', reason: { message: 'refused -3' } });
    expect(s.runs).toEqual([[1], [2, -3], [2], [-3]]);
    expect(commits).toEqual([1, 1]);
  });

  it('a listener that throws changes nothing: every caller is answered, nothing is run twice', async () => {
    const s = store();
    const g = new GroupCommit<number, number>({
      run: s.run,
      inFlightMax: 1,
      itemsMax: 100,
      isAmbiguous: () => false,
      onCommit: () => {
        throw new Error('metrics broke');
      },
    });
    expect(await Promise.all([g.call([1]), g.call([2]), g.call([3])])).toEqual([[2], [4], [6]]);
    expect(s.runs).toEqual([[1], [2, 3]]);
  });
});
