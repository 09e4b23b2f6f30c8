/**
 * PostgreSQL flow control (issue #30): the limited claim, holds, pauses and schedules.
 *
 * The limited claim is one transaction: lock due candidates (SKIP LOCKED), take the advisory
 * lock of each of their keys that is free (pg_try_advisory_xact_lock: a key another claimer
 * holds is skipped, never waited for), read the counts of the locked keys and the clock (a fresh
 * snapshot: a claimer that held a key before has committed, so its leases and starts are
 * counted), let the plan choose, then lease and record the starts in one statement stamped with
 * the time the counts were read. Two claimers never judge one key at once, so the decisions of
 * one key are in the order of their times, and each judged the window that ends at its own
 * leases. A hold (flowBackoff) waits for the key's lock: it lands between two decisions, never
 * between a decision and its leases.
 *
 * An operation limited by concurrency alone needs none of the plan's rate arithmetic: its claim is
 * one statement that does the same steps in SQL (`flowClaimConcurrency`), and counts the leases
 * through a function whose query takes its own snapshot, after the key locks.
 */
import type { FlowLimit } from '../../core/flow.js';
import { pauseFromRow, scheduleFromRow, type PauseRow, type ScheduleRow } from '../rows.js';
import {
  flowCandidateWindow,
  flowOutcome,
  planFlowClaim,
  tallyFlowOutcome,
  type FlowCandidate,
  type FlowCounts,
  type FlowOutcome,
} from '../plan/index.js';
import type {
  ClaimedAttempt,
  FlowClaimParams,
  FlowClaimResult,
  PauseRecord,
  ScheduleRecord,
} from '../store.js';
import type { Queryable } from './commit.js';
import type { PgHandle } from './handle.js';
import { claimLimitInline } from './statements.js';
import { claimedFromRow, type ClaimRow } from './attempts.js';

interface CandidateRow {
  id: string;
  rate_key: string;
  concurrency_key: string;
  due_at: number;
}

/**
 * One advisory lock per limit key (hashed by the statement; a collision only skips a key). The
 * one-statement claim makes the same name in SQL (statements-flow.ts `lockNameSql`).
 */
export const flowLockName = (schema: string, kind: 'c' | 'r', op: string, key: string) =>
  JSON.stringify([schema, kind, op, key]);

export async function attemptClaimLimited(
  h: PgHandle,
  schema: string,
  p: FlowClaimParams,
): Promise<FlowClaimResult> {
  if (p.queues.length === 0 || p.limits.length === 0 || p.limit <= 0)
    return { claimed: [], retryInMs: null, held: [] };
  const queues = [...new Set(p.queues)];
  const out: FlowClaimResult = { claimed: [], retryInMs: null, held: [] };
  // Each operation in a transaction of its own: its keys' locks are its own.
  for (const limit of p.limits) {
    const want = p.limit - out.claimed.length;
    if (want <= 0) break;
    const since = h.commits.start();
    const one =
      limit.rate || !limit.concurrency
        ? await h.db.tx((c) => claimOne(h, c, schema, queues, limit, want, p))
        : await claimConcurrent(h, schema, queues, limit, want, p);
    h.commits.emit('claim', 1, since);
    out.claimed.push(...one.claimed);
    tallyFlowOutcome(out, limit.operation, one);
  }
  return out;
}

/** The claim's statements are prepared under this name on each pooled connection. */
const CLAIM_CONCURRENCY = 'reckon_flow_claim_concurrency';

/**
 * An operation limited by concurrency alone: one prepared statement, its own transaction (see
 * `flowClaimConcurrency`), judged in SQL as `planFlowClaim` judges concurrency.
 */
async function claimConcurrent(
  h: PgHandle,
  schema: string,
  queues: string[],
  limit: FlowLimit,
  want: number,
  p: FlowClaimParams,
): Promise<FlowOutcome & { claimed: ClaimedAttempt[] }> {
  const window = flowCandidateWindow(want);
  // Literal sizes where the plain claim has them (claimLimitInline): with the statistics of a
  // busy table, a statement whose limits are parameters was planned again on every call.
  const inline = claimLimitInline(want);
  const one = queues.length === 1;
  const r = await h.db.statement<ClaimRow & { held: string }>(
    `${CLAIM_CONCURRENCY}${one ? '' : '_queues'}_${inline ? want : 'n'}`,
    inline
      ? h.sql.flowClaimConcurrency(one, String(window), String(want))
      : h.sql.flowClaimConcurrency(one, '$7', '$8'),
    [
      one ? queues[0] : queues,
      limit.operation,
      p.ownerId,
      p.leaseMs,
      limit.concurrency!.max,
      schema,
      ...(inline ? [] : [window, want]),
    ],
  );
  const rows = r.rows.filter((row) => row.id !== null);
  return {
    claimed: rows.map((row) => claimedFromRow(row, p.ownerId)),
    heldByRate: 0,
    heldByConcurrency: Number(r.rows[0]?.held ?? 0),
    retryInMs: null,
  };
}

async function claimOne(
  h: PgHandle,
  c: Queryable,
  schema: string,
  queues: string[],
  limit: FlowLimit,
  want: number,
  p: FlowClaimParams,
): Promise<FlowOutcome & { claimed: ClaimedAttempt[] }> {
  const window = flowCandidateWindow(want);
  const rows = (
    await c.query<CandidateRow>(h.sql.flowCandidates, [
      queues,
      limit.operation,
      window,
      limit.concurrency?.max ?? null,
      limit.rate?.max ?? null,
      limit.rate?.perMs ?? 0,
    ])
  ).rows;
  const none = { claimed: [], heldByRate: 0, heldByConcurrency: 0, retryInMs: null };
  if (rows.length === 0)
    return limit.rate ? { ...none, retryInMs: await nextHoldIn(h, c, limit) } : none;
  const mine = await lockedKeys(h, c, schema, limit, rows);
  if (mine.length === 0) return none;
  const { counts, now } = await countsOf(c, h, limit);
  const candidates: FlowCandidate[] = mine.map((r) => ({
    rateKey: r.rate_key,
    concurrencyKey: r.concurrency_key,
    dueAt: r.due_at,
  }));
  const plan = planFlowClaim(limit, candidates, counts, want, now);
  const outcome = flowOutcome(plan, now);
  const taken = plan.take.map((i) => mine[i]!);
  if (taken.length === 0) return { claimed: [], ...outcome };
  // Leased and started at `now`, the time the plan judged: the decision's time is the leases'.
  const leased = await c.query<ClaimRow>(h.sql.flowLease, [
    taken.map((r) => r.id),
    [limit.operation],
    p.ownerId,
    p.leaseMs,
    now,
    limit.rate ? taken.map((r) => r.rate_key) : [],
    limit.rate?.perMs ?? 0,
    [...plan.nextStartAt.keys()],
    [...plan.nextStartAt.values()],
  ]);
  return { claimed: leased.rows.map((row) => claimedFromRow(row, p.ownerId)), ...outcome };
}

/** When the earliest hold (a key's next start) of the operation ends, in ms from now, or null. */
async function nextHoldIn(h: PgHandle, c: Queryable, limit: FlowLimit): Promise<number | null> {
  const r = await c.query<{ in_ms: number | null }>(h.sql.flowNextHold, [limit.operation]);
  return r.rows[0]?.in_ms ?? null;
}

/** The candidates whose keys' advisory locks this claim took (a key another claimer holds: skipped). */
async function lockedKeys(
  h: PgHandle,
  c: Queryable,
  schema: string,
  limit: FlowLimit,
  rows: CandidateRow[],
): Promise<CandidateRow[]> {
  const names = new Set<string>();
  for (const r of rows) {
    if (limit.rate) names.add(flowLockName(schema, 'r', limit.operation, r.rate_key));
    if (limit.concurrency) names.add(flowLockName(schema, 'c', limit.operation, r.concurrency_key));
  }
  const got = new Set(
    (await c.query<{ k: string }>(h.sql.flowKeyLocks, [[...names]])).rows.map((r) => r.k),
  );
  return rows.filter(
    (r) =>
      (!limit.rate || got.has(flowLockName(schema, 'r', limit.operation, r.rate_key))) &&
      (!limit.concurrency ||
        got.has(flowLockName(schema, 'c', limit.operation, r.concurrency_key))),
  );
}

async function countsOf(
  c: Queryable,
  h: PgHandle,
  limit: FlowLimit,
): Promise<{ counts: FlowCounts; now: number }> {
  const r = await c.query<{ kind: string; key: string; n: string; at: number | null }>(
    h.sql.flowCounts,
    [limit.operation, limit.rate?.perMs ?? 0],
  );
  const leased = new Map<string, number>();
  const starts = new Map<string, { count: number; oldestAt: number }>();
  const holds = new Map<string, number>();
  let now = 0;
  for (const row of r.rows) {
    if (row.kind === 'now') now = row.at!;
    else if (row.kind === 'leased') leased.set(row.key, Number(row.n));
    else if (row.kind === 'starts')
      starts.set(row.key, { count: Number(row.n), oldestAt: row.at! });
    else holds.set(row.key, row.at!);
  }
  return { counts: { leased, starts, holds }, now };
}

/** A hold on a rate key, ordered with the claims that judge the key (see `flowBackoff` SQL). */
export async function flowBackoff(
  h: PgHandle,
  schema: string,
  p: { operation: string; rateKey: string; delayMs: number },
): Promise<void> {
  const lock = flowLockName(schema, 'r', p.operation, p.rateKey);
  await h.db.run((c) => c.query(h.sql.flowBackoff, [p.operation, p.rateKey, p.delayMs, lock]));
}

export async function pauseSet(
  h: PgHandle,
  p: {
    kind: 'queue' | 'operation';
    name: string;
    paused: boolean;
    actor: string;
    reason: string | null;
  },
): Promise<boolean> {
  const r = await h.db.run((c) =>
    p.paused
      ? c.query(h.sql.pauseInsert, [p.kind, p.name, p.actor, p.reason])
      : c.query(h.sql.pauseDelete, [p.kind, p.name, h.channel]),
  );
  if (!p.paused && r.rowCount && p.kind === 'queue') h.wakeLocal([p.name]);
  return (r.rowCount ?? 0) > 0;
}

export async function pauseList(h: PgHandle): Promise<PauseRecord[]> {
  const r = await h.db.run((c) => c.query<PauseRow>(h.sql.pauseList), { reads: true });
  return r.rows.map(pauseFromRow);
}

export async function scheduleRegister(
  h: PgHandle,
  p: { name: string; cron: string; timezone: string | null; operation: string },
): Promise<ScheduleRecord> {
  const r = await h.db.run((c) =>
    c.query<ScheduleRow>(h.sql.scheduleRegister, [p.name, p.cron, p.timezone, p.operation]),
  );
  return scheduleFromRow(r.rows[0]!);
}

export async function scheduleAdvance(
  h: PgHandle,
  p: { name: string; lastSlotAt: number },
): Promise<void> {
  await h.db.run((c) => c.query(h.sql.scheduleAdvance, [p.name, p.lastSlotAt]));
}

export async function scheduleList(h: PgHandle): Promise<ScheduleRecord[]> {
  const r = await h.db.run((c) => c.query<ScheduleRow>(h.sql.scheduleList), { reads: true });
  return r.rows.map(scheduleFromRow);
}
