/**
 * What every adapter shares: a tool call made durable by `q.call`, and the answer a model gets
 * back. A pending outcome (UNKNOWN, NEEDS_REVIEW, AWAITING_APPROVAL, or still running when the
 * wait ended) is an answer the model can act on: the job id, the state and "do not retry",
 * never an exception a framework would hand back as an error for the model to retry blindly.
 */
import { z } from 'zod';
import { OutcomePending, type ErrorInfo } from '../core/errors.js';
import type { Json } from '../core/json.js';
import type { AnyOperation } from '../core/operation.js';
import type { CallOutcome } from '../runtime/outcomes.js';
import type { CallOptions } from '../runtime/queue.js';
import type { JobDetail, JobRecord } from '../store/store.js';

/** The part of `Queue` the adapters use, so any queue (or a test double of it) fits. */
export interface AgentQueue {
  call(op: AnyOperation, input: unknown, options: CallOptions): Promise<CallOutcome<unknown>>;
  enqueue(
    op: AnyOperation,
    input: unknown,
    options: { key?: string; runId?: string; stepId?: string },
  ): Promise<JobRecord>;
  job(id: string): Promise<JobDetail | null>;
}

/** What the model is given back for one tool call. */
export type ToolAnswer =
  | { status: 'succeeded'; jobId: string; requestKey: string; result: unknown }
  | {
      status: 'failed' | 'denied';
      jobId: string;
      requestKey: string;
      reason: string;
      instruction: string;
    }
  | {
      status: 'pending';
      jobId: string;
      requestKey: string;
      state: string;
      instruction: string;
      evidence?: unknown;
    };

/** The wait for one tool call's outcome before it answers "pending". */
export const DEFAULT_TOOL_WAIT_MS = 30_000;

const PENDING_INSTRUCTIONS: Record<string, string> = {
  AWAITING_APPROVAL:
    'A person must approve this request before it is carried out. Do not call the tool again for it; tell the user it awaits approval.',
  UNKNOWN:
    'The request may already have been carried out; reckon is finding out from the receiving system. Do not call the tool again for it: that could do it twice. Tell the user it is being confirmed.',
  NEEDS_REVIEW:
    'Whether the request was carried out is not known, and a person must review it. Do not call the tool again for it; tell the user it is under review.',
};
const STILL_RUNNING =
  'The request is accepted and not finished yet. Do not call the tool again for it; its outcome can be read later by its job id.';

/** Calls the operation and turns every outcome, pending ones included, into a `ToolAnswer`. */
export async function callAsTool(p: {
  q: AgentQueue;
  op: AnyOperation;
  input: unknown;
  key: { key: string } | { runId: string; stepId: string };
  waitMs?: number;
  signal?: AbortSignal;
}): Promise<ToolAnswer> {
  const requestKey = 'key' in p.key ? p.key.key : `${p.key.runId}:${p.key.stepId}`;
  try {
    const out = await p.q.call(p.op, p.input, {
      ...p.key,
      timeoutMs: p.waitMs ?? DEFAULT_TOOL_WAIT_MS,
      ...(p.signal ? { signal: p.signal } : {}),
    });
    return answerOf(out, requestKey);
  } catch (err) {
    const pending = asPending(err);
    if (!pending) throw err;
    return pendingAnswer(pending, requestKey);
  }
}

export function answerOf(out: CallOutcome<unknown>, requestKey: string): ToolAnswer {
  if (out.state === 'SUCCEEDED')
    return { status: 'succeeded', jobId: out.jobId, requestKey, result: out.result };
  const reason = reasonOf(out.error);
  if (out.state === 'CANCELLED')
    return {
      status: 'denied',
      jobId: out.jobId,
      requestKey,
      reason,
      instruction:
        'The request was not carried out: it was denied or cancelled. Do not call the tool again for it; tell the user why.',
    };
  return {
    status: 'failed',
    jobId: out.jobId,
    requestKey,
    reason,
    instruction:
      'The request definitively failed and was not carried out. Calling again for the same request returns this same answer.',
  };
}

interface Pending {
  jobId: string;
  state: string;
  evidence?: unknown;
}

/**
 * `OutcomePending`, by class or by code: a queue made by another copy of reckon (two installs,
 * or source and build side by side) throws its own class.
 */
function asPending(err: unknown): Pending | undefined {
  if (err instanceof OutcomePending)
    return { jobId: err.jobId, state: err.state, evidence: err.evidence };
  const e = err as { code?: unknown; jobId?: unknown; state?: unknown; evidence?: unknown } | null;
  if (e?.code !== 'OUTCOME_PENDING' || typeof e.jobId !== 'string') return undefined;
  return { jobId: e.jobId, state: String(e.state), evidence: e.evidence };
}

export function pendingAnswer(p: Pending, requestKey: string): ToolAnswer {
  return {
    status: 'pending',
    jobId: p.jobId,
    requestKey,
    state: p.state,
    instruction: PENDING_INSTRUCTIONS[p.state] ?? STILL_RUNNING,
    ...(p.evidence !== undefined && p.evidence !== null ? { evidence: p.evidence } : {}),
  };
}

function reasonOf(error: unknown): string {
  if (typeof error === 'string') return error;
  if (typeof error === 'object' && error !== null) {
    const info = error as Partial<ErrorInfo> & { note?: unknown };
    if (typeof info.message === 'string' && info.message) return info.message;
    if (typeof info.note === 'string' && info.note) return info.note;
  }
  return 'no reason given';
}

/** The operation's input as a JSON Schema object: from its zod schema, else any object. */
export function inputJsonSchema(op: AnyOperation): Record<string, Json> {
  const schema = op.spec.input as z.ZodType | undefined;
  if (!schema) return { type: 'object', additionalProperties: true };
  const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<
    string,
    Json
  >;
  delete json.$schema;
  if (json.type !== 'object')
    throw new TypeError(
      `operation ${op.name}: a tool's input must be an object schema (z.object), got ${JSON.stringify(json.type)}`,
    );
  return json;
}

/** The description a tool shows the model. */
export function describe(op: AnyOperation, given?: string): string {
  return given ?? op.spec.description ?? `Run the reckon operation ${op.name}.`;
}

/** Is an approval asked for this operation (the `approval` option of issue #23)? */
export function mayNeedApproval(op: AnyOperation): boolean {
  const approval = (op.spec as { approval?: unknown }).approval;
  return approval !== undefined && approval !== false;
}
