/**
 * Issue #21's scenarios, shared by test/lookup-horizon.test.ts (both stores, in process) and
 * test/fixtures/two-fleets.ts (a child process, for the sabotaged builds of broken-build.test.ts).
 *
 * The downstream charges cards and answers lookups late: a charge becomes visible to `lookup`
 * only `lagMs` after it was made, as a payment provider's search index does. The operation says
 * so with `reconcile.graceMs`; a lookup before `dispatchedAt + timeoutMs + graceMs` reads "not
 * found" for a charge that went through, and the reconciler would charge again.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { RequestKeyConflict, defineOperation, openQueue, type Queue } from '../../src/index.js';
import type { AnyOperation } from '../../src/core/operation.js';
import type { ClaimedAttempt, LeaseRef } from '../../src/store/store.js';

export interface LaggingDownstream {
  /** Request key → times it was charged (ms, host clock). */
  charges: Map<string, number[]>;
  /** Every lookup: its key and when it ran (ms, host clock). */
  lookups: { key: string; at: number }[];
  charge(key: string): void;
}

export function laggingDownstream(lagMs: number) {
  const d: LaggingDownstream = {
    charges: new Map(),
    lookups: [],
    charge(key) {
      const list = d.charges.get(key) ?? [];
      list.push(Date.now());
      d.charges.set(key, list);
    },
  };
  const visible = (key: string) => {
    const first = d.charges.get(key)?.[0];
    return first !== undefined && Date.now() - first >= lagMs;
  };
  return { downstream: d, visible };
}

export function chargeOperation(p: { timeoutMs: number; graceMs: number; lagMs: number }): {
  op: AnyOperation;
  downstream: LaggingDownstream;
} {
  const { downstream, visible } = laggingDownstream(p.lagMs);
  const op = defineOperation({
    name: 'payments.charge',
    timeoutMs: p.timeoutMs,
    reconcile: { graceMs: p.graceMs, lookupBackoffMs: 50 },
    retry: { maxAttempts: 3, backoff: { initialMs: 10, factor: 1, maxMs: 10 } },
    execute: (input: { order: string }, ctx) =>
      ctx.dispatch(() => {
        downstream.charge(ctx.requestKey);
        return Promise.resolve({ charged: input.order });
      }),
    lookup: (key) => {
      downstream.lookups.push({ key, at: Date.now() });
      return Promise.resolve(
        visible(key)
          ? { found: true, outcome: 'succeeded', result: { charged: key } }
          : { found: false },
      );
    },
  });
  return { op, downstream };
}

export const emailSend = defineOperation({
  name: 'email.send',
  execute: (input: { to: string }, ctx) => ctx.dispatch(() => Promise.resolve({ sent: input.to })),
});

/**
 * Fleet B's first life: claims the charges, writes their dispatch markers and sends them, then
 * dies (what a SIGKILL after the send leaves: markers, no outcomes, leases running out).
 */
export async function chargeAndDie(q: Queue, leaseMs: number, d: LaggingDownstream) {
  const claimed: ClaimedAttempt[] = await q.store.attemptClaimMany({
    ownerId: 'fleet-b-1',
    queues: ['default'],
    operations: ['payments.charge'],
    limit: 100,
    leaseMs,
  });
  const leases: LeaseRef[] = claimed.map((c) => ({
    jobId: c.job.id,
    attemptNo: c.attempt.attemptNo,
    leaseToken: c.attempt.leaseToken,
  }));
  const marks = await q.store.attemptDispatchMany({ leases });
  if (!marks.every((m) => m.ok)) throw new Error('fleet B could not mark its dispatches');
  for (const c of claimed) d.charge(c.job.requestKey);
  return { claimed, leases };
}

/** Waits for the thing itself: every job of `ids` in a settled state (or the deadline). */
export async function untilSettled(q: Queue, ids: string[], ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const jobs = await Promise.all(ids.map((id) => q.job(id)));
    if (jobs.every((d) => d && ['SUCCEEDED', 'FAILED', 'NEEDS_REVIEW'].includes(d.job.state)))
      return;
    if (Date.now() > deadline) throw new Error('jobs did not settle in time');
    await sleep(25);
  }
}

/** Keys charged more than once, and lookups that ran before their job's horizon. */
export async function verdict(q: Queue, ids: string[], d: LaggingDownstream) {
  const duplicates = [...d.charges].filter(([, at]) => at.length > 1).map(([k]) => k);
  const early: { key: string; at: number; horizon: number }[] = [];
  for (const id of ids) {
    const detail = (await q.job(id))!;
    const first = detail.attempts[0]!;
    const horizon = first.dispatchedAt! + detail.job.timeoutMs + detail.job.reconcileGraceMs;
    for (const l of d.lookups)
      if (l.key === detail.job.requestKey && l.at < horizon) early.push({ ...l, horizon });
  }
  return { duplicates, early };
}

/**
 * A schedule set too early by someone else (a fleet of an older version, say): the attempt is
 * ended UNKNOWN with its first check at once. The reconciler must still wait for the horizon.
 */
export async function earlyScheduleScenario(url: string) {
  const { op, downstream } = chargeOperation({ timeoutMs: 100, graceMs: 1_500, lagMs: 1_000 });
  const q = await openQueue({ store: url, operations: [op] });
  try {
    const jobs = await q.enqueueMany(op, [
      { input: { order: 'e1' }, key: 'early-1' },
      { input: { order: 'e2' }, key: 'early-2' },
    ]);
    const ids = jobs.map((j) => j.id);
    const { leases } = await chargeAndDie(q, 30_000, downstream);
    await q.store.attemptFinishMany({
      finishes: leases.map((lease) => ({
        lease,
        state: 'UNKNOWN' as const,
        reason: 'no-definitive-answer',
        resultJson: null,
        error: null,
        job: { to: 'UNKNOWN' as const, checkAfterDispatchMs: 0 },
        actor: 'fleet-old',
      })),
    });
    const w = q.worker({ operations: [op], reconcileIntervalMs: 20, pollIntervalMs: 20 });
    await w.start();
    try {
      await untilSettled(q, ids, 10_000);
    } finally {
      await w.stop();
    }
    return await verdict(q, ids, downstream);
  } finally {
    await q.close();
  }
}

/**
 * Invariant 9 across operations: a refund under the key of a charge must be refused, neither
 * answered with the charge nor written beside it. Says what the second enqueue got.
 */
export async function keyReusedScenario(
  url: string,
): Promise<'conflict' | 'swallowed' | 'created'> {
  const mk = (name: string) =>
    defineOperation({ name, execute: (_i: { order: string }) => Promise.resolve(null) });
  const charge = mk('payments.charge');
  const refund = mk('payments.refund');
  const q = await openQueue({ store: url, operations: [charge, refund] });
  try {
    await q.enqueue(charge, { order: 'o-1' }, { key: 'order-1' });
    try {
      // Only RequestKeyConflict is right: a refund job under the charge's key (two effects for
      // one key) or the charge's job answered for the refund (the refund lost) are both wrong.
      const r = await q.enqueue(refund, { order: 'o-1' }, { key: 'order-1' });
      return r.operation === 'payments.refund' ? 'created' : 'swallowed';
    } catch (err) {
      if (err instanceof RequestKeyConflict) return 'conflict';
      throw err;
    }
  } finally {
    await q.close();
  }
}
