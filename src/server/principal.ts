/**
 * Who is asking, and what they may do. The server authenticates a request (a named token, the
 * `--token` of `reckon serve`, or a session cookie signed in with either) and puts its
 * `Principal` on the context: `c.get('principal')`. Every decision records it; nothing a request
 * body says about its author is believed.
 */
import { AuthenticationRequired, NotPermitted } from '../core/errors.js';
import type { JobRecord } from '../store/store.js';

export const ROLES = ['viewer', 'producer', 'approver', 'reviewer', 'admin'] as const;
export type Role = (typeof ROLES)[number];

export function isRole(value: unknown): value is Role {
  return typeof value === 'string' && (ROLES as readonly string[]).includes(value);
}

export interface Principal {
  /** The token's name (`reckon tokens create <name>`); `admin` for the `--token` of serve. */
  name: string;
  role: Role;
  /** The token's id; `serve-token` for `--token`; null for an anonymous reader. */
  tokenId: string | null;
  /** Approver and reviewer: the operations it may decide on; absent: all. */
  operations?: string[];
  /** Extra rights (`inputs`: a viewer sees inputs and results). */
  grants?: string[];
  /** How it authenticated. */
  via: 'bearer' | 'session' | 'anonymous';
}

/** A reader without credentials, where the server allows anonymous reads (no --protect-reads). */
export const ANONYMOUS: Principal = {
  name: 'anonymous',
  role: 'viewer',
  tokenId: null,
  via: 'anonymous',
};

/** What a principal may do. The console hides what a role cannot do; the server refuses it. */
export type Action =
  | 'read' // lists, a job, status
  | 'read-inputs' // inputs and results unredacted
  | 'enqueue' // enqueue, call (producer, admin)
  | 'approve' // approve or deny (approver, admin)
  | 'review' // resolve a NEEDS_REVIEW job (reviewer, admin)
  | 'cancel' // cancel before dispatch (approver, reviewer, admin)
  | 'metrics'
  | 'admin';

const ALLOWED: Record<Role, readonly Action[]> = {
  viewer: ['read', 'metrics'],
  producer: ['enqueue', 'read-inputs'],
  approver: ['read', 'read-inputs', 'approve', 'cancel', 'metrics'],
  reviewer: ['read', 'read-inputs', 'review', 'cancel', 'metrics'],
  admin: ['read', 'read-inputs', 'enqueue', 'approve', 'review', 'cancel', 'metrics', 'admin'],
};

/**
 * May `p` do `action` (on a job of `operation`, when the action concerns one)? A producer reads
 * only its own jobs: the routes check that with `ownsJob`.
 */
export function can(p: Principal, action: Action, operation?: string): boolean {
  if (action === 'read-inputs' && p.role === 'viewer') return p.grants?.includes('inputs') ?? false;
  if (!ALLOWED[p.role].includes(action)) return false;
  if (
    operation !== undefined &&
    p.operations &&
    (action === 'approve' || action === 'review' || action === 'cancel')
  )
    return p.operations.includes(operation);
  return true;
}

/** The actor recorded for what an HTTP principal enqueues: who owns the job, for a producer. */
export function enqueuerOf(p: Principal): string {
  return `http:${p.name}`;
}

/** A job as a principal may see it: input and result replaced unless it may read them. */
export function redactJob<J extends Pick<JobRecord, 'input' | 'result'>>(p: Principal, job: J): J {
  if (can(p, 'read-inputs')) return job;
  return { ...job, input: REDACTED, result: job.result === null ? null : REDACTED };
}

/** What a redacted input or result reads as. */
export const REDACTED = '[redacted: this token may not read inputs]';

/**
 * Throws unless `p` may do `action`: 401 for an anonymous request that needs a token (any
 * write; a read when `protectReads`), 403 for a principal whose role does not allow it.
 */
export function authorize(
  p: Principal,
  action: Action,
  options: { protectReads: boolean; operation?: string },
): void {
  if (p.via === 'anonymous') {
    if ((action === 'read' || action === 'metrics') && !options.protectReads) return;
    throw new AuthenticationRequired(
      action === 'read' || action === 'metrics'
        ? 'this server needs a token to read: send Authorization: Bearer <token>, or sign in'
        : 'sign in, or send Authorization: Bearer <token>: this needs a token (reckon tokens create)',
    );
  }
  if (!can(p, action, options.operation))
    throw new NotPermitted(
      options.operation !== undefined && can(p, action)
        ? `token ${p.name} (${p.role}) may ${action} only jobs of ${p.operations?.join(', ')}, not ${options.operation}`
        : `token ${p.name} is a ${p.role}, which may not ${action}${options.operation ? ` (${options.operation})` : ''}`,
    );
}
