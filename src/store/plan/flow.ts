/**
 * Which due jobs of a limited operation a claim may lease (issue #30), given what the store read
 * under its locks: the jobs leased now per concurrency key, the starts within the rate window per
 * rate key, and the holds a downstream's Retry-After put on rate keys. Pure: both stores call it
 * between their reads and their writes, so the rule is written once.
 */
import type { FlowLimit } from '../../core/flow.js';

export interface FlowCandidate {
  /** '' for the operation-wide key (NULL in the row: a job enqueued before the limit existed). */
  rateKey: string;
  concurrencyKey: string;
  /** When the job became due (its run_at, ms): no start is owed to a key for time before it. */
  dueAt: number;
}

export interface FlowCounts {
  /** Jobs of the operation LEASED now, by concurrency key. */
  leased: ReadonlyMap<string, number>;
  /** Starts within (now - perMs, now], by rate key: how many, and the oldest one's time. */
  starts: ReadonlyMap<string, { count: number; oldestAt: number }>;
  /**
   * Rate keys' next start times (ms), by key: the spacing of their last starts, or a hold a
   * downstream's Retry-After put there. Times up to `perMs` in the past matter (see `spacedAfter`).
   */
  holds: ReadonlyMap<string, number>;
}

export interface FlowClaimPlan {
  /** Indexes into the candidates, in claim order. */
  take: number[];
  /** Due candidates left behind by the rate limit (or a hold), and by the concurrency limit. */
  heldByRate: number;
  heldByConcurrency: number;
  /** When a rate slot frees for a candidate left behind (ms since the epoch), or null. */
  retryAt: number | null;
  /** Rate keys that started: their next start time, to be stored (kept if later there). */
  nextStartAt: Map<string, number>;
}

/**
 * Due jobs a limited claim reads per operation: a window past the jobs it wants, so that keys at
 * their limit (skipped in claim order) leave room for other keys' jobs. Keys known to be at a
 * limit are filtered out in SQL first, so the window holds jobs that can mostly run.
 */
export const FLOW_CANDIDATES_MAX = 512;

/** How many candidates a limited claim that wants `want` jobs reads. */
export function flowCandidateWindow(want: number): number {
  return Math.min(FLOW_CANDIDATES_MAX, want * 4 + 16);
}

/** What one limited operation's part of a claim left behind, and when a slot frees (ms from now). */
export interface FlowOutcome {
  heldByRate: number;
  heldByConcurrency: number;
  retryInMs: number | null;
}

/** A plan's outcome, its retry time made relative to the store's now. */
export function flowOutcome(plan: FlowClaimPlan, now: number): FlowOutcome {
  return {
    heldByRate: plan.heldByRate,
    heldByConcurrency: plan.heldByConcurrency,
    retryInMs: plan.retryAt === null ? null : Math.max(0, plan.retryAt - now),
  };
}

/** Adds one operation's outcome to a limited claim's result: what it held, the earliest retry. */
export function tallyFlowOutcome(
  out: {
    held: { operation: string; rate: number; concurrency: number }[];
    retryInMs: number | null;
  },
  operation: string,
  o: FlowOutcome,
): void {
  out.held.push({ operation, rate: o.heldByRate, concurrency: o.heldByConcurrency });
  if (o.retryInMs !== null)
    out.retryInMs = out.retryInMs === null ? o.retryInMs : Math.min(out.retryInMs, o.retryInMs);
}

/**
 * A key's next start time after a start at `now`: one interval (perMs / max) after the slot this
 * start fills on the grid of the key's earlier starts. A claim that comes late (a busy host, a
 * timer that fired late) fills the slot it missed, so the lateness is caught up rather than
 * lost: the next slot may then be due at once, and the starts missed go together. The catch-up
 * is bounded: a slot is never older than `catchUpMs` (see `rateCatchUpMs`), nor older than the
 * job's own due time (a key with nothing waiting is owed nothing). What bounds the starts is the
 * window count, judged apart: never more than max in any perMs, whatever the grid says.
 */
export function spacedAfter(
  next: number | undefined,
  now: number,
  intervalMs: number,
  dueAt: number,
  catchUpMs: number,
): number {
  // An idle key (nothing stored within a window) starts a new grid at now.
  if (next === undefined) return now + intervalMs;
  return Math.max(next, dueAt, now - catchUpMs) + intervalMs;
}

/**
 * How late a start can be and still fill its slot (ms): a quarter of the window, at least one
 * interval. A stall up to this long costs no starts; at most max / 4 + 1 of them then go
 * together (a burst the window count still caps at max per perMs). A longer stall loses the rest.
 */
export function rateCatchUpMs(rate: { max: number; perMs: number }): number {
  return Math.max(rateIntervalMs(rate), Math.floor(rate.perMs / 4));
}

/** The interval between two starts of one key: whole ms (the window caps any rounding). */
export function rateIntervalMs(rate: { max: number; perMs: number }): number {
  return Math.max(1, Math.floor(rate.perMs / rate.max));
}

/**
 * Walks the candidates in claim order and takes each one whose keys have room, counting what it
 * takes against them, until `want` are taken. A key at its limit is skipped, never waited for:
 * the jobs of other keys keep flowing.
 */
export function planFlowClaim(
  limit: FlowLimit,
  candidates: readonly FlowCandidate[],
  counts: FlowCounts,
  want: number,
  now: number,
): FlowClaimPlan {
  const started = new Map<string, number>();
  const nextStartAt = new Map<string, number>();
  const interval = limit.rate ? rateIntervalMs(limit.rate) : 0;
  const catchUp = limit.rate ? rateCatchUpMs(limit.rate) : 0;
  const leasedNow = new Map<string, number>();
  const take: number[] = [];
  let heldByRate = 0;
  let heldByConcurrency = 0;
  let retryAt: number | null = null;
  const later = (t: number) => (retryAt = retryAt === null ? t : Math.min(retryAt, t));
  for (let i = 0; i < candidates.length; i++) {
    const c = candidates[i]!;
    if (take.length >= want) break;
    if (limit.rate) {
      const hold = nextStartAt.get(c.rateKey) ?? counts.holds.get(c.rateKey);
      if (hold !== undefined && hold > now) {
        heldByRate++;
        later(hold);
        continue;
      }
      const s = counts.starts.get(c.rateKey);
      const used = (s?.count ?? 0) + (started.get(c.rateKey) ?? 0);
      if (used >= limit.rate.max) {
        heldByRate++;
        // The oldest start leaves the window then; with none in the window (all taken by this
        // claim), the window's end.
        later((s && s.count > 0 ? s.oldestAt : now) + limit.rate.perMs);
        continue;
      }
    }
    if (limit.concurrency) {
      const busy =
        (counts.leased.get(c.concurrencyKey) ?? 0) + (leasedNow.get(c.concurrencyKey) ?? 0);
      if (busy >= limit.concurrency.max) {
        heldByConcurrency++;
        continue;
      }
      leasedNow.set(c.concurrencyKey, (leasedNow.get(c.concurrencyKey) ?? 0) + 1);
    }
    if (limit.rate) {
      started.set(c.rateKey, (started.get(c.rateKey) ?? 0) + 1);
      const next = nextStartAt.get(c.rateKey) ?? counts.holds.get(c.rateKey);
      nextStartAt.set(c.rateKey, spacedAfter(next, now, interval, c.dueAt, catchUp));
    }
    take.push(i);
  }
  // Keys spaced out are left out of the candidates by the store: their next start still wakes.
  if (limit.rate && take.length < want)
    for (const t of counts.holds.values()) if (t > now) later(t);
  return { take, heldByRate, heldByConcurrency, retryAt, nextStartAt };
}
