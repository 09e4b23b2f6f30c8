/**
 * Invariant 7 through a real worker: a late result never resolves a job whose later attempt has
 * dispatched. Attempt 1 dispatches and hangs past its hard timeout (recorded UNKNOWN); the
 * reconciler retries with the same key; attempt 2 dispatches and its connection resets
 * (UNKNOWN); out of attempts, the job goes to NEEDS_REVIEW. Only then does attempt 1's answer
 * arrive: it is kept as evidence, and changes neither attempt nor the job.
 */
import { describe, expect, it } from 'vitest';
import { defineOperation } from '../../src/index.js';
import { STORE_KINDS } from '../helpers/stores.js';
import { Rig, until } from './harness.js';

describe.each(STORE_KINDS)('a late result after a later attempt dispatched, on %s', (kind) => {
  it('is kept as evidence and resolves nothing', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    let sends = 0;
    let answerFirst: (() => void) | undefined;
    const op = defineOperation({
      name: 'test.late-after-retry',
      timeoutMs: 300,
      idempotentWithKey: true,
      retry: { maxAttempts: 2, backoff: { initialMs: 10, factor: 1, maxMs: 10 } },
      execute: (_input: unknown, c) =>
        c.dispatch(() => {
          sends++;
          if (sends === 1)
            return new Promise<{ from: number }>((resolve) => {
              answerFirst = () => resolve({ from: 1 });
            });
          const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
          return Promise.reject(reset);
        }),
    });
    await rig.worker({ operations: [op], leaseMs: 5_000 });
    const job = await rig.q.enqueue(op, { n: 1 }, { key: 'late-after-retry' });
    const review = await until(
      'the job to reach review after two UNKNOWN attempts',
      async () => {
        const d = await rig.job(job.id);
        return d.job.state === 'NEEDS_REVIEW' ? d : null;
      },
      30_000,
    );
    expect(sends).toBe(2);
    expect(review.attempts.map((a) => [a.state, a.resolution])).toEqual([
      ['UNKNOWN', 'retry'],
      ['UNKNOWN', null],
    ]);
    expect(review.attempts[1]!.dispatchedAt).not.toBeNull();

    answerFirst!();
    const after = await until(
      "attempt 1's late answer to be kept",
      async () => {
        const d = await rig.job(job.id);
        return d.events.some((e) => e.kind === 'late-evidence' && e.attemptNo === 1) ? d : null;
      },
      15_000,
    );
    expect(after.events.find((e) => e.kind === 'late-evidence')?.detail).toMatchObject({
      outcome: 'SUCCEEDED',
      result: { from: 1 },
    });
    expect(after.job).toMatchObject({ state: 'NEEDS_REVIEW', result: null });
    expect(after.attempts.map((a) => [a.state, a.resolution])).toEqual([
      ['UNKNOWN', 'retry'],
      ['UNKNOWN', null],
    ]);
    expect(after.events.filter((e) => e.kind === 'reconciled' && e.actor !== 'reconciler')).toEqual(
      [],
    );
  });
});
