/**
 * What a worker announces about a job ('succeeded', 'failed', 'unknown', 'reconciled',
 * 'review', 'retrying', 'fenced'), emitted after the fact is durable. A leaf module: the worker,
 * reclaimer and reconciler all speak it, and import it from here, not from one another.
 */
import type { ErrorInfo } from '../core/errors.js';

export interface JobEvent {
  jobId: string;
  attemptNo: number;
  operation: string;
  requestKey: string;
  input: unknown;
  result?: unknown;
  error?: ErrorInfo;
  state: string;
  resolution?: string;
}
