/**
 * The parts of `jobSearch` both SQL stores share: the time bounds turned into id bounds, the
 * text turned into a LIKE pattern, the exact hits filtered, and a page made of what the window
 * returned. Each store only reads (reads.ts) with its own SQL.
 */
import type { JobState } from '../core/states.js';
import type { ActivityStats, JobRecord, JobSearchPage, JobSearchParams } from './store.js';

/** The smallest uuid v7 text of jobs made at `ms` or later (its 48-bit time prefix, 8-4 hex digits). */
export function idFloorAt(ms: number): string {
  const t = Math.max(0, Math.min(2 ** 48 - 1, Math.floor(ms)));
  const hex = t.toString(16).padStart(12, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8)}`;
}

/** The creation time a uuid v7 id carries (ms), or null for an id of another form. */
export function idTime(id: string): number | null {
  const m = /^([0-9a-f]{8})-([0-9a-f]{4})-7/i.exec(id);
  return m ? parseInt(m[1]! + m[2]!, 16) : null;
}

/**
 * The id range to read: below `upper` (the cursor, or the end of the time range), from `lower`.
 * Time filters are id ranges: a job's id is a uuid v7 whose first 48 bits are the enqueuing
 * process's clock when it made the job, so a time range is a range of the primary key.
 */
export function idRange(p: JobSearchParams): { upper: string | null; lower: string | null } {
  let upper = p.beforeId ?? null;
  if (p.createdTo !== undefined) {
    const byTime = idFloorAt(p.createdTo);
    if (upper === null || byTime < upper) upper = byTime;
  }
  const lower = p.createdFrom === undefined ? null : idFloorAt(p.createdFrom);
  return { upper, lower };
}

/**
 * The states with partial indexes of their own and, in a healthy journal, few jobs (each waits
 * for a lookup or a person): a filter on only these reads their indexes, without a window.
 */
export const INDEXED_STATES: readonly JobState[] = ['UNKNOWN', 'NEEDS_REVIEW', 'AWAITING_APPROVAL'];

export function onlyIndexedStates(p: JobSearchParams): boolean {
  return !!p.states?.length && p.states.every((s) => INDEXED_STATES.includes(s));
}

/** Does the search filter on anything but the id range? */
export function hasFilters(p: JobSearchParams): boolean {
  return (
    !!p.states?.length ||
    p.queue !== undefined ||
    p.operation !== undefined ||
    p.runId !== undefined ||
    p.text !== undefined
  );
}

/** `%text%` for LIKE with `\` as the escape character (so `%` and `_` in the text are literal). */
export function likePattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** Does a job found by its id or request key pass the other filters? */
export function matchesFilters(job: JobRecord, p: JobSearchParams): boolean {
  if (p.states?.length && !p.states.includes(job.state)) return false;
  if (p.queue !== undefined && job.queue !== p.queue) return false;
  if (p.operation !== undefined && job.operation !== p.operation) return false;
  if (p.runId !== undefined && job.runId !== p.runId) return false;
  const t = idTime(job.id);
  if (p.createdFrom !== undefined && (t === null || t < p.createdFrom)) return false;
  if (p.createdTo !== undefined && (t === null || t >= p.createdTo)) return false;
  if (p.beforeId !== undefined && job.id >= p.beforeId) return false;
  return true;
}

/**
 * A page from the matches (read with `limit + 1` rows, any order) and, when they did not fill it,
 * the window the search read: `rows` ids, the lowest `lowId` (null: no window, e.g. an indexed
 * read that saw every match).
 */
export function searchPage(
  p: JobSearchParams,
  found: JobRecord[],
  window: { rows: number; lowId: string | null } | null,
): JobSearchPage {
  const matches = [...found].sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
  const jobs = matches.slice(0, p.limit);
  if (matches.length > p.limit) {
    return { jobs, nextBeforeId: jobs[p.limit - 1]!.id, scanStopped: false };
  }
  // The window was full: older jobs exist below it and were not read.
  if (window && window.rows >= p.scanRowsMax && window.lowId !== null) {
    return { jobs, nextBeforeId: window.lowId, scanStopped: true };
  }
  return { jobs, nextBeforeId: null, scanStopped: false };
}

/** A page of the jobs found by their id or request key (they are the whole answer). */
export function exactPage(p: JobSearchParams, exact: JobRecord[]): JobSearchPage {
  return searchPage(
    p,
    exact.filter((j) => matchesFilters(j, p)),
    null,
  );
}

/**
 * The ended-jobs buckets of `statsActivityGet`, every bucket present (zeros where none ended),
 * from each bucket's sample: its latest `rowsMax` ended jobs at most, counted by state, with the
 * oldest end time among them. A full sample covers only the end of its bucket: its counts are
 * scaled to the whole bucket (`estimated`).
 */
export function finishedBuckets(
  start: number,
  bucketMs: number,
  buckets: number,
  rows: { b: number; state: string; n: number; oldest: number }[],
  rowsMax: number,
): ActivityStats['finished'] {
  const out = Array.from({ length: buckets }, (_, i) => ({
    at: start + i * bucketMs,
    succeeded: 0,
    failed: 0,
    cancelled: 0,
    estimated: false,
  }));
  const oldest = new Map<number, number>();
  const sampled = new Map<number, number>();
  for (const r of rows) {
    const i = Math.floor(Number(r.b));
    const bucket = out[i];
    if (!bucket) continue;
    const n = Number(r.n);
    sampled.set(i, (sampled.get(i) ?? 0) + n);
    oldest.set(i, Math.min(oldest.get(i) ?? Infinity, Number(r.oldest)));
    if (r.state === 'SUCCEEDED') bucket.succeeded += n;
    else if (r.state === 'FAILED') bucket.failed += n;
    else if (r.state === 'CANCELLED') bucket.cancelled += n;
  }
  for (const [i, n] of sampled) {
    if (n < rowsMax) continue;
    const bucket = out[i]!;
    const covered = Math.max(1, bucket.at + bucketMs - oldest.get(i)!);
    const scale = Math.max(1, bucketMs / covered);
    bucket.succeeded = Math.round(bucket.succeeded * scale);
    bucket.failed = Math.round(bucket.failed * scale);
    bucket.cancelled = Math.round(bucket.cancelled * scale);
    bucket.estimated = true;
  }
  return out;
}
