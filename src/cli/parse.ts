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

/** A share or probability, a number from 0 to 1. */
export function shareOption(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1)
    throw new InvalidArgumentError('expected a number from 0 to 1.');
  return n;
}

/** `name=number` pairs, comma-separated, each name one of `names`; numbers at least 0. */
export function weightsOption<N extends string>(
  names: readonly N[],
): (value: string) => Partial<Record<N, number>> {
  return (value) => {
    const weights: Partial<Record<N, number>> = {};
    for (const pair of value.split(',').map((s) => s.trim())) {
      const [name, raw, extra] = pair.split('=').map((s) => s.trim());
      const n = Number(raw);
      if (!names.includes(name as N) || raw === undefined || raw === '' || extra !== undefined)
        throw new InvalidArgumentError(
          `expected name=number pairs such as ${names[0]}=1, names from ${names.join(', ')}; got "${pair}".`,
        );
      if (!Number.isFinite(n) || n < 0)
        throw new InvalidArgumentError(`${name} must be a number of at least 0; got "${raw}".`);
      weights[name as N] = n;
    }
    return weights;
  };
}
