/**
 * A result that arrives after the attempt's hard timeout (issue #21 item 4): the attempt was
 * already recorded UNKNOWN, and the answer is evidence. It is kept, and resolves the UNKNOWN
 * attempt when no later attempt has dispatched (invariant 7).
 */
import { describe, expect, it } from 'vitest';
import { defineOperation } from '../../src/index.js';
import { HARD_TIMEOUT_AFTER_ABORT_MS } from '../../src/runtime/attempt.js';
import { STORE_KINDS } from '../helpers/stores.js';
import { Rig, until } from './harness.js';

describe.each(STORE_KINDS)('a result after the hard timeout, on %s', (kind) => {
  for (const when of ['while its UNKNOWN outcome is written', 'after its outcome is written'])
    it(`arriving ${when}: kept as late evidence, resolves the UNKNOWN attempt`, async (ctx) => {
      const rig = await Rig.open(ctx, kind);
      let sends = 0;
      let answer: (() => void) | undefined;
      // The answer comes exactly when the worker starts writing the attempt's outcome (it
      // stopped waiting at the hard timeout), or a moment past the hard timeout.
      const finish = rig.q.store.attemptFinishMany.bind(rig.q.store);
      rig.q.store.attemptFinishMany = (p) => {
        if (when.startsWith('while')) answer?.();
        return finish(p);
      };
      const stubborn = defineOperation({
        name: 'test.stubborn',
        timeoutMs: 300,
        retry: { maxAttempts: 1 },
        execute: (_input: unknown, c) =>
          c.dispatch(
            () =>
              new Promise<{ charged: boolean }>((resolve) => {
                sends++;
                answer = () => resolve({ charged: true });
                if (when.startsWith('after'))
                  c.signal.addEventListener('abort', () =>
                    setTimeout(answer!, HARD_TIMEOUT_AFTER_ABORT_MS + 200),
                  );
              }),
          ),
      });
      const reconciled: unknown[] = [];
      const worker = await rig.worker({ operations: [stubborn], leaseMs: 5_000 });
      worker.on('reconciled', (e) => reconciled.push(e));
      const job = await rig.q.enqueue(stubborn, { n: 1 }, { key: 'stubborn-1' });
      const detail = await until(
        'the late answer resolves the job',
        async () => {
          const d = await rig.job(job.id);
          return d.job.state === 'SUCCEEDED' ? d : null;
        },
        10_000,
      );
      expect(sends).toBe(1);
      expect(detail.attempts).toHaveLength(1);
      expect(detail.attempts[0]).toMatchObject({
        state: 'UNKNOWN',
        reason: 'timeout-after-dispatch',
        resolution: 'succeeded',
        resolutionSource: 'late-worker',
      });
      expect(detail.job.result).toEqual({ charged: true });
      expect(reconciled).toHaveLength(1);
    });
});
