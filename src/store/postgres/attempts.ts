/**
 * PostgreSQL claim, lease, dispatch, heartbeat and finish paths: the hot path, one prepared
 * statement each (statements.ts), shared by concurrent callers through the store's group commits.
 */
import { InvariantViolation, assert } from '../../core/errors.js';
import { assertFinishLegal } from '../rules.js';
import {
  attemptFromRow,
  jobFromRow,
  jsonOrNull,
  newLeasedAttempt,
  toMs,
  type AttemptRow,
  type JobRow,
} from '../rows.js';
import type {
  AttemptFinish,
  AttemptRecord,
  ClaimedAttempt,
  DispatchMarkResult,
  HeartbeatResult,
  JobRecord,
  LeaseRef,
} from '../store.js';
import { finishParams, isTerminal, type FinishParams } from '../plan/index.js';
import type { PgHandle } from './handle.js';
import { claimLimitInline } from './statements.js';

/**
 * The hot statements are prepared once per pooled connection under these names, so the server
 * parses and plans each once per connection instead of once per call. The claims' names take a
 * suffix: their limit, or `n` for the one statement of the other sizes (`claimLimitInline`).
 */
export const PREPARED = {
  attemptClaim: 'reckon_attempt_claim',
  attemptClaimQueues: 'reckon_attempt_claim_queues',
  attemptDispatch: 'reckon_attempt_dispatch',
  attemptFinish: 'reckon_attempt_finish',
  attemptHeartbeat: 'reckon_attempt_heartbeat',
} as const;
export async function jobReconcileClaimMany(
  h: PgHandle,
  p: {
    operations: string[];
    limit: number;
    holdMs: number;
  },
): Promise<ClaimedAttempt[]> {
  if (p.operations.length === 0 || p.limit <= 0) return [];
  const r = await h.db.run((c) =>
    c.query<{ job: JobRow; attempt: AttemptRow | null }>(h.sql.jobReconcileClaim, [
      p.operations,
      p.limit,
      p.holdMs,
    ]),
  );
  return r.rows.map((row) => {
    const job = jobFromRow(row.job);
    assert(row.attempt, `UNKNOWN job ${job.id} has its attempt ${job.attemptCount}`);
    return { job, attempt: attemptFromRow(row.attempt, job) };
  });
}

export async function attemptClaimMany(
  h: PgHandle,
  p: {
    ownerId: string;
    queues: string[];
    operations: string[];
    limit: number;
    leaseMs: number;
  },
): Promise<ClaimedAttempt[]> {
  if (p.queues.length === 0 || p.operations.length === 0 || p.limit <= 0) return [];
  // One statement: a failure leaves nothing (or, if ambiguous, leases that simply expire).
  const queues = [...new Set(p.queues)];
  const one = queues.length === 1;
  const inline = claimLimitInline(p.limit);
  const since = h.commits.start();
  const r = await h.db.statement<ClaimRow>(
    `${one ? PREPARED.attemptClaim : PREPARED.attemptClaimQueues}_${inline ? p.limit : 'n'}`,
    (one ? h.sql.attemptClaim : h.sql.attemptClaimQueues)(inline ? String(p.limit) : '$5'),
    [one ? queues[0] : queues, p.operations, p.ownerId, p.leaseMs, ...(inline ? [] : [p.limit])],
  );
  h.commits.emit('claim', 1, since);
  return r.rows.map((row) => claimedFromRow(row, p.ownerId));
}

/** A claim statement's row (`claim` in statements-hot.ts): the job and its new attempt. */
export function claimedFromRow(row: ClaimRow, ownerId: string): ClaimedAttempt {
  const job = jobFromRow(row);
  return {
    job,
    attempt: newLeasedAttempt(job, {
      ownerId,
      leaseToken: row.a_lease_token,
      leasedAt: row.a_leased_at,
      leaseExpiresAt: row.a_lease_expires_at,
    }),
  };
}

/**
 * Invariant 3, one statement for the whole (merged) batch: lock, judge (leaseHolds, then the
 * lease unexpired on the clock read after the locks), mark, append `dispatched` events.
 */
export async function dispatchNow(h: PgHandle, leases: LeaseRef[]): Promise<DispatchMarkResult[]> {
  const r = await h.db.statement<{
    status: string;
    lease_expires_at: number | null;
    dispatched_at: number | null;
  }>(PREPARED.attemptDispatch, h.sql.attemptDispatch, [
    leases.map((l) => l.jobId),
    leases.map((l) => l.attemptNo),
    leases.map((l) => l.leaseToken),
  ]);
  assert(r.rows.length === leases.length, 'the dispatch statement answered once per lease');
  const recheck = leases.filter((_, i) => r.rows[i]!.status === 'recheck');
  const why = recheck.length > 0 ? await dispatchRefusals(h, recheck) : [];
  let k = 0;
  return r.rows.map((row): DispatchMarkResult => {
    if (row.status === 'ok')
      return { ok: true, dispatchedAt: row.dispatched_at!, leaseExpiresAt: row.lease_expires_at! };
    if (row.status === 'recheck') return { ok: false, reason: why[k++]! };
    assert(
      row.status === 'lease-lost' || row.status === 'lease-expired',
      `unexpected dispatch status ${row.status}`,
    );
    return { ok: false, reason: row.status };
  });
}

/**
 * Why these leases took no marker though the statement's snapshot held them unmarked, read
 * after it (so the commit that made the update skip them is seen): lost, or expired; one that
 * holds, unexpired, was marked by another caller meanwhile (a bug).
 */
async function dispatchRefusals(
  h: PgHandle,
  leases: LeaseRef[],
): Promise<('lease-lost' | 'lease-expired')[]> {
  const r = await h.db.run((c) =>
    c.query<{
      job_state: string | null;
      attempt_count: number | null;
      state: string | null;
      lease_token: string | null;
      lease_expires_at: number | null;
      dispatched_at: number | null;
      now: number;
    }>(h.sql.attemptDispatchWhy, [leases.map((l) => l.jobId), leases.map((l) => l.attemptNo)]),
  );
  return r.rows.map((row, i) => {
    const lease = leases[i]!;
    const holds =
      row.state === 'LEASED' &&
      row.lease_token === lease.leaseToken &&
      row.job_state === 'LEASED' &&
      row.attempt_count === lease.attemptNo;
    if (!holds) return 'lease-lost';
    if (row.lease_expires_at! <= row.now) return 'lease-expired';
    assert(
      row.dispatched_at === null,
      `job ${lease.jobId} attempt ${lease.attemptNo} dispatched twice`,
    );
    // Held, unexpired and unmarked later than the update: the update would have marked it.
    throw new InvariantViolation(
      `job ${lease.jobId} attempt ${lease.attemptNo}: its fence holds but its marker did not apply`,
    );
  });
}

export async function heartbeatNow(
  h: PgHandle,
  leases: LeaseRef[],
  leaseMs: number,
): Promise<HeartbeatResult[]> {
  const refs = leases.map((l) => ({
    job_id: l.jobId,
    attempt_no: l.attemptNo,
    lease_token: l.leaseToken,
  }));
  const r = await h.db.statement<{
    job_id: string;
    attempt_no: number;
    lease_expires_at: Date;
  }>(PREPARED.attemptHeartbeat, h.sql.attemptHeartbeat, [JSON.stringify(refs), leaseMs]);
  const extended = new Map(
    r.rows.map((row) => [leaseKey(row.job_id, row.attempt_no), toMs(row.lease_expires_at)]),
  );
  return leases.map((lease) => {
    const until = extended.get(leaseKey(lease.jobId, lease.attemptNo));
    return until === undefined
      ? { lease, ok: false, leaseExpiresAt: null }
      : { lease, ok: true, leaseExpiresAt: until };
  });
}

/**
 * Outcomes, one statement for the whole (merged) batch. What rules.ts would say of each finish
 * under a held lease depends on the rows only through the dispatch marker, so it is
 * judged here for both cases, and the statement applies the verdict for the case it finds.
 */
export async function finishNow(h: PgHandle, finishes: AttemptFinish[]): Promise<boolean[]> {
  const verdicts = finishes.map((f) => ({
    unmarked: finishViolation(f, null),
    marked: finishViolation(f, 0),
  }));
  const col = <T>(fn: (f: AttemptFinish) => T): T[] => finishes.map(fn);
  // What the plan decides without the rows; the statement adds the fence and the clock.
  const planned = finishes.map((f) => finishParams(f));
  const pcol = <T>(fn: (f: FinishParams) => T): T[] => planned.map(fn);
  const r = await h.db.statement<{ applied: boolean; requeued: string | null }>(
    PREPARED.attemptFinish,
    h.sql.attemptFinish,
    [
      col((f) => f.lease.jobId),
      col((f) => f.lease.attemptNo),
      col((f) => f.lease.leaseToken),
      col((f) => f.state),
      col((f) => f.reason),
      col((f) => f.resultJson),
      col((f) => jsonOrNull(f.error)),
      pcol((f) => f.jobTo),
      pcol((f) => f.runDelayMs),
      pcol((f) => f.checkAfterDispatchMs),
      pcol((f) => f.jobResultJson),
      pcol((f) => f.jobErrorJson),
      pcol((f) => f.eventKind),
      col((f) => f.actor),
      pcol((f) => f.eventDetailJson),
      verdicts.map((v) => v.unmarked !== undefined),
      verdicts.map((v) => v.marked !== undefined),
      h.channel,
      pcol((f) => f.resetsLookupFailures),
      pcol((f) => isTerminal(f.jobTo)),
      pcol((f) => f.routine),
    ],
    (what) => {
      // "finish <index from 1> marked|unmarked": rethrow what rules.ts said of that finish.
      const m = /^finish (\d+) (marked|unmarked)$/.exec(what);
      const v = m ? verdicts[Number(m[1]) - 1] : undefined;
      return (m?.[2] === 'marked' ? v?.marked : v?.unmarked) ?? new InvariantViolation(what);
    },
  );
  assert(r.rows.length === finishes.length, 'the finish statement answered once per outcome');
  const requeued = new Set<string>();
  for (const row of r.rows) if (row.requeued !== null) requeued.add(row.requeued);
  h.wakeLocal(requeued);
  return r.rows.map((row) => row.applied);
}

export function leaseKey(jobId: string, attemptNo: number): string {
  return `${jobId}#${attemptNo}`;
}

/** The claim statement's row: the job's columns (times in ms) and its new attempt's. */
export type ClaimRow = JobRow & {
  a_lease_token: string;
  a_leased_at: number;
  a_lease_expires_at: number;
};

/**
 * What rules.ts's `assertFinishLegal` says of a finish whose lease holds (so job and attempt are
 * LEASED, on the lease's attempt), given whether the attempt carries a dispatch marker: the
 * error it throws, or undefined. It reads nothing else of the rows; should it ever read
 * more, the statement that applies this verdict must pass that too.
 */
function finishViolation(
  f: AttemptFinish,
  dispatchedAt: number | null,
): InvariantViolation | undefined {
  const job = { id: f.lease.jobId, state: 'LEASED' } as JobRecord;
  const attempt = { attemptNo: f.lease.attemptNo, state: 'LEASED', dispatchedAt } as AttemptRecord;
  try {
    assertFinishLegal(job, attempt, f);
    return undefined;
  } catch (err) {
    if (err instanceof InvariantViolation) return err;
    throw err;
  }
}
