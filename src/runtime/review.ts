/**
 * NEEDS_REVIEW: jobs no automatic path can settle. A person reads the evidence and decides;
 * the decision, its actor and note are kept in the journal.
 */
import type { Clock } from '../core/clock.js';
import { InvalidInput, JobNotFound, JobStateConflict } from '../core/errors.js';
import type { Logger } from '../core/operation.js';
import type { JobState } from '../core/states.js';
import type { JobDetail, JobRecord, Store } from '../store/store.js';
import type { RuntimeObserver } from './observer.js';

export type ReviewDecision = 'succeeded' | 'failed' | 'retry';

export interface ResolveOptions {
  as: ReviewDecision;
  /** Who decided; kept as `operator:<actor>`. */
  actor: string;
  note?: string;
}

/** What review needs of the queue (`Queue` passes itself), so review does not import it. */
export interface ReviewHost {
  readonly store: Store;
  readonly log: Logger;
  readonly observer: RuntimeObserver;
  readonly clock: Clock;
  jobs(query: { state: JobState; limit: number; operation?: string }): Promise<JobRecord[]>;
}

export class Review {
  constructor(private readonly queue: ReviewHost) {}

  /** NEEDS_REVIEW jobs with their attempts and events, oldest first. */
  async list(options: { limit?: number; operation?: string } = {}): Promise<JobDetail[]> {
    const jobs = await this.queue.jobs({
      state: 'NEEDS_REVIEW',
      limit: options.limit ?? 100,
      operation: options.operation,
    });
    const details = await Promise.all(jobs.map((j) => this.queue.store.jobGet({ id: j.id })));
    return details.filter((d): d is JobDetail => d !== null).reverse();
  }

  /**
   * Records an operator's decision. `retry` runs the job again with the same request key:
   * the operator takes responsibility that the effect did not happen (or that the downstream
   * deduplicates). Also accepted for a job still UNKNOWN.
   */
  async resolve(jobId: string, options: ResolveOptions): Promise<JobRecord> {
    const as = options?.as;
    if (as !== 'succeeded' && as !== 'failed' && as !== 'retry')
      throw new InvalidInput(
        `resolve as must be succeeded, failed or retry, got ${JSON.stringify(as)}`,
      );
    if (typeof options.actor !== 'string' || options.actor.trim() === '')
      throw new InvalidInput('resolve needs an actor: who made this decision');
    const note = options.note ?? '';
    if (typeof note !== 'string' || note.length > 10_000)
      throw new InvalidInput('note must be a string of at most 10000 characters');
    const detail = await this.queue.store.jobGet({ id: jobId });
    if (!detail) throw new JobNotFound(jobId);
    const { job } = detail;
    if (job.state !== 'NEEDS_REVIEW' && job.state !== 'UNKNOWN') {
      throw new JobStateConflict(
        `job ${jobId} is ${job.state}; only NEEDS_REVIEW or UNKNOWN jobs take a review decision`,
        job.state,
      );
    }
    const latest = detail.attempts.at(-1);
    const source = `operator:${options.actor.trim()}`;
    const to = as === 'succeeded' ? 'SUCCEEDED' : as === 'failed' ? 'FAILED' : 'QUEUED';
    const applied = await this.queue.store.jobTransition({
      jobId,
      from: job.state,
      to,
      expectAttemptNo: job.attemptCount,
      ...(latest && latest.state === 'UNKNOWN' && latest.resolution === null
        ? { resolution: { kind: as, source, evidence: { note } } }
        : {}),
      ...(as === 'failed'
        ? { error: { name: 'OperatorDecision', message: note || `marked failed by ${source}` } }
        : {}),
      event: { kind: 'resolved', actor: source, detail: { as, note } },
    });
    if (!applied)
      throw new JobStateConflict(
        `job ${jobId} changed while it was being resolved; read it again and retry`,
        job.state,
      );
    this.queue.log.info(
      {
        jobId,
        attemptNo: job.attemptCount,
        fingerprint: job.fingerprint,
        operation: job.operation,
        state: to,
        actor: source,
      },
      'review decision recorded',
    );
    if (latest && latest.state === 'UNKNOWN' && latest.resolution === null) {
      this.queue.observer.reconciled({
        operation: job.operation,
        path: 'operator',
        resolution: as,
        latencyMs: this.queue.clock.now() - (latest.finishedAt ?? this.queue.clock.now()),
      });
    }
    const after = await this.queue.store.jobGet({ id: jobId });
    return after!.job;
  }
}
