/**
 * The SQLite enqueue: each job inserted, or (its request key known) judged by the plan: the
 * existing job answers (a recorded dedup), or RequestKeyConflict rolls the whole batch back.
 */
import type Database from 'better-sqlite3';
import { InvalidInput } from '../../core/errors.js';
import { dedupEvent, planDedup, type EventWrite } from '../plan/index.js';
import {
  approvalEventDetail,
  approvalExpiresAt,
  jobFromRow,
  newQueuedJob,
  type JobRow,
} from '../rows.js';
import type { JobInsert, JobInsertResult, JobRecord } from '../store.js';
import type { SqliteWriter } from './commit.js';

/** What the enqueue needs of its store. */
export interface InserterHost {
  readonly writer: SqliteWriter;
  now(): number;
  stmt(sql: string): Database.Statement;
  writeEvent(job: Pick<JobRecord, 'id' | 'fingerprint'>, e: EventWrite, at: number): void;
}

export class JobInserter {
  constructor(private readonly h: InserterHost) {}

  insertMany(p: {
    jobs: JobInsert[];
    actor: string;
    transaction?: unknown;
  }): Promise<JobInsertResult[]> {
    if (p.transaction !== undefined)
      return Promise.reject(
        new InvalidInput(
          'enqueue({ transaction }) needs a PostgreSQL store: SQLite cannot join a transaction of yours',
        ),
      );
    return this.h.writer.write(() => {
      const now = this.h.now();
      const insert = this.h.stmt(
        `INSERT INTO jobs (id, queue, operation, input_json, request_key, request_fingerprint, run_id, step_id, state,
           priority, run_at, created_at, updated_at, max_attempts, backoff_json, timeout_ms, reconcile_grace_ms,
           approval_reason, approval_expires_at, rate_key, concurrency_key, trace_parent, enqueue_actor)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (request_key) DO NOTHING`,
      );
      const results: JobInsertResult[] = [];
      // Jobs of one operation share one policy object: serialized once per batch.
      let lastBackoff: unknown = undefined;
      let backoffJson = '';
      for (const j of p.jobs) {
        if (j.backoff !== lastBackoff) {
          lastBackoff = j.backoff;
          backoffJson = JSON.stringify(j.backoff);
        }
        const runAt = j.runAt ?? now + j.delayMs;
        // A known request key inserts nothing (only that conflict is ignored: any other throws).
        const inserted =
          insert.run(
            j.id,
            j.queue,
            j.operation,
            j.inputJson,
            j.requestKey,
            j.fingerprint,
            j.runId,
            j.stepId,
            j.approval ? 'AWAITING_APPROVAL' : 'QUEUED',
            j.priority,
            runAt,
            now,
            now,
            j.maxAttempts,
            backoffJson,
            j.timeoutMs,
            j.reconcileGraceMs,
            j.approval?.reason ?? null,
            approvalExpiresAt(j, now),
            j.rateKey ?? null,
            j.concurrencyKey ?? null,
            j.traceParent ?? null,
            // Who enqueued it: the `enqueued` step of a QUEUED job (invariant 8); one awaiting
            // approval also appends the event, whose detail carries the approval.
            p.actor,
          ).changes === 1;
        if (!inserted) {
          results.push(this.deduped(j, p.actor, now));
          continue;
        }
        this.enqueuedEvent(j, p.actor, now);
        // The record as written, without reading it back.
        results.push({ job: newQueuedJob(j, now, backoffJson), created: true });
      }
      return results;
    });
  }

  /** A known request key: the plan judges it; the existing job answers, with a dedup event. */
  private deduped(j: JobInsert, actor: string, now: number): JobInsertResult {
    const existing = this.h
      .stmt('SELECT * FROM jobs WHERE request_key = ?')
      .get(j.requestKey) as JobRow;
    // A conflict throws, rolling the whole batch back: nothing is written (invariant 9).
    planDedup(
      {
        id: existing.id,
        operation: existing.operation,
        fingerprint: existing.request_fingerprint,
      },
      j,
    );
    const job = jobFromRow(existing);
    this.h.writeEvent(job, dedupEvent(j.requestKey, actor), now);
    return { job, created: false };
  }

  /**
   * The `enqueued` event of a job awaiting approval (with its detail); a QUEUED job's is its
   * `enqueue_actor` column (src/store/trail.ts), and it wakes workers.
   */
  private enqueuedEvent(j: JobInsert, actor: string, now: number): void {
    if (j.approval) {
      // Awaiting a person: nobody to wake yet.
      const detail = approvalEventDetail(j, now);
      this.h.writer.event(
        j.id,
        null,
        j.fingerprint,
        'enqueued',
        null,
        'AWAITING_APPROVAL',
        actor,
        detail,
        now,
      );
    } else {
      this.h.writer.newWork = true;
    }
  }
}
