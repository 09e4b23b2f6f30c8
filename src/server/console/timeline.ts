/**
 * What a job's page says, read from its trail (`q.job()`): one timeline of delivery, dispatch,
 * execution and reconciliation; the evidence behind an UNKNOWN; every lookup and its answer;
 * the duplicates reckon prevented on this job; and, before a person acts, whether the action may
 * repeat an effect. Pure functions of the job's detail: no I/O, no store.
 */
import type { AttemptRecord, EventRecord, JobDetail } from '../../store/store.js';

export type Phase = 'delivery' | 'dispatch' | 'execution' | 'reconciliation' | 'decision';

export interface TimelineEntry {
  at: number;
  phase: Phase;
  attemptNo: number | null;
  title: string;
  /** `FROM → TO` when the step moved the job. */
  transition: string | null;
  actor: string;
  /** One line a person reads first (the reason, the answer, the note). */
  summary: string | null;
  detail: unknown;
}

const PHASES: Record<string, Phase> = {
  enqueued: 'delivery',
  'enqueue-deduplicated': 'delivery',
  leased: 'dispatch',
  dispatched: 'dispatch',
  fenced: 'dispatch',
  'lease-expired': 'dispatch',
  'attempt-succeeded': 'execution',
  'attempt-failed': 'execution',
  'attempt-failed-before-send': 'execution',
  'attempt-unknown': 'execution',
  'unfenced-outcome': 'execution',
  'callback-error': 'execution',
  reconciled: 'reconciliation',
  'lookup-inconclusive': 'reconciliation',
  'lookup-deferred': 'reconciliation',
  'late-evidence': 'reconciliation',
  review: 'reconciliation',
  approved: 'decision',
  denied: 'decision',
  'approval-expired': 'decision',
  resolved: 'decision',
  cancelled: 'decision',
};

const TITLES: Record<string, string> = {
  enqueued: 'Accepted (durably enqueued)',
  'enqueue-deduplicated': 'Duplicate enqueue answered with this job',
  leased: 'Leased by a worker',
  dispatched: 'Dispatch marker committed: the request may leave',
  'attempt-succeeded': 'Downstream confirmed success',
  'attempt-failed': 'Downstream answered a definite failure',
  'attempt-failed-before-send': 'Failed before sending: nothing left',
  'attempt-unknown': 'Outcome unknown: the request may have left',
  fenced: 'A worker whose lease was taken over was fenced out',
  'late-evidence': 'Late evidence from a fenced worker',
  reconciled: 'Reconciled',
  'lookup-inconclusive': 'Lookup inconclusive',
  'lookup-deferred': 'Lookup deferred until the request cannot be in flight',
  review: 'Sent to review: a person must decide',
  approved: 'Approved',
  denied: 'Denied',
  'approval-expired': 'Approval expired',
  resolved: 'Resolved by a person',
  cancelled: 'Cancelled',
};

function record(detail: unknown): Record<string, unknown> {
  return detail !== null && typeof detail === 'object' && !Array.isArray(detail)
    ? (detail as Record<string, unknown>)
    : {};
}

function text(value: unknown): string | null {
  if (typeof value === 'string' && value !== '') return value;
  const message = record(value).message;
  return typeof message === 'string' ? message : null;
}

/** The line a person reads first about an event. */
function summaryOf(e: EventRecord): string | null {
  const d = record(e.detail);
  const parts = [
    text(d.why),
    text(d.reason),
    typeof d.path === 'string' ? `path: ${d.path}` : null,
    d.lookup !== undefined ? `lookup answered: ${JSON.stringify(d.lookup)}` : null,
    typeof d.as === 'string' ? `as ${d.as}` : null,
    text(d.note) ? `note: ${text(d.note)}` : null,
    text(d.error) ? `error: ${text(d.error)}` : null,
  ].filter((s): s is string => s !== null);
  return parts.length ? parts.join(' · ') : null;
}

export function timelineOf(detail: JobDetail): TimelineEntry[] {
  return detail.events.map((e) => ({
    at: e.at,
    phase: PHASES[e.kind] ?? (e.kind.startsWith('attempt-') ? 'execution' : 'reconciliation'),
    attemptNo: e.attemptNo,
    title: TITLES[e.kind] ?? e.kind,
    transition: e.fromState && e.toState ? `${e.fromState} → ${e.toState}` : null,
    actor: e.actor,
    summary: summaryOf(e),
    detail: e.detail,
  }));
}

/** Why an attempt is UNKNOWN, from its row and the events about it. */
export interface UnknownEvidence {
  attemptNo: number;
  requestKey: string;
  /** When the dispatch marker was committed (the request may have left from then on). */
  markerAt: number;
  leasedAt: number;
  /** The lease's last expiry: the worker's last heartbeat extended it to this. */
  leaseExpiresAt: number;
  /** The last heartbeat, where the lease length is known (expiry − lease length). */
  lastHeartbeatAt: number | null;
  /** Who marked it UNKNOWN (a worker, or the reclaimer) and why. */
  markedBy: string | null;
  why: string | null;
  markedAt: number | null;
  resolution: AttemptRecord['resolution'];
  resolutionSource: string | null;
}

export function unknownEvidence(detail: JobDetail): UnknownEvidence[] {
  return detail.attempts
    .filter((a) => a.state === 'UNKNOWN' && a.dispatchedAt !== null)
    .map((a) => {
      const of = (kind: string) =>
        detail.events.filter((e) => e.attemptNo === a.attemptNo && e.kind === kind).at(-1);
      const marked = of('attempt-unknown');
      const leaseMs = record(of('leased')?.detail).leaseMs;
      return {
        attemptNo: a.attemptNo,
        requestKey: a.requestKey,
        markerAt: a.dispatchedAt!,
        leasedAt: a.leasedAt,
        leaseExpiresAt: a.leaseExpiresAt,
        lastHeartbeatAt: typeof leaseMs === 'number' ? a.leaseExpiresAt - leaseMs : null,
        markedBy: marked?.actor ?? null,
        why:
          [a.reason, text(a.error)].filter((s): s is string => !!s).join(': ') ||
          summaryOf(marked ?? ({ detail: null } as EventRecord)),
        markedAt: marked?.at ?? a.finishedAt,
        resolution: a.resolution,
        resolutionSource: a.resolutionSource,
      };
    });
}

/** Every lookup of the downstream and what it answered. */
export function lookupsOf(detail: JobDetail): TimelineEntry[] {
  return timelineOf(detail).filter((e, i) => {
    const d = record(detail.events[i]!.detail);
    return d.path === 'lookup' || d.lookup !== undefined || e.title === TITLES['lookup-deferred'];
  });
}

/** Duplicates prevented on this job: deduplicated enqueues, fenced workers, same-key retries. */
export function duplicatesPrevented(
  detail: JobDetail,
): { kind: string; at: number; text: string }[] {
  const out: { kind: string; at: number; text: string }[] = [];
  for (const e of detail.events) {
    if (e.kind === 'enqueue-deduplicated')
      out.push({
        kind: 'deduplicated enqueue',
        at: e.at,
        text: `${e.actor} enqueued the same request again: answered with this job, nothing new written`,
      });
    else if (e.kind === 'fenced' || e.kind === 'late-evidence' || e.kind === 'unfenced-outcome')
      out.push({
        kind: 'fenced worker',
        at: e.at,
        text: `${e.actor} reported after losing its lease: kept as evidence, not applied`,
      });
    else if (record(e.detail).path === 'same-key' && e.toState === 'QUEUED')
      out.push({
        kind: 'same-key retry',
        at: e.at,
        text: 'retried with the same request key: the downstream deduplicates by it',
      });
  }
  return out;
}

/**
 * What the journal says about repeating this job's effect: every attempt whose request may have
 * left (a dispatch marker) without a confirmed outcome. Empty: a retry cannot repeat an effect
 * reckon knows of.
 */
export function repeatRisks(detail: JobDetail): string[] {
  return detail.attempts
    .filter((a) => a.dispatchedAt !== null && a.state === 'UNKNOWN')
    .map(
      (a) =>
        `attempt ${a.attemptNo} sent request key ${a.requestKey} at ${new Date(a.dispatchedAt!).toISOString()} and ended ${a.state}` +
        (a.resolution
          ? ` (resolved ${a.resolution} by ${a.resolutionSource ?? 'unknown'})`
          : ', its outcome unknown'),
    );
}
