/**
 * The state model of DESIGN §1 and the one transition table that every write is checked
 * against. An illegal transition is a bug: it throws, it is never silently ignored.
 */
import { IllegalTransition } from './errors.js';

export const JOB_STATES = [
  'AWAITING_APPROVAL',
  'QUEUED',
  'LEASED',
  'UNKNOWN',
  'NEEDS_REVIEW',
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
] as const;
export type JobState = (typeof JOB_STATES)[number];

export const ATTEMPT_STATES = [
  'LEASED',
  'SUCCEEDED',
  'FAILED_BEFORE_SEND',
  'FAILED',
  'UNKNOWN',
] as const;
export type AttemptState = (typeof ATTEMPT_STATES)[number];

/** How an UNKNOWN attempt was settled by reconciliation. */
export const RESOLUTIONS = ['succeeded', 'failed', 'not_found', 'retry'] as const;
export type Resolution = (typeof RESOLUTIONS)[number];

export const TERMINAL_JOB_STATES: readonly JobState[] = ['SUCCEEDED', 'FAILED', 'CANCELLED'];

const JOB_TRANSITIONS: Readonly<Record<JobState, readonly JobState[]>> = {
  // a person's decision before any attempt: approved, or denied / timed out; a restore from a
  // backup sends it to review (it may have been decided on the old host after the backup)
  AWAITING_APPROVAL: ['QUEUED', 'CANCELLED', 'NEEDS_REVIEW'],
  // claimed by a worker, or cancelled before any attempt
  QUEUED: ['LEASED', 'CANCELLED'],
  // the attempt's outcome (or its expiry) decides; cancel only before dispatch
  LEASED: ['QUEUED', 'SUCCEEDED', 'FAILED', 'UNKNOWN', 'NEEDS_REVIEW', 'CANCELLED'],
  // reconciliation: lookup, same-key retry, late evidence, or escalation to a person
  UNKNOWN: ['QUEUED', 'SUCCEEDED', 'FAILED', 'NEEDS_REVIEW'],
  // an operator's decision, or late evidence from the original worker
  NEEDS_REVIEW: ['QUEUED', 'SUCCEEDED', 'FAILED'],
  SUCCEEDED: [],
  FAILED: [],
  CANCELLED: [],
};

const ATTEMPT_TRANSITIONS: Readonly<Record<AttemptState, readonly AttemptState[]>> = {
  LEASED: ['SUCCEEDED', 'FAILED_BEFORE_SEND', 'FAILED', 'UNKNOWN'],
  // An UNKNOWN attempt keeps its state as historical truth; a resolution is added beside it.
  UNKNOWN: [],
  SUCCEEDED: [],
  FAILED_BEFORE_SEND: [],
  FAILED: [],
};

export function canTransitionJob(from: JobState, to: JobState): boolean {
  return JOB_TRANSITIONS[from].includes(to);
}

export function assertJobTransition(from: JobState, to: JobState): void {
  if (!canTransitionJob(from, to)) throw new IllegalTransition('job', from, to);
}

export function assertAttemptTransition(from: AttemptState, to: AttemptState): void {
  if (!ATTEMPT_TRANSITIONS[from].includes(to)) throw new IllegalTransition('attempt', from, to);
}

export function isTerminalJobState(state: JobState): boolean {
  return TERMINAL_JOB_STATES.includes(state);
}

export function isJobState(value: unknown): value is JobState {
  return typeof value === 'string' && (JOB_STATES as readonly string[]).includes(value);
}

/** For docs and `reckon jobs --help`: the table as text, one line per state. */
export function describeJobTransitions(): string {
  return JOB_STATES.map((s) => `${s} -> ${JOB_TRANSITIONS[s].join(', ') || '(terminal)'}`).join(
    '\n',
  );
}
