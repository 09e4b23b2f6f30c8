/**
 * One job's trail (invariant 8) as both stores read it back: the events it stored, and its
 * routine steps rebuilt from the write-once columns that record them (migration 11):
 *
 * - `enqueued` (to QUEUED, by `jobs.enqueue_actor`, at `created_at`), unless the job stored its
 *   `enqueued` event (one awaiting approval at enqueue: the event's detail carries the approval);
 * - per attempt with `lease_ms`: `leased` (QUEUED → LEASED, by its owner, at `leased_at`, detail
 *   `{ leaseMs }`) and, once marked, `dispatched` (by its owner, at `dispatched_at`);
 * - per attempt with `ended_job`: its outcome `attempt-<state>` (LEASED → `ended_job`, by its
 *   owner, at `finished_at`, detail `{ attemptState, reason?, error? }`).
 *
 * Each is the event the store would have appended, of the same kind, states, actor, time and
 * detail; its id is 0 (it has no row of its own). Older rows (their columns NULL) keep their
 * stored events, so every job reads as one trail in the order its steps happened.
 */
import type { Json } from '../core/json.js';
import { attemptEventKind } from './plan/finish.js';
import { RESTORE_PRESUMED_REASON } from './plan/restore.js';
import { attemptFromRow, eventFromRow, jobFromRow, toMs } from './rows.js';
import type { AttemptRow, EventRow, JobRow } from './rows.js';
import type { EventRecord, JobDetail } from './store.js';

/** The columns of migration 11 as rows carry them (absent before it, NULL for older rows). */
export interface JobStepColumns {
  enqueue_actor?: string | null;
}
export interface AttemptStepColumns {
  lease_ms?: number | string | null;
  ended_job?: string | null;
}

/** The id of an event rebuilt from its row's columns. */
export const ROUTINE_STEP_ID = 0;

/** A job's detail from its rows: records, and the trail with its routine steps in place. */
export function detailFromRows(
  job: JobRow & JobStepColumns,
  attempts: (AttemptRow & AttemptStepColumns)[],
  events: EventRow[],
): JobDetail {
  const record = jobFromRow(job);
  const stored = events.map(eventFromRow);
  const enqueued = stored.find((e) => e.kind === 'enqueued');
  // A job awaiting approval at enqueue keeps its `enqueued` event (its detail carries the
  // approval) beside its enqueue_actor: the event is its trail's step, the column the fact.
  const steps = routineSteps(job, attempts, enqueued === undefined);
  return {
    job: record,
    attempts: attempts.map((a) => attemptFromRow(a, record)),
    events: mergeTrail(stored, steps),
    enqueuedBy: job.enqueue_actor ?? enqueued?.actor ?? null,
  };
}

/** The routine steps the rows record, in the order they happened. */
export function routineSteps(
  job: JobRow & JobStepColumns,
  attempts: (AttemptRow & AttemptStepColumns)[],
  withEnqueued = true,
): EventRecord[] {
  const fp = job.request_fingerprint;
  const steps: EventRecord[] = [];
  const step = (e: Omit<EventRecord, 'id' | 'jobId' | 'fingerprint'>) =>
    steps.push({ id: ROUTINE_STEP_ID, jobId: job.id, fingerprint: fp, ...e });
  if (withEnqueued && job.enqueue_actor != null) {
    const at = toMs(job.created_at);
    step({
      attemptNo: null,
      kind: 'enqueued',
      fromState: null,
      toState: 'QUEUED',
      actor: job.enqueue_actor,
      detail: null,
      at,
    });
  }
  const sorted = [...attempts].sort((a, b) => Number(a.attempt_no) - Number(b.attempt_no));
  for (const a of sorted) {
    const attemptNo = Number(a.attempt_no);
    const actor = a.owner_id;
    if (a.lease_ms != null) {
      step({
        attemptNo,
        kind: 'leased',
        fromState: 'QUEUED',
        toState: 'LEASED',
        actor,
        detail: { leaseMs: Number(a.lease_ms) },
        at: toMs(a.leased_at),
      });
      // A restore presumes the dispatch of an attempt leased without a marker (its own
      // `attempt-unknown` event, actor `restore`, says so): the worker never recorded one.
      if (a.dispatched_at !== null && a.reason !== RESTORE_PRESUMED_REASON)
        step({
          attemptNo,
          kind: 'dispatched',
          fromState: null,
          toState: null,
          actor,
          detail: null,
          at: toMs(a.dispatched_at),
        });
    }
    if (a.ended_job != null && a.finished_at !== null) {
      const detail: Record<string, Json> = { attemptState: a.state };
      if (a.reason) detail.reason = a.reason;
      if (a.error_json !== null) detail.error = JSON.parse(a.error_json) as Json;
      step({
        attemptNo,
        kind: attemptEventKind(a.state),
        fromState: 'LEASED',
        toState: a.ended_job,
        actor,
        detail,
        at: toMs(a.finished_at),
      });
    }
  }
  return steps;
}

/**
 * Both lists in order (stored by id, routine steps as `routineSteps` gives them), merged. Times
 * alone cannot order them: each step's time is the clock of the process that wrote it, and
 * processes' clocks differ within the skew tolerance. So the state chain decides first: a step
 * that changes the job's state goes next only if it starts from the state the trail has reached,
 * and a stored change of an earlier attempt precedes the routine steps of a later one. Otherwise
 * the earlier time goes first; at the same millisecond the routine step goes first when it is the
 * enqueue, or when the stored event belongs to its attempt or a later one.
 */
export function mergeTrail(stored: EventRecord[], routine: EventRecord[]): EventRecord[] {
  if (routine.length === 0) return stored;
  if (stored.length === 0) return routine;
  const out: EventRecord[] = [];
  let state: string | null = null;
  let i = 0;
  let k = 0;
  while (i < stored.length && k < routine.length) {
    const e: EventRecord = routineFirst(stored[i]!, routine[k]!, state)
      ? routine[k++]!
      : stored[i++]!;
    if (e.toState !== null) state = e.toState;
    out.push(e);
  }
  while (i < stored.length) out.push(stored[i++]!);
  while (k < routine.length) out.push(routine[k++]!);
  return out;
}

function routineFirst(s: EventRecord, r: EventRecord, state: string | null): boolean {
  if (r.kind === 'enqueued') return true;
  const fits = (e: EventRecord) => e.toState === null || e.fromState === state;
  if (fits(r) !== fits(s)) return fits(r);
  if (s.toState !== null && s.attemptNo !== null && s.attemptNo !== r.attemptNo)
    return s.attemptNo > r.attemptNo!;
  return r.at < s.at || (r.at === s.at && s.attemptNo !== null && s.attemptNo >= r.attemptNo!);
}
