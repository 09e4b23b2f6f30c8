/**
 * SQLite claim, lease and dispatch paths: claiming due jobs (and UNKNOWN ones for lookup), the
 * dispatch marker and heartbeats. The hot path: its statements and their number are fixed.
 */
import { assert } from '../../core/errors.js';
import { leaseHolds, newLeaseToken } from '../rules.js';
import { jobFromRow, newLeasedAttempt, type JobRow } from '../rows.js';
import type { ClaimedAttempt, DispatchMarkResult, HeartbeatResult, LeaseRef } from '../store.js';
import type { SqliteHandle } from './handle.js';
import { claimableNow } from './flow.js';
import { fenceView } from './moves.js';
import { getAttempt } from './reads.js';
import {
  CLAIM_LEASE,
  LIMIT_PARAM,
  claimArgs,
  claimProbeSql,
  claimSql,
  inList,
  jobFromTuple,
  type ClaimTuple,
} from './statements.js';

/** A read outside any transaction (WAL: it waits for no writer): does the query find a row? */
export function exists(h: SqliteHandle, sql: string, args: unknown[]): boolean {
  return h.stmt(sql).get(...args) !== undefined;
}

export function jobReconcileClaimMany(
  h: SqliteHandle,
  p: {
    operations: string[];
    limit: number;
    holdMs: number;
  },
): Promise<ClaimedAttempt[]> {
  if (p.operations.length === 0 || p.limit <= 0) return Promise.resolve([]);
  const ops = inList(p.operations.length);
  const due = `FROM jobs INDEXED BY jobs_reconcile
    WHERE state = 'UNKNOWN' AND next_check_at <= ? AND operation IN (${ops})`;
  // Nothing due: answered by a read, without taking the write lock (see attemptClaimMany).
  if (h.writer.idle) {
    try {
      if (!exists(h, `SELECT 1 ${due} LIMIT 1`, [h.now(), ...p.operations]))
        return Promise.resolve([]);
    } catch (err) {
      return Promise.reject(h.classify(err));
    }
  }
  return h.writer.write(() => {
    const now = h.now();
    const rows = h
      .stmt(`SELECT rowid AS _rowid, * ${due} ORDER BY next_check_at ${LIMIT_PARAM}`)
      .all(now, ...p.operations, p.limit) as (JobRow & { _rowid: number })[];
    const hold = h.stmt('UPDATE jobs SET next_check_at = ? WHERE rowid = ?');
    const out: ClaimedAttempt[] = [];
    for (const row of rows) {
      // Holding the check (not a lease: a lookup changes nothing) keeps other reconcilers off it.
      hold.run(now + p.holdMs, row._rowid);
      row.next_check_at = now + p.holdMs;
      const job = jobFromRow(row);
      const attempt = getAttempt(h, job, job.attemptCount);
      assert(attempt, `UNKNOWN job ${job.id} has its attempt ${job.attemptCount}`);
      out.push({ job, attempt });
    }
    return out;
  });
}

interface ClaimParams {
  ownerId: string;
  queues: string[];
  operations: string[];
  limit: number;
  leaseMs: number;
}

export function attemptClaimMany(h: SqliteHandle, p: ClaimParams): Promise<ClaimedAttempt[]> {
  if (p.queues.length === 0 || p.operations.length === 0 || p.limit <= 0)
    return Promise.resolve([]);
  // Nothing due: a read answers, and the write lock is not taken, so an idle worker (in this
  // or another process) does not serialize the writers. Skipped while writes of this process
  // are queued (an enqueue among them may be what this claim is for).
  const queues = p.queues.length === 1 ? p.queues : [...new Set(p.queues)];
  if (h.writer.idle) {
    try {
      if (
        !exists(h, claimProbeSql(queues.length, p.operations.length), [
          ...queues,
          h.now(),
          ...p.operations,
        ])
      )
        return Promise.resolve([]);
    } catch (err) {
      return Promise.reject(h.classify(err));
    }
  }
  return h.writer.write(
    () => {
      const now = h.now();
      // Paused queues and operations are left out (flow.ts), judged in this transaction.
      const open = claimableNow(h, queues, p.operations);
      if (!open) return [];
      // Read in claim order, then leased one by one by rowid: no RETURNING (SQLite gathers
      // returned rows in an ephemeral table) and no `rowid IN (…)` set to build.
      const rows = h
        .rawStmt(claimSql(open.queues.length, open.operations.length))
        .all(claimArgs(now, open.queues, open.operations, p.limit)) as ClaimTuple[];
      if (rows.length === 0) return [];
      return leaseRows(h, p, rows, now);
    },
    // Acted on only through the dispatch marker, a synced write after it (see `write`).
    { unsynced: true },
  );
}

/**
 * Leases the claimed rows, inside the claim's write: the job, and a new attempt whose `lease_ms`
 * records its `leased` step (invariant 8; no event row). The attempt does not copy the job's
 * request key and fingerprint (migration 13): reads take them from the job.
 */
export function leaseRows(
  h: SqliteHandle,
  p: Pick<ClaimParams, 'ownerId' | 'leaseMs'>,
  rows: ClaimTuple[],
  now: number,
): ClaimedAttempt[] {
  const leaseExpiresAt = now + p.leaseMs;
  const lease = h.stmt(CLAIM_LEASE);
  const insertAttempt = h.stmt(
    `INSERT INTO attempts (job_id, attempt_no, state, owner_id, lease_token, leased_at, lease_expires_at, lease_ms)
   VALUES (?, ?, 'LEASED', ?, ?, ?, ?, ?)`,
  );
  const out: ClaimedAttempt[] = new Array<ClaimedAttempt>(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i]!;
    assert(lease.run(now, r[26]).changes === 1, `job ${r[0]} changed between read and lease`);
    // The row as leased.
    r[8] = 'LEASED';
    r[12] = now;
    r[14] = r[14] + 1;
    r[18] = null;
    const job = jobFromTuple(r);
    const attemptNo = job.attemptCount;
    const token = newLeaseToken();
    insertAttempt.run(job.id, attemptNo, p.ownerId, token, now, leaseExpiresAt, p.leaseMs);
    out[i] = {
      job,
      attempt: newLeasedAttempt(job, {
        ownerId: p.ownerId,
        leaseToken: token,
        leasedAt: now,
        leaseExpiresAt,
      }),
    };
  }
  return out;
}

export function attemptDispatchMany(
  h: SqliteHandle,
  p: { leases: LeaseRef[] },
): Promise<DispatchMarkResult[]> {
  if (p.leases.length === 0) return Promise.resolve([]);
  return h.writer.write(() => {
    const now = h.now();
    const mark = h.rawStmt(
      // Every fence of invariant 3 in one conditional write: token, attempt LEASED and not
      // expired on the store clock, no marker yet, and the job still on this attempt.
      `UPDATE attempts SET dispatched_at = ?
       WHERE job_id = ? AND attempt_no = ? AND lease_token = ? AND state = 'LEASED'
         AND lease_expires_at > ? AND dispatched_at IS NULL
         AND EXISTS (SELECT 1 FROM jobs WHERE id = ? AND state = 'LEASED' AND attempt_count = ?)
       RETURNING lease_expires_at, owner_id, lease_ms`,
    );
    return p.leases.map((lease): DispatchMarkResult => {
      const r = mark.get(
        now,
        lease.jobId,
        lease.attemptNo,
        lease.leaseToken,
        now,
        lease.jobId,
        lease.attemptNo,
      ) as [leaseExpiresAt: number, ownerId: string, leaseMs: number | null] | undefined;
      if (r) {
        // An attempt leased with its steps as columns has its marker as its `dispatched` step;
        // one leased before them (migration 11) gets the event, as before.
        if (r[2] === null)
          h.writer.event(
            lease.jobId,
            lease.attemptNo,
            h
              .stmt('SELECT request_fingerprint FROM jobs WHERE id = ?')
              .pluck()
              .get(lease.jobId) as string,
            'dispatched',
            null,
            null,
            r[1],
            null,
            now,
          );
        return { ok: true, dispatchedAt: now, leaseExpiresAt: r[0] };
      }
      // It did not apply: say why, judged as before by the shared rules.
      const v = fenceView(h, lease);
      if (!v || !leaseHolds(v.job, v.attempt, lease)) return { ok: false, reason: 'lease-lost' };
      if (v.attempt.leaseExpiresAt <= now) return { ok: false, reason: 'lease-expired' };
      assert(
        v.attempt.dispatchedAt === null,
        `job ${lease.jobId} attempt ${lease.attemptNo} dispatched twice`,
      );
      assert(
        false,
        `job ${lease.jobId} attempt ${lease.attemptNo}: its fence holds but its marker did not apply`,
      );
    });
  });
}

export function attemptHeartbeatMany(
  h: SqliteHandle,
  p: { leases: LeaseRef[]; leaseMs: number },
): Promise<HeartbeatResult[]> {
  if (p.leases.length === 0) return Promise.resolve([]);
  return h.writer.write(() => {
    const now = h.now();
    const extend = h.stmt(
      `UPDATE attempts SET lease_expires_at = ?
       WHERE job_id = ? AND attempt_no = ? AND lease_token = ? AND state = 'LEASED' AND lease_expires_at > ?`,
    );
    const expiresAt = now + p.leaseMs;
    return p.leases.map((lease): HeartbeatResult => {
      const r = extend.run(expiresAt, lease.jobId, lease.attemptNo, lease.leaseToken, now);
      return r.changes === 1
        ? { lease, ok: true, leaseExpiresAt: expiresAt }
        : { lease, ok: false, leaseExpiresAt: null };
    });
  });
}
