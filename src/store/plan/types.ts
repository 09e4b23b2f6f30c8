/**
 * What a move writes, as the plan decides it (DESIGN §6): the job's new columns, the attempt's
 * end or resolution, the events to append, and whether the job went back in line. Stores only
 * lock, fence, read, call a plan and write this; a rule lives in one place.
 */
import type { AttemptState, JobState, Resolution } from '../../core/states.js';

/** A job's columns after a move. A null in a field marked "keep" leaves that column as it is. */
export interface JobWrite {
  state: JobState;
  updatedAt: number;
  /** keep when null */
  runAt: number | null;
  nextCheckAt: number | null;
  /** keep when null */
  lookupFailures: number | null;
  /** keep when null */
  resultJson: string | null;
  /** keep when null */
  errorJson: string | null;
  finishedAt: number | null;
}

/** A LEASED attempt's end, written fenced on its lease token. */
export interface AttemptEnd {
  attemptNo: number;
  leaseToken: string;
  state: Exclude<AttemptState, 'LEASED'>;
  finishedAt: number;
  resultJson: string | null;
  errorJson: string | null;
  reason: string | null;
  /** A routine outcome (plan/finish.ts `FinishParams.routine`): the job's end, recorded here. */
  endedJob: 'SUCCEEDED' | 'FAILED' | null;
}

/** A resolution added to an UNKNOWN attempt that has none. */
export interface AttemptResolution {
  attemptNo: number;
  kind: Resolution;
  source: string;
  evidenceJson: string | null;
  resolvedAt: number;
}

/** An event of the job being moved (the store adds its id and fingerprint). */
export interface EventWrite {
  attemptNo: number | null;
  kind: string;
  fromState: string | null;
  toState: string | null;
  actor: string;
  detailJson: string | null;
}

export interface WriteSet {
  job: JobWrite;
  attemptEnd?: AttemptEnd;
  resolution?: AttemptResolution;
  events: EventWrite[];
  /** The job is QUEUED again: wake its queue's workers after the commit. */
  requeue: boolean;
}
