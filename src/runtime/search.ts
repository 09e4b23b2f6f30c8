/**
 * What the console (and any other reader) asks of the journal beyond one job: a bounded search of
 * the jobs, and an overview. `q.search` and `q.overview` validate here and call the store.
 */
import { InvalidInput } from '../core/errors.js';
import { isJobState, type JobState } from '../core/states.js';
import type {
  ActivityStats,
  ApprovalStats,
  JobSearchPage,
  JobSearchParams,
  Store,
  StoreStats,
} from '../store/store.js';

export interface JobSearchQuery {
  state?: JobState | JobState[];
  queue?: string;
  operation?: string;
  /** Only the steps of this agent run (the `runId` given at enqueue). */
  runId?: string;
  /** Created at or after this time (epoch ms or Date, store clock). */
  from?: number | Date;
  /** Created before this time. */
  to?: number | Date;
  /**
   * A job id, request key, run id or request fingerprint (exact), or text in the input or the
   * request key (case-insensitive for ASCII letters, on every store).
   */
  text?: string;
  /** Jobs per page: 1 to `SEARCH_LIMIT_MAX`, default 50. */
  limit?: number;
  /** The previous page's `nextBeforeId`. */
  before?: string;
  /** The most jobs one call reads past (see `JobSearchParams.scanRowsMax`); default `SEARCH_SCAN_ROWS_DEFAULT`. */
  scanRowsMax?: number;
}

export const SEARCH_LIMIT_MAX = 500;
/**
 * How many jobs one search reads past at most. A search whose filter matches little reads its
 * whole window, row by row (the text is matched in each row's input): 10,000 rows cost about
 * 10 ms on either store on an idle host, and several times that on a busy one, which is what
 * keeps a search's p99 under 100 ms with 1,000,000 jobs. A filter matching one job in a million
 * says "not in the latest 10,000, search older" instead of reading the whole table.
 */
export const SEARCH_SCAN_ROWS_DEFAULT = 10_000;
export const SEARCH_SCAN_ROWS_MAX = 1_000_000;
/** Searched text longer than this is refused: a request key or fingerprint is far shorter. */
export const SEARCH_TEXT_LENGTH_MAX = 512;

const NAME_LENGTH_MAX = 200;

function timeOf(value: number | Date | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const ms = value instanceof Date ? value.getTime() : value;
  if (typeof ms !== 'number' || !Number.isFinite(ms))
    throw new InvalidInput(`${name} must be a time (epoch milliseconds or a Date)`);
  return Math.floor(ms);
}

function nameOf(value: unknown, name: string): string | undefined {
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string' || value.length > NAME_LENGTH_MAX)
    throw new InvalidInput(`${name} must be a string of at most ${NAME_LENGTH_MAX} characters`);
  return value;
}

function intIn(value: number | undefined, fallback: number, max: number, name: string): number {
  const n = value ?? fallback;
  if (!Number.isInteger(n) || n < 1 || n > max)
    throw new InvalidInput(`${name} must be an integer from 1 to ${max}`);
  return n;
}

/** The store's parameters for a query, or InvalidInput saying what is wrong with it. */
export function searchParams(query: JobSearchQuery): JobSearchParams {
  const states =
    query.state === undefined ? [] : Array.isArray(query.state) ? query.state : [query.state];
  for (const s of states)
    if (!isJobState(s)) throw new InvalidInput(`unknown job state ${JSON.stringify(s)}`);
  const text = query.text === undefined ? undefined : String(query.text).trim();
  if (text !== undefined && text.length > SEARCH_TEXT_LENGTH_MAX)
    throw new InvalidInput(`search text must be at most ${SEARCH_TEXT_LENGTH_MAX} characters`);
  const p: JobSearchParams = {
    limit: intIn(query.limit, 50, SEARCH_LIMIT_MAX, 'limit'),
    scanRowsMax: intIn(
      query.scanRowsMax,
      SEARCH_SCAN_ROWS_DEFAULT,
      SEARCH_SCAN_ROWS_MAX,
      'scanRowsMax',
    ),
  };
  if (states.length) p.states = [...new Set(states)];
  const queue = nameOf(query.queue, 'queue');
  const operation = nameOf(query.operation, 'operation');
  const runId = nameOf(query.runId, 'runId');
  const before = nameOf(query.before, 'before');
  const from = timeOf(query.from, 'from');
  const to = timeOf(query.to, 'to');
  if (queue !== undefined) p.queue = queue;
  if (operation !== undefined) p.operation = operation;
  if (runId !== undefined) p.runId = runId;
  if (before !== undefined) p.beforeId = before;
  if (from !== undefined) p.createdFrom = from;
  if (to !== undefined) p.createdTo = to;
  if (text) p.text = text;
  return p;
}

export function searchJobs(store: Store, query: JobSearchQuery): Promise<JobSearchPage> {
  return store.jobSearch(searchParams(query));
}

/** The overview's window: the last hour, in 5-minute buckets. */
export const OVERVIEW_WINDOW_MS = 60 * 60_000;
export const OVERVIEW_BUCKET_MS = 5 * 60_000;
/**
 * The most ended jobs the overview reads per bucket: 12 buckets of at most 5,000 keep it to tens
 * of milliseconds at any rate; a bucket busier than 17 jobs a second is estimated from its latest.
 */
export const OVERVIEW_BUCKET_ROWS_MAX = 5_000;

export interface Overview {
  /** The store's clock when read. */
  now: number;
  /** Counts by queue and state, the oldest due job per queue, open cases by operation. */
  stats: StoreStats;
  /** Jobs awaiting approval: how many, since when, by operation. */
  approvals: {
    waiting: number;
    oldestAt: number | null;
    byOperation: ApprovalStats['byOperation'];
  };
  /** Ended jobs per bucket over the last hour, UNKNOWN / NEEDS_REVIEW growth. */
  activity: ActivityStats;
}

export async function overviewOf(store: Store): Promise<Overview> {
  const [stats, approvals, activity] = await Promise.all([
    store.statsGet(),
    store.jobApprovalStats(),
    store.statsActivityGet({
      windowMs: OVERVIEW_WINDOW_MS,
      bucketMs: OVERVIEW_BUCKET_MS,
      bucketRowsMax: OVERVIEW_BUCKET_ROWS_MAX,
    }),
  ]);
  const oldest = approvals.byOperation.map((o) => o.oldestAt);
  return {
    now: stats.now,
    stats,
    approvals: {
      waiting: approvals.byOperation.reduce((n, o) => n + o.awaiting, 0),
      oldestAt: oldest.length ? Math.min(...oldest) : null,
      byOperation: approvals.byOperation,
    },
    activity,
  };
}
