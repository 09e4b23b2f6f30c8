/**
 * Late evidence (invariant 7): a worker whose lease was taken over cannot change the journal,
 * but what it learned is kept as an event, and may resolve its UNKNOWN attempt when no later
 * attempt has dispatched.
 */
import type { Clock } from '../core/clock.js';
import { decideAfterAttempt, type AttemptOutcome } from '../core/decide.js';
import type { ErrorInfo } from '../core/errors.js';
import { encodeResult, type Json } from '../core/json.js';
import type { Logger } from '../core/operation.js';
import { seedOf } from '../core/retry.js';
import type { JobState } from '../core/states.js';
import type { ClaimedAttempt, Store } from '../store/store.js';
import type { RuntimeObserver } from './observer.js';

interface LateEvidenceHost {
  store: Store;
  log: Logger;
  ownerId: string;
  observer: RuntimeObserver;
  clock: Clock;
}

export async function recordLateEvidence(
  host: LateEvidenceHost,
  claimed: ClaimedAttempt,
  outcome: AttemptOutcome,
  result: unknown,
  error: ErrorInfo | undefined,
): Promise<JobState | null> {
  const { store } = host;
  const attemptNo = claimed.attempt.attemptNo;
  const resultJson = outcome.state === 'SUCCEEDED' ? encodeResult(result) : null;
  const evidence = {
    outcome: outcome.state,
    ownerId: host.ownerId,
    ...(resultJson !== null ? { result: JSON.parse(resultJson) as Json } : {}),
    ...(error ? { error } : {}),
  };
  // The job may move between the read and the write (the reconciler sends an UNKNOWN job to
  // NEEDS_REVIEW): then read it again; the evidence still resolves it while nothing later ran.
  for (let tryNo = 1; tryNo <= LATE_EVIDENCE_TRIES; tryNo++) {
    const resolved = await resolveWithEvidence(host, {
      claimed,
      outcome,
      resultJson,
      error,
      evidence,
    });
    if (resolved === 'does-not-apply') break;
    if (resolved !== 'changed') return resolved;
  }
  await store.eventAppendMany({
    events: [
      {
        jobId: claimed.job.id,
        attemptNo,
        kind: 'late-evidence',
        actor: host.ownerId,
        detail: evidence,
      },
    ],
  });
  return null;
}

/** Reads of the job before the evidence is only kept as an event. */
const LATE_EVIDENCE_TRIES = 3;

/**
 * Resolves the UNKNOWN attempt with the late outcome, if it is still the job's latest and
 * unresolved: the job's new state; 'changed' if the job moved meanwhile; 'does-not-apply'.
 */
async function resolveWithEvidence(
  host: LateEvidenceHost,
  p: {
    claimed: ClaimedAttempt;
    outcome: AttemptOutcome;
    resultJson: string | null;
    error: ErrorInfo | undefined;
    evidence: Record<string, unknown>;
  },
): Promise<JobState | 'changed' | 'does-not-apply'> {
  const { claimed, outcome, resultJson, error, evidence } = p;
  const { store } = host;
  const attemptNo = claimed.attempt.attemptNo;
  const detail = await store.jobGet({ id: claimed.job.id });
  const job = detail?.job;
  const attempt = detail?.attempts.find((a) => a.attemptNo === attemptNo);
  const proves = outcome.state === 'SUCCEEDED' || outcome.state === 'FAILED';
  if (
    !job ||
    !attempt ||
    !proves ||
    attempt.state !== 'UNKNOWN' ||
    attempt.resolution !== null ||
    job.attemptCount !== attemptNo ||
    (job.state !== 'UNKNOWN' && job.state !== 'NEEDS_REVIEW')
  )
    return 'does-not-apply';
  const next = decideAfterAttempt(outcome, attemptNo, {
    maxAttempts: job.maxAttempts,
    backoff: job.backoff,
    jitterSeed: seedOf(job.id),
  });
  const applied = await store.jobTransition({
    jobId: job.id,
    from: job.state,
    to: next.to,
    expectAttemptNo: attemptNo,
    ...(next.delayMs !== undefined ? { delayMs: next.delayMs } : {}),
    resolution: {
      kind: outcome.state === 'SUCCEEDED' ? 'succeeded' : 'failed',
      source: 'late-worker',
      evidence,
    },
    ...(resultJson !== null ? { resultJson } : {}),
    ...(error && next.to === 'FAILED' ? { error } : {}),
    event: { kind: 'reconciled', actor: host.ownerId, detail: { path: 'late-worker' } },
  });
  if (!applied) return 'changed';
  host.log.info(
    {
      jobId: job.id,
      attemptNo,
      fingerprint: job.fingerprint,
      operation: job.operation,
      state: next.to,
    },
    'UNKNOWN attempt resolved by late evidence from its worker',
  );
  host.observer.reconciled({
    operation: job.operation,
    path: 'late-worker',
    resolution: outcome.state === 'SUCCEEDED' ? 'succeeded' : 'failed',
    latencyMs: host.clock.now() - (attempt.finishedAt ?? host.clock.now()),
  });
  return next.to;
}
