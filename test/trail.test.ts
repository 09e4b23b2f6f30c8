/**
 * Invariant 8's one trail: routine steps rebuilt from their rows' columns (migration 11), merged
 * with the stored events in the order they happened; older rows keep their stored events.
 */
import { describe, expect, it } from 'vitest';
import type { AttemptRow, EventRow, JobRow } from '../src/store/rows.js';
import { RESTORE_PRESUMED_REASON } from '../src/store/plan/restore.js';
import { detailFromRows } from '../src/store/trail.js';
import { eventChainProblem } from '../src/testkit/verdict.js';

function jobRow(o: Partial<JobRow> & { enqueue_actor?: string | null } = {}) {
  return {
    id: 'j1',
    queue: 'default',
    operation: 'op',
    input_json: '{}',
    request_key: 'k1',
    request_fingerprint: 'fp',
    run_id: null,
    step_id: null,
    state: 'SUCCEEDED',
    priority: 0,
    run_at: 100,
    created_at: 100,
    updated_at: 100,
    finished_at: null,
    attempt_count: 1,
    max_attempts: 3,
    backoff_json: '{"initialMs":1,"factor":2,"maxMs":10}',
    timeout_ms: 1000,
    reconcile_grace_ms: 0,
    next_check_at: null,
    lookup_failures: 0,
    result_json: null,
    error_json: null,
    ...o,
  };
}

function attemptRow(
  o: Partial<AttemptRow> & { lease_ms?: number | null; ended_job?: string | null } = {},
) {
  return {
    job_id: 'j1',
    attempt_no: 1,
    request_key: 'k1',
    request_fingerprint: 'fp',
    state: 'SUCCEEDED',
    owner_id: 'w1',
    lease_token: 't',
    leased_at: 110,
    lease_expires_at: 1110,
    dispatched_at: 120,
    finished_at: 130,
    result_json: null,
    error_json: null,
    reason: null,
    resolution: null,
    resolution_source: null,
    resolution_evidence_json: null,
    resolved_at: null,
    ...o,
  };
}

let nextId = 1;
function ev(o: Partial<EventRow>): EventRow {
  return {
    id: nextId++,
    job_id: 'j1',
    attempt_no: null,
    request_fingerprint: 'fp',
    kind: 'note',
    from_state: null,
    to_state: null,
    actor: 'a',
    detail_json: null,
    at: 0,
    ...o,
  };
}

describe('the trail (invariant 8)', () => {
  it('an old job (columns NULL) reads exactly its stored events', () => {
    const stored = [
      ev({ kind: 'enqueued', to_state: 'QUEUED', at: 100 }),
      ev({ kind: 'leased', attempt_no: 1, from_state: 'QUEUED', to_state: 'LEASED', at: 110 }),
      ev({ kind: 'dispatched', attempt_no: 1, at: 120 }),
      ev({
        kind: 'attempt-succeeded',
        attempt_no: 1,
        from_state: 'LEASED',
        to_state: 'SUCCEEDED',
        at: 130,
      }),
    ];
    const d = detailFromRows(jobRow({ enqueue_actor: null }), [attemptRow()], stored);
    expect(d.events.map((e) => e.id)).toEqual(stored.map((e) => Number(e.id)));
  });

  it('a new job reads the same trail from its columns, each step an event of the same shape', () => {
    const d = detailFromRows(
      jobRow({ enqueue_actor: 'producer' }),
      [
        attemptRow({
          lease_ms: 1000,
          ended_job: 'SUCCEEDED',
          reason: 'why',
          error_json: '{"name":"E","message":"m"}',
        }),
      ],
      [],
    );
    expect(d.events).toEqual([
      {
        id: 0,
        jobId: 'j1',
        attemptNo: null,
        fingerprint: 'fp',
        kind: 'enqueued',
        fromState: null,
        toState: 'QUEUED',
        actor: 'producer',
        detail: null,
        at: 100,
      },
      {
        id: 0,
        jobId: 'j1',
        attemptNo: 1,
        fingerprint: 'fp',
        kind: 'leased',
        fromState: 'QUEUED',
        toState: 'LEASED',
        actor: 'w1',
        detail: { leaseMs: 1000 },
        at: 110,
      },
      {
        id: 0,
        jobId: 'j1',
        attemptNo: 1,
        fingerprint: 'fp',
        kind: 'dispatched',
        fromState: null,
        toState: null,
        actor: 'w1',
        detail: null,
        at: 120,
      },
      {
        id: 0,
        jobId: 'j1',
        attemptNo: 1,
        fingerprint: 'fp',
        kind: 'attempt-succeeded',
        fromState: 'LEASED',
        toState: 'SUCCEEDED',
        actor: 'w1',
        detail: { attemptState: 'SUCCEEDED', reason: 'why', error: { name: 'E', message: 'm' } },
        at: 130,
      },
    ]);
    expect(eventChainProblem('SUCCEEDED', d.events)).toBeNull();
  });

  it("a dispatch a restore presumed is the restore's event, never a step by the old worker", () => {
    const d = detailFromRows(
      jobRow({ enqueue_actor: 'producer', state: 'UNKNOWN' }),
      [
        attemptRow({
          lease_ms: 1000,
          owner_id: 'host-a/2',
          state: 'UNKNOWN',
          dispatched_at: 5000,
          finished_at: 5000,
          reason: RESTORE_PRESUMED_REASON,
        }),
      ],
      [
        ev({
          attempt_no: 1,
          kind: 'attempt-unknown',
          from_state: 'LEASED',
          to_state: 'UNKNOWN',
          actor: 'restore',
          detail_json: '{"presumedDispatch":true}',
          at: 5000,
        }),
      ],
    );
    expect(d.events.map((e) => [e.kind, e.actor, e.at])).toEqual([
      ['enqueued', 'producer', 100],
      ['leased', 'host-a/2', 110],
      ['attempt-unknown', 'restore', 5000],
    ]);
  });

  it('exceptional events interleave with routine steps in order, ties included', () => {
    // Attempt 1 expires after its marker (UNKNOWN), a lookup requeues the job, attempt 2 is
    // leased in the same millisecond and succeeds; a duplicate enqueue lands at the lease.
    const stored = [
      ev({
        kind: 'attempt-unknown',
        attempt_no: 1,
        from_state: 'LEASED',
        to_state: 'UNKNOWN',
        at: 200,
      }),
      ev({ kind: 'reconciled', attempt_no: 1, from_state: 'UNKNOWN', to_state: 'QUEUED', at: 300 }),
      ev({ kind: 'enqueue-deduplicated', at: 300 }),
      ev({ kind: 'late-evidence', attempt_no: 1, at: 400 }),
    ];
    const d = detailFromRows(
      jobRow({ enqueue_actor: 'p', attempt_count: 2 }),
      [
        attemptRow({ state: 'UNKNOWN', lease_ms: 50, finished_at: 200, ended_job: null }),
        attemptRow({
          attempt_no: 2,
          lease_ms: 50,
          leased_at: 300,
          dispatched_at: 310,
          finished_at: 320,
          ended_job: 'SUCCEEDED',
        }),
      ],
      stored,
    );
    expect(d.events.map((e) => `${e.kind}#${e.attemptNo ?? '-'}`)).toEqual([
      'enqueued#-',
      'leased#1',
      'dispatched#1',
      'attempt-unknown#1',
      'reconciled#1',
      'enqueue-deduplicated#-',
      'leased#2',
      'dispatched#2',
      'attempt-succeeded#2',
      'late-evidence#1',
    ]);
    expect(eventChainProblem('SUCCEEDED', d.events)).toBeNull();
  });

  it('clocks of different processes disagree: the state chain orders what their times cannot', () => {
    // The approver's clock runs 40 ms ahead of the claiming worker's.
    const stored = [
      ev({ kind: 'enqueued', to_state: 'AWAITING_APPROVAL', at: 100 }),
      ev({ kind: 'approved', from_state: 'AWAITING_APPROVAL', to_state: 'QUEUED', at: 150 }),
    ];
    const d = detailFromRows(
      jobRow(),
      [
        attemptRow({
          lease_ms: 10,
          leased_at: 120,
          dispatched_at: 125,
          finished_at: 130,
          ended_job: 'SUCCEEDED',
        }),
      ],
      stored,
    );
    expect(d.events.map((e) => e.kind)).toEqual([
      'enqueued',
      'approved',
      'leased',
      'dispatched',
      'attempt-succeeded',
    ]);
    expect(eventChainProblem('SUCCEEDED', d.events)).toBeNull();
  });

  it('an attempt leased before migration 11 keeps its stored events; its outcome may be a column', () => {
    const stored = [
      ev({ kind: 'enqueued', to_state: 'QUEUED', at: 100 }),
      ev({ kind: 'leased', attempt_no: 1, from_state: 'QUEUED', to_state: 'LEASED', at: 110 }),
      ev({ kind: 'dispatched', attempt_no: 1, at: 120 }),
    ];
    const d = detailFromRows(
      jobRow(),
      [attemptRow({ lease_ms: null, ended_job: 'SUCCEEDED' })],
      stored,
    );
    expect(d.events.map((e) => e.kind)).toEqual([
      'enqueued',
      'leased',
      'dispatched',
      'attempt-succeeded',
    ]);
    expect(eventChainProblem('SUCCEEDED', d.events)).toBeNull();
  });
});
