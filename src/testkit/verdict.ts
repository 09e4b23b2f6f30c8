/**
 * The verdict of a reliability run, judged by the business outcome at the downstream (DESIGN §7):
 * each effect at most once; exactly once for every SUCCEEDED job; none for a job that failed or
 * never dispatched; the rest in NEEDS_REVIEW with evidence; no attempt and no effect for a job
 * never approved (awaiting, denied or expired); and nothing lost.
 */
import { JOB_STATES, type JobState } from '../core/states.js';
import type { Queue } from '../runtime/queue.js';
import type { AttemptRecord, EventRecord, JobDetail, JobRecord } from '../store/store.js';

export interface EffectLedger {
  effectsOf(key: string): number;
  /** Every key the downstream committed an effect for, when it can tell (the test kit's can). */
  effectKeys?(): Iterable<string>;
}

/** What kind of promise a finding says was broken. */
export type ViolationKind =
  | 'duplicate'
  | 'effect-without-marker'
  | 'succeeded-without-one-effect'
  | 'effect-after-failure'
  | 'review-without-evidence'
  | 'unknown-without-marker'
  | 'not-sent-with-marker'
  | 'request-key-changed'
  | 'effect-under-unknown-key'
  | 'broken-event-chain'
  | 'attempt-left-leased'
  | 'unapproved-attempt'
  | 'lost';

/** One broken promise, with the job and request key it concerns. */
export interface Violation {
  kind: ViolationKind;
  jobId: string;
  requestKey: string;
  /** null for an effect under a key no job has. */
  state: JobState | null;
  effects: number;
  message: string;
}

export interface Verdict {
  jobs: number;
  byState: Record<JobState, number>;
  /** Jobs still QUEUED, LEASED or UNKNOWN: lost, if the run is over. */
  unsettled: { jobId: string; state: JobState }[];
  /** Request keys whose effect happened more than once. */
  duplicates: { key: string; effects: number }[];
  /** Every broken promise, one line each; empty when the run kept every promise. */
  violations: string[];
  /** The same, structured (jobs still unsettled are not in here: see `unsettled`). */
  findings: Violation[];
  /** How UNKNOWN attempts were settled, by resolution source. */
  resolvedBy: { lookup: number; lateWorker: number; sameKey: number; operator: number };
  /** `late-evidence` events: fenced workers' reports kept as evidence. */
  lateEvidence: number;
  /** Attempts that ended FAILED_BEFORE_SEND because their lease expired before dispatch. */
  expiredBeforeDispatch: number;
  /** Jobs that took more than one attempt. */
  retriedJobs: number;
}

const SETTLED: readonly JobState[] = [
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
  'NEEDS_REVIEW',
  'AWAITING_APPROVAL',
];

/** Every job of the queue (up to 10 000), or the given ones, with attempts and events. */
export async function jobDetails(q: Queue, jobIds?: string[]): Promise<JobDetail[]> {
  const ids = jobIds ?? (await q.jobs({ limit: 10_000 })).map((j) => j.id);
  const details = await Promise.all(ids.map((id) => q.job(id)));
  return details.map((d, i) => {
    if (!d) throw new Error(`job ${ids[i]} is missing from the journal: a lost delivery`);
    return d;
  });
}

export interface JudgeOptions {
  /**
   * The details are every job of the run: an effect under a key none of them has is then a
   * request sent with a key the journal does not know (invariant 6). Off for a subset of jobs.
   */
  complete?: boolean;
}

export function judgeDetails(
  details: JobDetail[],
  ledger: EffectLedger,
  options: JudgeOptions = {},
): Verdict {
  const byState = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
  const v: Verdict = {
    jobs: details.length,
    byState,
    unsettled: [],
    duplicates: [],
    violations: [],
    findings: [],
    resolvedBy: { lookup: 0, lateWorker: 0, sameKey: 0, operator: 0 },
    lateEvidence: 0,
    expiredBeforeDispatch: 0,
    retriedJobs: 0,
  };
  for (const { job, attempts, events } of details) {
    byState[job.state]++;
    const effects = ledger.effectsOf(job.requestKey);
    const where = `job ${job.id} (key ${job.requestKey}, ${job.state}, ${attempts.length} attempts, ${effects} effects)`;
    const flag = (kind: ViolationKind, what: string): void => {
      v.violations.push(`${where}: ${what}`);
      v.findings.push({
        kind,
        jobId: job.id,
        requestKey: job.requestKey,
        state: job.state,
        effects,
        message: what,
      });
    };
    if (effects > 1) {
      v.duplicates.push({ key: job.requestKey, effects });
      flag('duplicate', `effect committed ${effects} times`);
    }
    if (!SETTLED.includes(job.state)) v.unsettled.push({ jobId: job.id, state: job.state });
    if (attempts.length > 1) v.retriedJobs++;
    for (const a of attempts) {
      const src = a.resolutionSource ?? '';
      if (src === 'lookup') v.resolvedBy.lookup++;
      else if (src === 'late-worker') v.resolvedBy.lateWorker++;
      else if (src === 'same-key-retry') v.resolvedBy.sameKey++;
      else if (src.startsWith('operator:')) v.resolvedBy.operator++;
      if (a.reason === 'lease-expired-before-dispatch') v.expiredBeforeDispatch++;
    }
    v.lateEvidence += events.filter((e) => e.kind === 'late-evidence').length;
    // A restore sends an approval in doubt to review: the old host may have approved it and
    // written its marker after the backup. The reviewer's resolution is then the evidence.
    const restoredApproval = events.some((e) => e.kind === 'restored-approval-in-doubt');
    const dispatched = attempts.some((a) => a.dispatchedAt !== null) || restoredApproval;
    if (!dispatched && effects > 0)
      flag('effect-without-marker', 'an effect without any dispatch marker (invariant 3)');
    if (job.state === 'SUCCEEDED' && effects !== 1)
      flag('succeeded-without-one-effect', `SUCCEEDED but the downstream has ${effects} effects`);
    if ((job.state === 'FAILED' || job.state === 'CANCELLED') && effects !== 0)
      flag('effect-after-failure', `${job.state} but the downstream committed the effect`);
    const awaited = events.some((e) => e.kind === 'enqueued' && e.toState === 'AWAITING_APPROVAL');
    const decided = events.some((e) => e.kind === 'approved') || restoredApproval;
    if (awaited && !decided && (attempts.length || effects))
      flag('unapproved-attempt', 'never approved, yet it has an attempt or an effect');
    if (job.state === 'NEEDS_REVIEW') {
      const unknown = attempts.some((a) => a.state === 'UNKNOWN') || restoredApproval;
      const reviewEvent = events.some((e) => e.toState === 'NEEDS_REVIEW');
      if (!unknown || !reviewEvent)
        flag(
          'review-without-evidence',
          'NEEDS_REVIEW without an UNKNOWN attempt and its review event',
        );
    }
    for (const [kind, what] of attemptProblems(job, attempts)) flag(kind, what);
    const chain = eventChainProblem(job.state, events);
    if (chain) flag('broken-event-chain', `${chain} (invariant 8)`);
  }
  if (options.complete) flagUnknownKeys(v, details, ledger);
  return v;
}

/** What is wrong with a job's attempts, each as a finding's kind and message. */
function attemptProblems(job: JobRecord, attempts: AttemptRecord[]): [ViolationKind, string][] {
  const out: [ViolationKind, string][] = [];
  for (const a of attempts) {
    if (a.requestKey !== job.requestKey)
      out.push([
        'request-key-changed',
        `attempt ${a.attemptNo} carries request key ${a.requestKey}, not its job's (invariant 6)`,
      ]);
    // One owner: an attempt is LEASED only as the job's latest, with the job LEASED.
    if (a.state === 'LEASED' && (job.state !== 'LEASED' || a.attemptNo !== job.attemptCount))
      out.push([
        'attempt-left-leased',
        `attempt ${a.attemptNo} still LEASED while its job is ${job.state} at attempt ${job.attemptCount}: the job moved on without its owner's end`,
      ]);
    if (a.state === 'UNKNOWN' && a.dispatchedAt === null)
      out.push([
        'unknown-without-marker',
        `attempt ${a.attemptNo} UNKNOWN without a dispatch marker`,
      ]);
    if (a.reason === 'lease-expired-before-dispatch' && a.dispatchedAt !== null)
      out.push([
        'not-sent-with-marker',
        `attempt ${a.attemptNo} called not-sent despite its marker`,
      ]);
  }
  return out;
}

/** Effects under keys none of the (complete) jobs has: requests the journal does not know. */
function flagUnknownKeys(v: Verdict, details: JobDetail[], ledger: EffectLedger): void {
  if (!ledger.effectKeys) return;
  const known = new Set(details.map((d) => d.job.requestKey));
  for (const key of ledger.effectKeys()) {
    if (known.has(key)) continue;
    const effects = ledger.effectsOf(key);
    v.violations.push(
      `key ${key} (${effects} effects): an effect under a request key no job has: a request left with a key the journal does not know (invariant 6)`,
    );
    v.findings.push({
      kind: 'effect-under-unknown-key',
      jobId: '',
      requestKey: key,
      state: null,
      effects,
      message: 'an effect under a request key no job has (invariant 6)',
    });
  }
}

/**
 * Invariant 8 on one job's events, in the order they were appended. The events that change
 * state are those with a to-state (enqueued, leased, an attempt's end, reclaimed, reconciled,
 * resolved, cancelled, ...); the others (dispatched, enqueue-deduplicated, late-evidence,
 * callback-error) record facts and have neither state. The first state-changing event starts
 * from no state; each next one starts from the previous one's to-state; the last one's
 * to-state is the job's state. Returns what is wrong, or null.
 */
export function eventChainProblem(
  jobState: JobState,
  events: readonly Pick<EventRecord, 'id' | 'kind' | 'fromState' | 'toState'>[],
): string | null {
  let state: string | null = null;
  let changes = 0;
  for (const e of events) {
    if (e.toState === null) {
      if (e.fromState !== null)
        return `event ${e.id} (${e.kind}) leaves ${e.fromState} for no state`;
      continue;
    }
    if (e.fromState !== state)
      return changes === 0
        ? `the first state-changing event ${e.id} (${e.kind}) starts from ${e.fromState}, not from nothing`
        : `event ${e.id} (${e.kind}) starts from ${e.fromState ?? 'no state'}, but the job was ${state ?? 'in no state'}`;
    state = e.toState;
    changes++;
  }
  if (changes === 0) return 'no event records how the job got its state';
  if (state !== jobState) return `the last event leaves the job ${state}, but it is ${jobState}`;
  return null;
}

export async function judge(q: Queue, ledger: EffectLedger, jobIds?: string[]): Promise<Verdict> {
  return judgeDetails(await jobDetails(q, jobIds), ledger, { complete: jobIds === undefined });
}

/** No job left QUEUED, LEASED or UNKNOWN. */
export async function isSettled(q: Queue): Promise<boolean> {
  const stats = await q.store.statsGet();
  return stats.queues.every((s) => s.counts.QUEUED + s.counts.LEASED + s.counts.UNKNOWN === 0);
}

/** Polls the store until every job is settled; throws after `timeoutMs`. */
export async function waitUntilSettled(
  q: Queue,
  options: { timeoutMs?: number; intervalMs?: number; onPoll?: () => void } = {},
): Promise<void> {
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  for (;;) {
    options.onPoll?.();
    if (await isSettled(q)) return;
    if (Date.now() > deadline) {
      const stats = await q.store.statsGet();
      throw new Error(
        `jobs did not settle within ${options.timeoutMs ?? 30_000} ms: ${JSON.stringify(stats.queues.map((s) => s.counts))}`,
      );
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 50));
  }
}
