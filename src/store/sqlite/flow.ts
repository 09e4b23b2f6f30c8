/**
 * SQLite flow control (issue #30): the limited claim, holds, pauses and schedules. Every write
 * is one transaction of the store's single writer, so a limited claim reads its counts and
 * writes its leases with no other claim in between: no locks beyond the write lock.
 */
import type { FlowLimit } from '../../core/flow.js';
import {
  flowCandidateWindow,
  flowOutcome,
  planFlowClaim,
  tallyFlowOutcome,
  type FlowCandidate,
  type FlowCounts,
} from '../plan/index.js';
import type {
  ClaimedAttempt,
  FlowClaimParams,
  FlowClaimResult,
  PauseRecord,
  ScheduleRecord,
} from '../store.js';
import { pauseFromRow, scheduleFromRow, type PauseRow, type ScheduleRow } from '../rows.js';
import { leaseRows } from './attempts.js';
import type { SqliteHandle } from './handle.js';
import { JOB_COLUMNS, LIMIT_PARAM, inList, type ClaimTuple } from './statements.js';

type FlowTuple = [...ClaimTuple, rateKey: string | null, concurrencyKey: string | null];

/** Queues and operations paused now (read in the caller's transaction). */
export function pausedNow(
  h: SqliteHandle,
): { queues: Set<string>; operations: Set<string> } | null {
  const rows = h.rawStmt('SELECT kind, name FROM flow_pauses').all() as [string, string][];
  if (rows.length === 0) return null;
  const out = { queues: new Set<string>(), operations: new Set<string>() };
  for (const [kind, name] of rows) (kind === 'queue' ? out.queues : out.operations).add(name);
  return out;
}

/** The queues and operations a claim may take from, with paused ones left out (null: none). */
export function claimableNow(
  h: SqliteHandle,
  queues: string[],
  operations: string[],
): { queues: string[]; operations: string[] } | null {
  const paused = pausedNow(h);
  if (!paused) return { queues, operations };
  const q = queues.filter((x) => !paused.queues.has(x));
  const o = operations.filter((x) => !paused.operations.has(x));
  return q.length > 0 && o.length > 0 ? { queues: q, operations: o } : null;
}

function candidateSql(queues: number, limit: FlowLimit): string {
  return `SELECT ${JOB_COLUMNS}, rowid, rate_key, concurrency_key FROM jobs INDEXED BY jobs_claim
    WHERE state = 'QUEUED' AND queue IN (${inList(queues)}) AND run_at <= ? AND operation = ?
    ${
      limit.concurrency
        ? `AND coalesce(concurrency_key, '') NOT IN (SELECT concurrency_key FROM jobs INDEXED BY jobs_flow_leased
            WHERE state = 'LEASED' AND concurrency_key IS NOT NULL AND operation = ?
            GROUP BY concurrency_key HAVING count(*) >= ?)`
        : ''
    }
    ${
      limit.rate
        ? `AND coalesce(rate_key, '') NOT IN (SELECT rate_key FROM flow_starts
            WHERE operation = ? AND at > ? GROUP BY rate_key HAVING count(*) >= ?)
          AND coalesce(rate_key, '') NOT IN (SELECT rate_key FROM flow_holds WHERE operation = ? AND until > ?)`
        : ''
    }
    ORDER BY priority DESC, run_at, rowid ${LIMIT_PARAM}`;
}

function candidateArgs(queues: string[], limit: FlowLimit, now: number, window: number): unknown[] {
  const args: unknown[] = [...queues, now, limit.operation];
  if (limit.concurrency) args.push(limit.operation, limit.concurrency.max);
  if (limit.rate)
    args.push(limit.operation, now - limit.rate.perMs, limit.rate.max, limit.operation, now);
  args.push(window);
  return args;
}

/** What the limits of one operation count now (see plan/flow.ts). */
function countsOf(h: SqliteHandle, limit: FlowLimit, now: number): FlowCounts {
  const leased = new Map<string, number>();
  const starts = new Map<string, { count: number; oldestAt: number }>();
  const holds = new Map<string, number>();
  if (limit.concurrency) {
    const rows = h
      .rawStmt(
        `SELECT concurrency_key, count(*) FROM jobs INDEXED BY jobs_flow_leased
         WHERE state = 'LEASED' AND concurrency_key IS NOT NULL AND operation = ? GROUP BY concurrency_key`,
      )
      .all(limit.operation) as [string, number][];
    for (const [k, n] of rows) leased.set(k, n);
  }
  if (limit.rate) {
    const rows = h
      .rawStmt(
        `SELECT rate_key, count(*), min(at) FROM flow_starts WHERE operation = ? AND at > ? GROUP BY rate_key`,
      )
      .all(limit.operation, now - limit.rate.perMs) as [string, number, number][];
    for (const [k, count, oldestAt] of rows) starts.set(k, { count, oldestAt });
    // Next start times up to a window back still place the next start (plan/flow.ts spacedAfter).
    const held = h
      .rawStmt('SELECT rate_key, until FROM flow_holds WHERE operation = ? AND until > ?')
      .all(limit.operation, now - limit.rate.perMs) as [string, number][];
    for (const [k, until] of held) holds.set(k, until);
  }
  return { leased, starts, holds };
}

export function attemptClaimLimited(h: SqliteHandle, p: FlowClaimParams): Promise<FlowClaimResult> {
  if (p.queues.length === 0 || p.limits.length === 0 || p.limit <= 0)
    return Promise.resolve({ claimed: [], retryInMs: null, held: [] });
  // Nothing to take (every key at its limit, or nothing due): a read answers, without the write
  // lock, so that workers waiting for a slot do not serialize every process's writes. Skipped
  // while writes of this process are queued, as for the plain claim.
  if (h.writer.idle) {
    try {
      const probe = claimLimited(h, p, false);
      if (probe.claimed.length === 0) return Promise.resolve(probe);
    } catch (err) {
      return Promise.reject(h.classify(err));
    }
  }
  return h.writer.write(
    () => claimLimited(h, p, true),
    // As the plain claim: acted on only through the dispatch marker, a synced write after it.
    { unsynced: true },
  );
}

/**
 * Reads each limited operation's candidates and counts and lets the plan choose; with `write`
 * (inside the write transaction) leases what it chose, else (a read-only probe) only reports
 * whether anything would be taken (`claimed` then holds a placeholder per job).
 */
function claimLimited(h: SqliteHandle, p: FlowClaimParams, write: boolean): FlowClaimResult {
  const now = h.now();
  const open = claimableNow(
    h,
    [...new Set(p.queues)],
    p.limits.map((l) => l.operation),
  );
  const result: FlowClaimResult = { claimed: [], retryInMs: null, held: [] };
  if (!open) return result;
  for (const limit of p.limits) {
    const want = p.limit - result.claimed.length;
    if (want <= 0) break;
    if (!open.operations.includes(limit.operation)) continue;
    const window = flowCandidateWindow(want);
    const rows = h
      .rawStmt(candidateSql(open.queues.length, limit))
      .all(candidateArgs(open.queues, limit, now, window)) as FlowTuple[];
    const candidates: FlowCandidate[] = rows.map((r) => ({
      rateKey: r[27] ?? '',
      concurrencyKey: r[28] ?? '',
      dueAt: r[10],
    }));
    const plan = planFlowClaim(limit, candidates, countsOf(h, limit, now), want, now);
    tallyFlowOutcome(result, limit.operation, flowOutcome(plan, now));
    if (plan.take.length === 0) continue;
    if (!write) return { claimed: [PROBE_HIT], retryInMs: null, held: [] };
    const taken = plan.take.map((i) => rows[i]!);
    result.claimed.push(...lease(h, p, limit, taken, now, plan.nextStartAt));
  }
  return result;
}

/** The probe's "something would be taken": never returned to a caller. */
const PROBE_HIT = {} as ClaimedAttempt;

/** Leases the taken rows and records their starts (rate-limited operations). */
function lease(
  h: SqliteHandle,
  p: FlowClaimParams,
  limit: FlowLimit,
  taken: FlowTuple[],
  now: number,
  nextStartAt: Map<string, number>,
): ClaimedAttempt[] {
  const claimed = leaseRows(h, p, taken as unknown as ClaimTuple[], now);
  if (limit.rate) {
    const next = h.stmt(
      `INSERT INTO flow_holds (operation, rate_key, until) VALUES (?, ?, ?)
       ON CONFLICT (operation, rate_key) DO UPDATE SET until = max(until, excluded.until)`,
    );
    for (const [key, at] of nextStartAt) next.run(limit.operation, key, at);
    const start = h.stmt('INSERT INTO flow_starts (operation, rate_key, at) VALUES (?, ?, ?)');
    for (const r of taken) start.run(limit.operation, r[27] ?? '', now);
    // Starts that left the window count for nothing any more.
    h.stmt('DELETE FROM flow_starts WHERE operation = ? AND at <= ?').run(
      limit.operation,
      now - limit.rate.perMs,
    );
  }
  return claimed;
}

export function flowBackoff(
  h: SqliteHandle,
  p: { operation: string; rateKey: string; delayMs: number },
): Promise<void> {
  return h.writer.write(() => {
    h.stmt(
      `INSERT INTO flow_holds (operation, rate_key, until) VALUES (?, ?, ?)
       ON CONFLICT (operation, rate_key) DO UPDATE SET until = max(until, excluded.until)`,
    ).run(p.operation, p.rateKey, h.now() + p.delayMs);
  });
}

export function pauseSet(
  h: SqliteHandle,
  p: {
    kind: 'queue' | 'operation';
    name: string;
    paused: boolean;
    actor: string;
    reason: string | null;
  },
): Promise<boolean> {
  return h.writer.write(() => {
    if (p.paused)
      return (
        h
          .stmt(
            `INSERT INTO flow_pauses (kind, name, actor, reason, paused_at) VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (kind, name) DO NOTHING`,
          )
          .run(p.kind, p.name, p.actor, p.reason, h.now()).changes === 1
      );
    const changed =
      h.stmt('DELETE FROM flow_pauses WHERE kind = ? AND name = ?').run(p.kind, p.name).changes ===
      1;
    // Its jobs are claimable again: wake the workers.
    if (changed) h.writer.newWork = true;
    return changed;
  });
}

export function pauseList(h: SqliteHandle): Promise<PauseRecord[]> {
  return h.read(() =>
    (
      h
        .stmt('SELECT kind, name, actor, reason, paused_at FROM flow_pauses ORDER BY kind, name')
        .all() as PauseRow[]
    ).map(pauseFromRow),
  );
}

export function scheduleRegister(
  h: SqliteHandle,
  p: { name: string; cron: string; timezone: string | null; operation: string },
): Promise<ScheduleRecord> {
  return h.writer.write(() => {
    const now = h.now();
    const row = h
      .stmt(
        `INSERT INTO flow_schedules (name, cron, timezone, operation, last_slot_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, timezone = excluded.timezone,
           operation = excluded.operation,
           updated_at = CASE WHEN cron = excluded.cron AND timezone IS excluded.timezone
             AND operation = excluded.operation THEN updated_at ELSE excluded.updated_at END
         RETURNING *`,
      )
      .get(p.name, p.cron, p.timezone, p.operation, now, now) as ScheduleRow;
    return scheduleFromRow(row);
  });
}

export function scheduleAdvance(
  h: SqliteHandle,
  p: { name: string; lastSlotAt: number },
): Promise<void> {
  return h.writer.write(() => {
    h.stmt('UPDATE flow_schedules SET last_slot_at = ? WHERE name = ? AND last_slot_at < ?').run(
      p.lastSlotAt,
      p.name,
      p.lastSlotAt,
    );
  });
}

export function scheduleList(h: SqliteHandle): Promise<ScheduleRecord[]> {
  return h.read(() =>
    (h.stmt('SELECT * FROM flow_schedules ORDER BY name').all() as ScheduleRow[]).map(
      scheduleFromRow,
    ),
  );
}
