/** A conditional job transition (reconciliation, review, a deferred check) on the locked rows. */
import { jsonOrNull } from '../rows.js';
import { transitionApplies } from '../rules.js';
import type { AttemptRecord, JobRecord, JobTransition } from '../store.js';
import { planJobWrite } from './job.js';
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
  now: number;
}): WriteSet | null {
  const { job, t, now } = p;
  if (!transitionApplies(job, p.attempt, t) || !job) return null;
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
