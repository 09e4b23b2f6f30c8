/**
 * The verdict of a simulated run: the test kit's invariant checks (verdict.ts) over every job,
 * those retention deleted included, judged by the simulated downstream's ledger; plus what
 * only the simulator sees: every acknowledged enqueue is in the journal under its operation,
 * every `q.call` answer is what the journal says, nothing was approved after its expiry, and
 * no caller got an internal error.
 */
import { isDeepStrictEqual } from 'node:util';
import type { CallOutcome } from '../../runtime/outcomes.js';
import type { JobDetail } from '../../store/store.js';
import { judgeDetails, type EffectLedger } from '../verdict.js';

export interface SimRecords {
  /** Enqueues (or calls) a caller was told succeeded. */
  acks: { key: string; operation: string; jobId: string }[];
  /** What `q.call` answered, and when (virtual ms since the epoch). */
  answers: (CallOutcome & { at: number })[];
  /** Errors callers got that are neither the store's (retried) nor an expected refusal. */
  internalErrors: string[];
  lateApprovals: string[];
  /** Enqueues under another operation's key that were not refused. */
  conflictsAccepted: string[];
  /** Histories retention deleted, by job id. */
  pruned: Map<string, JobDetail>;
}

export function judgeSim(details: JobDetail[], ledger: EffectLedger, r: SimRecords): string[] {
  const v = judgeDetails(details, ledger, { complete: true });
  const out = [...v.violations];
  for (const u of v.unsettled)
    out.push(`lost: job ${u.jobId} still ${u.state} after the calm phase`);
  const byId = new Map(details.map((d) => [d.job.id, d]));
  for (const a of r.acks) {
    const d = byId.get(a.jobId);
    if (!d) out.push(`lost: acknowledged job ${a.jobId} (key ${a.key}) is not in the journal`);
    else if (d.job.operation !== a.operation || d.job.requestKey !== a.key)
      out.push(
        `lost: an enqueue of ${a.operation} under key ${a.key} was acknowledged with job ${a.jobId} of ${d.job.operation}`,
      );
  }
  for (const answer of r.answers) {
    const d = byId.get(answer.jobId);
    if (!d) continue;
    const { job } = d;
    const result = answer.state === 'SUCCEEDED' ? answer.result : undefined;
    if (
      job.state !== answer.state ||
      (result !== undefined && !isDeepStrictEqual(result, job.result))
    )
      out.push(
        `q.call answered ${answer.state} for job ${job.id} (key ${job.requestKey}), but the journal says ${job.state}`,
      );
  }
  for (const e of r.internalErrors) out.push(`internal error surfaced to a caller: ${e}`);
  for (const e of r.lateApprovals) out.push(`approved after its timeout: ${e}`);
  for (const e of r.conflictsAccepted) out.push(`dedup across operations: ${e}`);
  return out;
}
