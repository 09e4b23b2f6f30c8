/** A conditional job transition (reconciliation, review, a deferred check) on the locked rows. */
import { jsonOrNull } from '../rows.js';
import { transitionApplies } from '../rules.js';
import { UNPROVEN } from './finish.js';
import type { AttemptRecord, JobRecord, JobTransition } from '../store.js';
import { planJobWrite } from './job.js';
import { failedOrReview, type AttemptFact } from './proof.js';
import type { WriteSet } from './types.js';

/**
 * Null when the transition does not apply to the job and its latest attempt as they are (the
 * caller checked its legality, `assertTransitionLegal`, before locking). Going back in line
 * resets the lookup failures; an inconclusive lookup counts one more on the locked row.
 */
export function planTransition(p: {
  job: JobRecord | undefined;
  attempt: AttemptRecord | undefined;
  t: JobTransition;
  /** The job's attempts, read when `needsHistory(t.to)`. */
  history?: readonly AttemptFact[];
  now: number;
}): WriteSet | null {
  const { job, now } = p;
  if (!transitionApplies(job, p.attempt, p.t) || !job) return null;
  const t = judgedTransition(p.t, p.history);
  const lookupFailures =
    t.to === 'QUEUED' ? 0 : t.lookupFailed ? job.lookupFailures + 1 : undefined;
  return {
    ...(t.resolution
      ? {
          resolution: {
            attemptNo: t.expectAttemptNo,
            kind: t.resolution.kind,
            source: t.resolution.source,
            evidenceJson: jsonOrNull(t.resolution.evidence),
            resolvedAt: now,
          },
        }
      : {}),
    job: planJobWrite(job, t.to, now, {
      ...(t.to === 'QUEUED' ? { runAt: now + (t.delayMs ?? 0) } : {}),
      ...(t.to === 'UNKNOWN' && t.recheckDelayMs !== undefined
        ? { nextCheckAt: now + t.recheckDelayMs }
        : {}),
      ...(lookupFailures !== undefined ? { lookupFailures } : {}),
      resultJson: t.resultJson ?? null,
      errorJson: jsonOrNull(t.error),
    }),
    events: [
      {
        attemptNo: t.expectAttemptNo || null,
        kind: t.event.kind,
        fromState: t.from,
        toState: t.to,
        actor: t.event.actor,
        detailJson: jsonOrNull({
          ...(t.event.detail ?? {}),
          ...(t.to !== p.t.to ? { unprovenAttempts: t.unproven, review: UNPROVEN } : {}),
          ...(t.resolution
            ? {
                resolution: t.resolution.kind,
                source: t.resolution.source,
                evidence: t.resolution.evidence,
              }
            : {}),
        }),
      },
    ],
    requeue: t.to === 'QUEUED',
  };
}

/**
 * Item 1's rule (proof.ts) on a transition that would end the job FAILED, with the resolution
 * it adds counted: NEEDS_REVIEW when an attempt is unproven. A person's decision stands.
 */
function judgedTransition(
  t: JobTransition,
  history: readonly AttemptFact[] | undefined,
): JobTransition & { unproven: number[] } {
  if (t.byPerson) return { ...t, unproven: [] };
  const after = history?.map((a) =>
    t.resolution && a.attemptNo === t.expectAttemptNo
      ? { ...a, resolution: t.resolution.kind, resolutionSource: t.resolution.source }
      : a,
  );
  const { to, unproven } = failedOrReview(t.to, after);
  return { ...t, to, unproven };
}
