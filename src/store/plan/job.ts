/** A job's columns after a move to `to`: the one place that says what each state sets. */
import type { JobState } from '../../core/states.js';
import type { JobWrite } from './types.js';

const TERMINAL: ReadonlySet<JobState> = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

export function isTerminal(state: JobState): boolean {
  return TERMINAL.has(state);
}

export interface JobMoveExtra {
  runAt?: number;
  nextCheckAt?: number | null;
  lookupFailures?: number;
  resultJson?: string | null;
  errorJson?: string | null;
}

/**
 * UNKNOWN keeps a check time (the given one, else the current, else now); every other state
 * clears it. A terminal state stamps finished_at.
 */
export function planJobWrite(
  current: { nextCheckAt: number | null },
  to: JobState,
  now: number,
  extra: JobMoveExtra,
): JobWrite {
  return {
    state: to,
    updatedAt: now,
    runAt: extra.runAt ?? null,
    nextCheckAt: to === 'UNKNOWN' ? (extra.nextCheckAt ?? current.nextCheckAt ?? now) : null,
    lookupFailures: extra.lookupFailures ?? null,
    resultJson: extra.resultJson ?? null,
    errorJson: extra.errorJson ?? null,
    finishedAt: TERMINAL.has(to) ? now : null,
  };
}

/** The error a cancelled job records. */
export function cancelledErrorJson(reason: string): string {
  return JSON.stringify({ name: 'Cancelled', message: reason });
}
