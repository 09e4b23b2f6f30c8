/**
 * What a restore from a backup marks, for both stores (sqlite/backup.ts, postgres/restore.ts).
 * A backup holds no fact written after it, so a job that may have moved on the old host since
 * is not left to look untouched:
 * - LEASED without a marker, or QUEUED and due: its attempt ends UNKNOWN, dispatch presumed at
 *   the restore, and reconciliation (lookup, same-key retry, review) proves what happened;
 * - AWAITING_APPROVAL: a person may have approved it (and a worker sent it) or denied it on the
 *   old host. It goes to NEEDS_REVIEW with that doubt as its event, so that the person who
 *   decides reads it and `q.call` answers "may have been sent, a person is reviewing it":
 *   approving it again blindly could send twice, or reverse a denial.
 */
import { assertJobTransition } from '../../core/states.js';
import { DISABLED_SAFEGUARD } from '../../core/unsafe.js';
import type { EventWrite } from './types.js';

export type RestoreReconcile = 'unfinished' | 'leased' | 'none';

/** The reason of an attempt whose dispatch a restore presumed. */
export const RESTORE_PRESUMED_REASON = 'restored-from-backup-may-have-been-sent';

/** Which jobs a restore marks, by mode ('none': the backup was taken with everything stopped). */
export function restoreMarks(mode: RestoreReconcile): {
  leased: boolean;
  queued: boolean;
  approvals: boolean;
} {
  return {
    leased: mode !== 'none',
    queued: mode === 'unfinished',
    // Test-only sabotage (core/unsafe.ts, NODE_ENV=test): restored approvals left waiting.
    approvals: mode !== 'none' && DISABLED_SAFEGUARD !== 'restore-keeps-approvals',
  };
}

/**
 * What a restore keeps of flow control (issue #30), for both stores:
 * - pauses are an operator's decision, durable until resumed: kept as the backup has them;
 * - rate state (starts in the window, holds from a downstream's Retry-After) described the old
 *   host's recent traffic: cleared, a restored store starts its windows fresh;
 * - a schedule's last judged slot: the old host may have enqueued (and sent) the slots after the
 *   backup, which the copy does not hold, so (unless the backup was taken with everything
 *   stopped) it moves to the restore's time and those slots are skipped, never enqueued again.
 *   A person who knows they did not run can enqueue them by hand (key `schedule:<name>:<slot>`).
 */
export function restoreFlowMarks(mode: RestoreReconcile): { advanceSchedules: boolean } {
  return { advanceSchedules: mode !== 'none' };
}

/** The event of an awaiting approval sent to review by a restore (its job goes NEEDS_REVIEW). */
export function restoredApprovalEvent(p: {
  backupLastEventAt: number | null;
  approvalExpiresAt: number | null;
}): EventWrite {
  assertJobTransition('AWAITING_APPROVAL', 'NEEDS_REVIEW');
  return {
    attemptNo: null,
    kind: 'restored-approval-in-doubt',
    fromState: 'AWAITING_APPROVAL',
    toState: 'NEEDS_REVIEW',
    actor: 'restore',
    detailJson: JSON.stringify({
      reason: 'restored-from-backup-approval-may-have-been-decided',
      note:
        'restored from a backup while awaiting approval: on the old host it may have been ' +
        'approved and sent, or denied, after the backup. Check the downstream (or the old ' +
        "host's journal): resolve as succeeded if it was sent, retry to send it now (same " +
        'request key), failed if it must not run',
      backupLastEventAt: p.backupLastEventAt,
      approvalExpiresAt: p.approvalExpiresAt,
    }),
  };
}
