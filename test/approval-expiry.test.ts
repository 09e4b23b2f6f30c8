/**
 * Issue #33 item 3 on both stores: a decision after the approval timed out (store clock) is
 * not applied, whether or not a worker runs: it answers ApprovalExpired and the job ends
 * CANCELLED (expired), never run. `approvals list` never shows an expired job as decidable.
 * An approved job is due from its approval, not from its enqueue: it does not jump the claim
 * order nor read as overdue in queue age.
 */
import { describe, expect, it } from 'vitest';
import { ApprovalExpired, defineOperation } from '../src/index.js';
import type { AnyOperation } from '../src/core/operation.js';
import type { Flavour } from '../src/testkit/operations.js';
import { STORE_KINDS } from './helpers/stores.js';
import { Rig, until } from './reliability/harness.js';

function approvalOp(rig: Rig, flavour: Flavour, approvalTimeoutMs: number): AnyOperation {
  return defineOperation({ ...rig.op(flavour).spec, approval: true, approvalTimeoutMs });
}

/** Waits until the store's clock has passed `at` (no sleep: the clock itself). */
async function clockPast(rig: Rig, at: number): Promise<void> {
  await until(
    'the store clock to pass the expiry',
    async () => (await rig.q.store.clockNow()) > at,
  );
}

describe.each(STORE_KINDS)('approvals past their timeout on %s', (kind) => {
  it('approve or deny after expiry, no worker running: ApprovalExpired, CANCELLED, never run', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'idempotent', 200);
    const a = await rig.q.enqueue(op, { n: 1 }, { key: 'late-approve' });
    const d = await rig.q.enqueue(op, { n: 2 }, { key: 'late-deny' });
    await clockPast(rig, Math.max(a.approvalExpiresAt!, d.approvalExpiresAt!));

    await expect(
      rig.q.approvals.decide(a.id, { approve: true, actor: 'ann' }),
    ).rejects.toBeInstanceOf(ApprovalExpired);
    await expect(
      rig.q.approvals.decide(d.id, { approve: false, actor: 'ann', note: 'no' }),
    ).rejects.toMatchObject({ code: 'APPROVAL_EXPIRED', jobId: d.id });

    for (const [job, late] of [
      [a, 'approved'],
      [d, 'denied'],
    ] as const) {
      const { job: after, attempts, events } = await rig.job(job.id);
      expect(after).toMatchObject({ state: 'CANCELLED', error: { name: 'ApprovalExpired' } });
      expect(attempts).toEqual([]);
      expect(events.map((e) => e.kind)).not.toContain(late);
      expect(events.at(-1)).toMatchObject({
        kind: 'approval-expired',
        toState: 'CANCELLED',
        actor: 'operator:ann',
        detail: { expiresAt: job.approvalExpiresAt, lateDecision: late },
      });
    }
    // A worker started now finds nothing to run; the downstream never heard of either.
    await rig.worker({ operations: [op] });
    expect(await rig.q.approvals.expireOnce()).toBe(false);
    expect(rig.downstream.stats.requests).toBe(0);
  });

  it('approvals list expires what is due and never shows it as decidable', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const soon = approvalOp(rig, 'idempotent', 200);
    const later = defineOperation({ ...soon.spec, name: 'later.op', approvalTimeoutMs: 3_600_000 });
    const expiring = await rig.q.enqueue(soon, { n: 1 }, { key: 'expiring' });
    const waiting = await rig.q.enqueue(later, { n: 2 }, { key: 'waiting' });
    await clockPast(rig, expiring.approvalExpiresAt!);

    const listed = await rig.q.approvals.list();
    expect(listed.map((j) => j.id)).toEqual([waiting.id]);
    expect(listed[0]!.expiresInMs).toBeGreaterThan(0);
    expect((await rig.job(expiring.id)).job).toMatchObject({
      state: 'CANCELLED',
      error: { name: 'ApprovalExpired' },
    });
  });

  it('an approval makes the job due from the decision: claim order and queue age', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const op = approvalOp(rig, 'idempotent', 3_600_000);
    const plain = rig.op('idempotent');
    const awaiting = await rig.q.enqueue(op, { n: 1 }, { key: 'approved-late' });
    await clockPast(rig, awaiting.createdAt + 300);
    const other = await rig.q.enqueue(plain, { n: 2 }, { key: 'enqueued-meanwhile' });

    const approved = await rig.q.approvals.decide(awaiting.id, { approve: true, actor: 'ann' });
    const decidedAt = (await rig.job(awaiting.id)).events.at(-1)!.at;
    expect(approved).toMatchObject({ state: 'QUEUED', runAt: decidedAt });
    expect(approved.runAt).toBeGreaterThanOrEqual(other.runAt);
    expect(approved.runAt).toBeGreaterThan(awaiting.createdAt + 300);

    // Queue age: the oldest due job is the one enqueued meanwhile, not the approved one.
    const stats = await rig.q.store.statsGet();
    expect(stats.queues.find((s) => s.queue === other.queue)?.oldestDueAt).toBe(other.runAt);
    // Claim order: first come, first served from when each became due.
    const [first] = await rig.q.store.attemptClaimMany({
      ownerId: 'test',
      queues: [other.queue],
      operations: [op.name, plain.name],
      limit: 1,
      leaseMs: 60_000,
    });
    expect(first?.job.id).toBe(other.id);
  });
});
