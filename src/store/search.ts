/**
 * The parts of `jobSearch` both SQL stores share: the time bounds turned into id bounds, the
 * text turned into a LIKE pattern, the exact hits filtered, and a page made of what the window
 * returned. Each store only reads (reads.ts) with its own SQL.
 */
import type { JobRecord, JobSearchPage, JobSearchParams } from './store.js';

/**
 * Ids are uuid v7, made by the enqueuing process: their first 48 bits are its clock in ms, while
 * created_at is the store's clock. A time bound is turned into an id bound this much wider, so
 * that a process whose clock is off by less never has its jobs cut from a range (created_at
 * itself is then compared exactly).
 */
export const ID_TIME_SLACK_MS = 10 * 60_000;

/** The smallest uuid v7 text of jobs made at `ms` or later (its 48-bit time prefix, 8-4 hex digits). */
export function idFloorAt(ms: number): string {
  const t = Math.max(0, Math.min(2 ** 48 - 1, Math.floor(ms)));
  const hex = t.toString(16).padStart(12, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8)}`;
}

/** The id range to read: below `upper` (the cursor or the end of the time range), from `lower`. */
export function idRange(p: JobSearchParams): { upper: string | null; lower: string | null } {
  let upper = p.beforeId ?? null;
  if (p.createdTo !== undefined) {
    const byTime = idFloorAt(p.createdTo + ID_TIME_SLACK_MS);
    if (upper === null || byTime < upper) upper = byTime;
  }
  const lower = p.createdFrom === undefined ? null : idFloorAt(p.createdFrom - ID_TIME_SLACK_MS);
  return { upper, lower };
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
  if (p.createdFrom !== undefined && job.createdAt < p.createdFrom) return false;
  if (p.createdTo !== undefined && job.createdAt >= p.createdTo) return false;
  if (p.beforeId !== undefined && job.id >= p.beforeId) return false;
  return true;
}

/**
 * A page from the window's matches (read with `limit + 1` rows, newest first) and the window
 * itself: `windowRows` ids were read, the lowest `windowLowId`. The exact hits (first page only)
 * come first, without repeats.
 */
export function searchPage(
  p: JobSearchParams,
  exact: JobRecord[],
  matches: JobRecord[],
  window: { rows: number; lowId: string | null },
): JobSearchPage {
  const seen = new Set(exact.map((j) => j.id));
  const jobs = [...exact, ...matches.filter((j) => !seen.has(j.id)).slice(0, p.limit)];
  if (matches.length > p.limit) {
    return { jobs, nextBeforeId: matches[p.limit - 1]!.id, scanStopped: false };
  }
  // The window was full: older jobs exist below it and were not read.
  if (window.rows >= p.scanRowsMax && window.lowId !== null) {
    return { jobs, nextBeforeId: window.lowId, scanStopped: true };
  }
  return { jobs, nextBeforeId: null, scanStopped: false };
}

/** The ended-jobs buckets of `statsActivityGet`, every bucket present (zeros where none ended). */
export function finishedBuckets(
  start: number,
  bucketMs: number,
  buckets: number,
  rows: { b: number; state: string; n: number }[],
): { at: number; succeeded: number; failed: number; cancelled: number }[] {
  const out = Array.from({ length: buckets }, (_, i) => ({
    at: start + i * bucketMs,
    succeeded: 0,
    failed: 0,
    cancelled: 0,
  }));
  for (const r of rows) {
    const bucket = out[Math.min(buckets - 1, Math.max(0, Math.floor(Number(r.b))))];
    if (!bucket) continue;
    if (r.state === 'SUCCEEDED') bucket.succeeded += Number(r.n);
    else if (r.state === 'FAILED') bucket.failed += Number(r.n);
    else if (r.state === 'CANCELLED') bucket.cancelled += Number(r.n);
  }
  return out;
}
