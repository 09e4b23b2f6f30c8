/**
 * A job as the store takes it (`jobInsertMany`), for tests that drive a store directly: op.a on
 * the default queue, fingerprint `fp-<key>`, short timeouts. `o` overrides any field.
 */
import { v7 as uuidv7 } from 'uuid';
import type { JobInsert } from '../../src/store/store.js';

export function newJobInsert(key: string, o: Partial<JobInsert> = {}): JobInsert {
  return {
    id: uuidv7(),
    queue: 'default',
    operation: 'op.a',
    inputJson: JSON.stringify({ key }),
    requestKey: key,
    fingerprint: `fp-${key}`,
    runId: null,
    stepId: null,
    priority: 0,
    delayMs: 0,
    runAt: null,
    maxAttempts: 3,
    backoff: { initialMs: 10, factor: 2, maxMs: 100 },
    timeoutMs: 1_000,
    reconcileGraceMs: 5_000,
    ...o,
  };
}
