/**
 * reckon's approval as the one that counts. A framework's own approval lives in the agent's
 * memory or serialized run state; reckon's is a durable fact of the journal, decided in
 * `reckon approvals`, the dashboard or `q.approvals.decide()`. So an adapter asks reckon, by
 * writing the job (`AWAITING_APPROVAL`) when the framework asks whether the call needs
 * approval, and answers the framework's approval request with reckon's decision.
 */
import { approvalOf, type AnyOperation } from '../core/operation.js';
import type { AgentQueue } from './outcome.js';

export interface Decision {
  approved: boolean;
  /** `approved`, or the denial as reckon recorded it: `denied by operator:<actor>: <note>`. */
  reason: string;
  jobId: string;
}

export interface DecisionWait {
  /** How long to wait for a person's decision; 0 looks once. Default 0. */
  timeoutMs?: number;
  /** How often to look while waiting. Default 500. */
  pollMs?: number;
  signal?: AbortSignal;
}

/**
 * For an input that needs approval, writes (or finds: the same key and input attach) the tool
 * call's job, so the request shows in reckon's approval queue at once; for one that needs none,
 * writes nothing (the job is written by `execute`, and only if the framework runs it: a QUEUED
 * job written here would run even if the step were aborted before `execute`). `true` when the
 * operation asks approval for this input,
 * whether or not reckon has decided yet: the framework then asks for the decision, which
 * `reckonDecision` gives (at once when already made). Frameworks that check `needsApproval`
 * again before running an approved call (the AI SDK does) must keep getting `true`, or they
 * would turn the approval into a denial while reckon runs the job.
 */
export async function needsReckonApproval(p: {
  q: AgentQueue;
  op: AnyOperation;
  input: unknown;
  runId: string;
  stepId: string;
}): Promise<boolean> {
  try {
    const needed = approvalOf(p.op, p.op.parseInput ? p.op.parseInput(p.input) : p.input) !== null;
    if (needed) await p.q.enqueue(p.op, p.input, { runId: p.runId, stepId: p.stepId });
    return needed;
  } catch {
    // A bad input: `execute` enqueues again and hands the typed error to the model.
    return false;
  }
}

/** reckon's decision on a tool call's job; `undefined` while it still awaits one after the wait. */
export async function reckonDecision(
  p: { q: AgentQueue; op: AnyOperation; input: unknown; runId: string; stepId: string },
  wait: DecisionWait = {},
): Promise<Decision | undefined> {
  const job = await p.q.enqueue(p.op, p.input, { runId: p.runId, stepId: p.stepId });
  const deadline = Date.now() + (wait.timeoutMs ?? 0);
  const pollMs = wait.pollMs ?? 500;
  for (;;) {
    const detail = await p.q.job(job.id);
    const state = detail?.job.state ?? 'CANCELLED';
    if (state !== 'AWAITING_APPROVAL') {
      if (state !== 'CANCELLED') return { approved: true, reason: 'approved', jobId: job.id };
      const error = detail?.job.error;
      return { approved: false, reason: error?.message || 'denied', jobId: job.id };
    }
    if (Date.now() >= deadline || wait.signal?.aborted) return undefined;
    await new Promise((resolve) => setTimeout(resolve, Math.min(pollMs, deadline - Date.now())));
  }
}
