/**
 * The plan of moves (DESIGN §6): pure functions that, given the locked job and attempt and a
 * request, decide what a store writes. Each store locks, fences, reads, calls one of these and
 * writes the WriteSet; a new state or move is written here once.
 */
export type { AttemptEnd, AttemptResolution, EventWrite, JobWrite, WriteSet } from './types.js';
export { cancelledErrorJson, isTerminal, planJobWrite, type JobMoveExtra } from './job.js';
export {
  attemptEventKind,
  finishParams,
  planExpire,
  planFinish,
  UNPROVEN,
  type FinishParams,
} from './finish.js';
export { planTransition } from './transition.js';
export {
  failedOrReview,
  needsHistory,
  provenWithoutEffect,
  refusesForKey,
  unprovenAttempts,
  type AttemptFact,
} from './proof.js';
export { planCancel, type CancelPlan } from './cancel.js';
export { dedupEvent, planDedup, type KeyHolder, type KeyRequest } from './dedup.js';
export {
  APPROVAL_EXPIRED_ERROR,
  approvalExpired,
  planApprovalExpire,
  planDecide,
  type DecidePlan,
} from './approval.js';
export {
  RESTORE_PRESUMED_REASON,
  restoreMarks,
  restoreFlowMarks,
  restoredApprovalEvent,
  type RestoreReconcile,
} from './restore.js';
export {
  flowCandidateWindow,
  flowOutcome,
  planFlowClaim,
  tallyFlowOutcome,
  type FlowCandidate,
  type FlowClaimPlan,
  type FlowCounts,
  type FlowOutcome,
} from './flow.js';
