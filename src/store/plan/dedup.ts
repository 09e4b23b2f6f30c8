/**
 * Invariant 9, judged once for both stores: an enqueue whose request key exists returns that
 * job only for the same operation and the same fingerprint; anything else is a
 * RequestKeyConflict, and the store writes nothing of the batch.
 */
import { RequestKeyConflict } from '../../core/errors.js';
import { DISABLED_SAFEGUARD } from '../../core/unsafe.js';
import type { EventWrite } from './types.js';

export interface KeyHolder {
  id: string;
  operation: string;
  fingerprint: string;
}

export interface KeyRequest {
  requestKey: string;
  operation: string;
  fingerprint: string;
}

/** The existing job answers the request (a dedup), or the request conflicts with it (throws). */
export function planDedup(existing: KeyHolder, given: KeyRequest): void {
  const sameOperation =
    existing.operation === given.operation || DISABLED_SAFEGUARD === 'dedup-ignores-operation';
  if (sameOperation && existing.fingerprint === given.fingerprint) return;
  throw new RequestKeyConflict({
    requestKey: given.requestKey,
    existingJobId: existing.id,
    existing: { operation: existing.operation, fingerprint: existing.fingerprint },
    given: { operation: given.operation, fingerprint: given.fingerprint },
  });
}

/** The event a deduplicated enqueue records on the existing job. */
export function dedupEvent(requestKey: string, actor: string): EventWrite {
  return {
    attemptNo: null,
    kind: 'enqueue-deduplicated',
    fromState: null,
    toState: null,
    actor,
    detailJson: JSON.stringify({ requestKey }),
  };
}
