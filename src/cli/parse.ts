/**
 * Parsers for option values. A bad value is a usage error (exit 64), reported by commander
 * with the option's name.
 */
import { InvalidArgumentError } from 'commander';
import { JOB_STATES, isJobState, type JobState } from '../core/states.js';

/** An integer option within [min, max]. */
export function intOption(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(`expected an integer from ${min} to ${max}.`);
    return n;
  };
}

/** A repeatable option that also takes comma lists: `--queue a --queue b,c`. */
export function listOption(value: string, previous: string[] | undefined): string[] {
  const items = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (items.length === 0) throw new InvalidArgumentError('expected at least one name.');
  return [...(previous ?? []), ...items];
}

/** Job states, case-insensitive, repeatable or comma-separated. */
export function statesOption(value: string, previous: JobState[] | undefined): JobState[] {
  const states = listOption(value, undefined).map((s) => s.toUpperCase());
  for (const s of states)
    if (!isJobState(s))
      throw new InvalidArgumentError(`unknown state ${s}; states are ${JOB_STATES.join(', ')}.`);
  return [...(previous ?? []), ...(states as JobState[])];
}

/** An ISO 8601 time, as ms since the epoch. */
export function timeOption(value: string): number {
  const ms = Date.parse(value);
  if (!Number.isFinite(ms))
    throw new InvalidArgumentError('expected an ISO 8601 time such as 2030-01-31T12:00:00Z.');
  return ms;
}
