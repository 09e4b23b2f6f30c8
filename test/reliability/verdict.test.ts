/**
 * The verdict must flag a journal that breaks invariant 6 (an attempt with another request key,
 * an effect under a key no job has) or invariant 8 (an event chain with a gap, a last event that
 * disagrees with the job's state), and a job that moved on while an attempt was still leased.
 * Each check is fed a real journal, doctored in one place.
 */
import { describe, expect, it } from 'vitest';
import { judgeDetails, eventChainProblem, type EffectLedger } from '../../src/testkit/verdict.js';
import type { JobDetail } from '../../src/store/store.js';
import { Rig, until } from './harness.js';

/** A real journal: one job, enqueued, leased, dispatched and succeeded. */
async function journal(
  ctx: Parameters<typeof Rig.open>[0],
): Promise<{ detail: JobDetail; ledger: EffectLedger }> {
  const rig = await Rig.open(ctx, 'sqlite');
  const [id] = await rig.enqueue('lookup', 1);
  await rig.worker({ operations: [rig.op('lookup')] });
  const detail = await until('the job succeeds', async () => {
    const d = await rig.job(id!);
    return d.job.state === 'SUCCEEDED' ? d : null;
  });
  const effects = new Map(rig.downstream.ledger());
  return {
    detail,
    ledger: { effectsOf: (k) => effects.get(k) ?? 0, effectKeys: () => effects.keys() },
  };
}

const copy = (d: JobDetail): JobDetail => structuredClone(d);
const kinds = (d: JobDetail, ledger: EffectLedger) =>
  judgeDetails([d], ledger, { complete: true }).findings.map((f) => f.kind);

describe('the verdict checks invariants 6 and 8', () => {
  it('passes the real journal, and flags each doctored one', async (ctx) => {
    const { detail, ledger } = await journal(ctx);
    expect(judgeDetails([detail], ledger, { complete: true }).violations).toEqual([]);
    expect(detail.events.some((e) => e.toState === null)).toBe(true); // 'dispatched'

    const rekeyed = copy(detail);
    rekeyed.attempts[0]!.requestKey = `${detail.job.requestKey}-retry`;
    expect(kinds(rekeyed, ledger)).toEqual(['request-key-changed']);

    const orphan: EffectLedger = {
      effectsOf: (k) => ledger.effectsOf(k),
      effectKeys: () => [...ledger.effectKeys!(), 'a-key-no-job-has'],
    };
    expect(kinds(detail, orphan)).toEqual(['effect-under-unknown-key']);
    // Judging a subset of the jobs cannot tell: no finding.
    expect(judgeDetails([detail], orphan).findings).toEqual([]);

    const gap = copy(detail);
    const leased = gap.events.findIndex((e) => e.kind === 'leased');
    gap.events.splice(leased, 1);
    expect(kinds(gap, ledger)).toEqual(['broken-event-chain']);

    const wrongEnd = copy(detail);
    wrongEnd.job.state = 'FAILED';
    expect(kinds(wrongEnd, ledger)).toContain('broken-event-chain');

    const firstFromSomewhere = copy(detail);
    firstFromSomewhere.events[0]!.fromState = 'LEASED';
    expect(kinds(firstFromSomewhere, ledger)).toEqual(['broken-event-chain']);

    const leftLeased = copy(detail);
    leftLeased.attempts[0]!.state = 'LEASED';
    expect(kinds(leftLeased, ledger)).toEqual(['attempt-left-leased']);
  });

  it('names what broke the chain', () => {
    const e = (id: number, kind: string, fromState: string | null, toState: string | null) => ({
      id,
      kind,
      fromState,
      toState,
    });
    const good = [
      e(1, 'enqueued', null, 'QUEUED'),
      e(2, 'leased', 'QUEUED', 'LEASED'),
      e(3, 'dispatched', null, null),
      e(4, 'attempt-unknown', 'LEASED', 'UNKNOWN'),
      e(5, 'inconclusive', 'UNKNOWN', 'UNKNOWN'),
      e(6, 'late-evidence', null, null),
      e(7, 'reconciled', 'UNKNOWN', 'SUCCEEDED'),
    ];
    expect(eventChainProblem('SUCCEEDED', good)).toBeNull();
    expect(eventChainProblem('UNKNOWN', good)).toMatch(
      /leaves the job SUCCEEDED, but it is UNKNOWN/,
    );
    expect(eventChainProblem('SUCCEEDED', [good[0]!, good[1]!, good[6]!])).toMatch(
      /event 7 \(reconciled\) starts from UNKNOWN, but the job was LEASED/,
    );
    expect(eventChainProblem('QUEUED', [])).toMatch(/no event/);
    expect(
      eventChainProblem('QUEUED', [e(1, 'enqueued', null, 'QUEUED'), e(2, 'odd', 'QUEUED', null)]),
    ).toMatch(/leaves QUEUED for no state/);
  });
});
