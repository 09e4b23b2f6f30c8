/**
 * AWAITING_APPROVAL: jobs of an operation defined with `approval` wait for a person before any
 * worker may claim them. Approved, the job is QUEUED and runs as any other; denied, or not
 * decided within the operation's `approvalTimeoutMs`, it ends CANCELLED with the decision as
 * its error and no attempt. Each decision is an event with its actor, note and the store's time.
 */
import { InvalidInput, JobNotFound, JobStateConflict, type ErrorInfo } from '../core/errors.js';
import { assertJobTransition } from '../core/states.js';
import type { EventEmitter } from 'node:events';
import type { Logger } from '../core/operation.js';
import type { JobRecord, Store } from '../store/store.js';
import { traced } from './tracing.js';

/** An awaiting job as the approver sees it: the job (with its input and reason), its age and expiry. */
export type ApprovalRequest = JobRecord & {
  /** How long it has waited, on the store's clock. */
  ageMs: number;
  /** How long until it expires (0 when due to expire); null: never. */
  expiresInMs: number | null;
};

export interface DecideOptions {
  approve: boolean;
  /** Who decided; kept as `operator:<actor>`. */
  actor: string;
  note?: string;
}

/** How many expired approvals one pass cancels: a short write, repeated while there are more. */
export const APPROVAL_EXPIRE_BATCH_MAX = 100;
const NOTE_LENGTH_MAX = 10_000;

/** What approvals need of the queue (`Queue` passes itself), so this module does not import it. */
export interface ApprovalsHost {
  readonly store: Store;
  readonly log: Logger;
  /** Emits 'enqueued' (operation name) when an approval makes a job due. */
  readonly notifier: EventEmitter;
}

export class Approvals {
  constructor(private readonly queue: ApprovalsHost) {}

  /** Jobs awaiting approval, oldest first. */
  async list(options: { operation?: string; limit?: number } = {}): Promise<ApprovalRequest[]> {
    const limit = options.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
      throw new InvalidInput('limit must be an integer from 1 to 10000');
    if (options.operation !== undefined && typeof options.operation !== 'string')
      throw new InvalidInput('operation must be a string');
    const { store } = this.queue;
    const [jobs, now] = await Promise.all([
      store.jobApprovalList({ operation: options.operation, limit }),
      store.clockNow(),
    ]);
    return jobs.map((job) => ({
      ...job,
      ageMs: Math.max(0, now - job.createdAt),
      expiresInMs: job.approvalExpiresAt === null ? null : Math.max(0, job.approvalExpiresAt - now),
    }));
  }

  /**
   * Approves (the job is QUEUED for the workers) or denies (it ends CANCELLED) a job awaiting
   * approval; returns the job as decided. Of two deciders at once, one wins and the other gets
   * JobStateConflict, as does a decision on a job that is not (or no longer) awaiting one.
   */
  async decide(jobId: string, options: DecideOptions): Promise<JobRecord> {
    return traced(
      'reckon.decision approval',
      'internal',
      {
        'reckon.job_id': String(jobId),
        'reckon.decision': options?.approve === true ? 'approve' : 'deny',
      },
      () => this.decideJob(jobId, options),
    );
  }

  private async decideJob(jobId: string, options: DecideOptions): Promise<JobRecord> {
    if (typeof jobId !== 'string' || jobId.length === 0)
      throw new InvalidInput('job id must be a non-empty string');
    if (typeof options?.approve !== 'boolean')
      throw new InvalidInput('decide needs approve: true or false');
    if (typeof options.actor !== 'string' || options.actor.trim() === '')
      throw new InvalidInput('decide needs an actor: who made this decision');
    const note = options.note ?? '';
    if (typeof note !== 'string' || note.length > NOTE_LENGTH_MAX)
      throw new InvalidInput(`note must be a string of at most ${NOTE_LENGTH_MAX} characters`);
    const approve = options.approve;
    const actor = `operator:${options.actor.trim()}`;
    const to = approve ? 'QUEUED' : 'CANCELLED';
    assertJobTransition('AWAITING_APPROVAL', to);
    const error: ErrorInfo | null = approve
      ? null
      : {
          name: 'ApprovalDenied',
          message: note ? `denied by ${actor}: ${note}` : `denied by ${actor}`,
          details: { actor, note },
        };
    const r = await this.queue.store.jobApprovalDecide({
      jobId,
      to,
      kind: approve ? 'approved' : 'denied',
      actor,
      detail: { approve, note },
      error,
    });
    if (!r.ok) {
      if (!r.job) throw new JobNotFound(jobId);
      throw new JobStateConflict(
        `job ${jobId} is ${r.job.state}, not AWAITING_APPROVAL: its approval was already decided, or it never needed one`,
        r.job.state,
      );
    }
    const job = r.job;
    this.queue.log.info(
      {
        jobId,
        attemptNo: job.attemptCount,
        fingerprint: job.fingerprint,
        operation: job.operation,
        state: job.state,
        actor,
      },
      approve ? 'approval granted' : 'approval denied',
    );
    if (approve) this.queue.notifier.emit('enqueued', job.operation);
    return job;
  }

  /** `q.cancel` of a job awaiting approval: CANCELLED as by a denial, with a `cancelled` event. */
  async cancel(jobId: string, actor: string, reason: string): Promise<JobRecord> {
    assertJobTransition('AWAITING_APPROVAL', 'CANCELLED');
    const r = await this.queue.store.jobApprovalDecide({
      jobId,
      to: 'CANCELLED',
      kind: 'cancelled',
      actor,
      detail: { reason },
      error: { name: 'Cancelled', message: reason },
    });
    if (!r.ok) {
      if (!r.job) throw new JobNotFound(jobId);
      throw new JobStateConflict(`job ${jobId} changed while it was being cancelled`, r.job.state);
    }
    return r.job;
  }

  /**
   * One pass of expiry: cancels jobs whose approval timed out (store clock), in batches.
   * Returns true when there may be more at once. Safe to run in many processes at once.
   */
  async expireOnce(actor = `approvals:${process.pid}`): Promise<boolean> {
    assertJobTransition('AWAITING_APPROVAL', 'CANCELLED');
    const expired = await this.queue.store.jobApprovalExpireMany({
      limit: APPROVAL_EXPIRE_BATCH_MAX,
      actor,
      error: {
        name: 'ApprovalExpired',
        message: 'no approval decision before the approval timed out',
      },
    });
    for (const job of expired)
      this.queue.log.warn(
        {
          jobId: job.id,
          attemptNo: 0,
          fingerprint: job.fingerprint,
          operation: job.operation,
          state: job.state,
        },
        'approval expired: job cancelled',
      );
    return expired.length === APPROVAL_EXPIRE_BATCH_MAX;
  }
}
