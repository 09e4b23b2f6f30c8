/**
 * AWAITING_APPROVAL: jobs of an operation defined with `approval` wait for a person before any
 * worker may claim them. Approved, the job is QUEUED and runs as any other; denied, or not
 * decided within the operation's `approvalTimeoutMs`, it ends CANCELLED with the decision as
 * its error and no attempt. Each decision is an event with its actor, note and the store's time.
 */
import {
  ApprovalExpired,
  ApprovalInputChanged,
  InvalidInput,
  JobNotFound,
  JobStateConflict,
  errorMessage,
  type ErrorInfo,
} from '../core/errors.js';
import { fingerprintOf } from '../core/json.js';
import { assertJobTransition } from '../core/states.js';
import type { EventEmitter } from 'node:events';
import type { Logger } from '../core/operation.js';
import type { JobRecord, Store } from '../store/store.js';
import { deciderOf, type DecisionBy } from './decision-by.js';
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
  /** Who decided; kept as `operator:<actor>`. Not needed with `by`. */
  actor?: string;
  /** Who decided and how they were identified, kept in the event's detail (wins over `actor`). */
  by?: DecisionBy;
  note?: string;
  /**
   * The hash of the input the person was shown (`inputHashOf(job.input)`): when given, a job
   * whose input does not hash to it is not decided (ApprovalInputChanged).
   */
  inputHash?: string;
}

/** The hash an approval is bound to: SHA-256 of the input's canonical JSON, hex. */
export function inputHashOf(input: unknown): string {
  return fingerprintOf(input, 'input');
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

  /**
   * Jobs awaiting a decision, oldest first. Approvals whose time ran out (store clock) are
   * expired first, so none is shown as decidable whether or not a worker runs: they end
   * CANCELLED (`approval-expired`), as a worker's expiry pass would have done.
   */
  async list(options: { operation?: string; limit?: number } = {}): Promise<ApprovalRequest[]> {
    const limit = options.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
      throw new InvalidInput('limit must be an integer from 1 to 10000');
    if (options.operation !== undefined && typeof options.operation !== 'string')
      throw new InvalidInput('operation must be a string');
    const { store } = this.queue;
    try {
      while (await this.expireOnce(`approvals-list:${process.pid}`));
    } catch (err) {
      // A store that cannot write now (read-only, busy) still lists; expired ones are left out.
      this.queue.log.warn({ err: errorMessage(err) }, 'expiring approvals before the list failed');
    }
    const [jobs, now] = await Promise.all([
      store.jobApprovalList({ operation: options.operation, limit }),
      store.clockNow(),
    ]);
    return jobs
      .filter((job) => job.approvalExpiresAt === null || job.approvalExpiresAt > now)
      .map((job) => ({
        ...job,
        ageMs: Math.max(0, now - job.createdAt),
        expiresInMs: job.approvalExpiresAt === null ? null : job.approvalExpiresAt - now,
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
    const { actor, by } = deciderOf(options, 'decide');
    const note = options.note ?? '';
    if (typeof note !== 'string' || note.length > NOTE_LENGTH_MAX)
      throw new InvalidInput(`note must be a string of at most ${NOTE_LENGTH_MAX} characters`);
    if (options.inputHash !== undefined) await this.checkInputHash(jobId, options.inputHash);
    const approve = options.approve;
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
      detail: { approve, note, ...(by ? { by } : {}) },
      error,
    });
    if (!r.ok) {
      if (!r.job) throw new JobNotFound(jobId);
      if (r.expired) {
        this.expiredLog(r.job);
        throw new ApprovalExpired(jobId);
      }
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

  /**
   * A job's input is written once, at enqueue, so a read before the decision's conditional write
   * sees what the decision applies to; a mismatch is a stale or forged form, or a journal edited
   * by hand.
   */
  private async checkInputHash(jobId: string, inputHash: string): Promise<void> {
    if (typeof inputHash !== 'string' || !/^[0-9a-f]{64}$/.test(inputHash))
      throw new InvalidInput('inputHash must be 64 lowercase hex digits (SHA-256)');
    const detail = await this.queue.store.jobGet({ id: jobId });
    if (!detail) throw new JobNotFound(jobId);
    if (inputHashOf(detail.job.input) !== inputHash) throw new ApprovalInputChanged(jobId);
  }

  /** `q.cancel` of a job awaiting approval: CANCELLED as by a denial, with a `cancelled` event. */
  async cancel(jobId: string, actor: string, reason: string, by?: DecisionBy): Promise<JobRecord> {
    assertJobTransition('AWAITING_APPROVAL', 'CANCELLED');
    const r = await this.queue.store.jobApprovalDecide({
      jobId,
      to: 'CANCELLED',
      kind: 'cancelled',
      actor,
      detail: { reason, ...(by ? { by } : {}) },
      error: { name: 'Cancelled', message: reason },
    });
    if (!r.ok) {
      if (!r.job) throw new JobNotFound(jobId);
      // Its approval had timed out: it is CANCELLED all the same, as expired.
      if (r.expired) return r.job;
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
    });
    for (const job of expired) this.expiredLog(job);
    return expired.length === APPROVAL_EXPIRE_BATCH_MAX;
  }

  private expiredLog(job: JobRecord): void {
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
  }
}
