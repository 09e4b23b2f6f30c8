/**
 * `reckon/ai`: a reckon operation as a tool of the Vercel AI SDK (version 6).
 *
 *   const tools = { send_email: durableTool(q, sendEmail, { runId }) };
 *   await generateText({ model, tools, messages, stopWhen: stepCountIs(5) });
 *
 * Each tool call is one job, keyed `${runId}:${toolCallId}`: a run replayed with the same run id
 * and messages attaches to the jobs it already made and gets their outcomes, never a second
 * side effect. See docs/agents.md.
 */
import { jsonSchema, tool, type Tool, type ToolApprovalResponse } from 'ai';
import type { AnyOperation, Operation } from '../core/operation.js';
import { needsReckonApproval, reckonDecision, type DecisionWait } from './approval.js';
import {
  callAsTool,
  describe,
  inputJsonSchema,
  mayNeedApproval,
  type AgentQueue,
  type ToolAnswer,
} from './outcome.js';

export type { ToolAnswer, AgentQueue } from './outcome.js';

export interface DurableToolOptions {
  /** The agent run this tool serves. Replaying a run with the same id reuses its request keys. */
  runId: string;
  /** For the model; default: the operation's `description`. */
  description?: string;
  /** How long one call waits for the outcome before answering "pending". Default 30 s. */
  waitMs?: number;
}

const DURABLE = Symbol.for('reckon.durableTool');

interface DurableMeta {
  q: AgentQueue;
  op: AnyOperation;
  runId: string;
}

/**
 * An AI SDK tool whose `execute` calls `q.call(op, input, { runId, stepId: toolCallId })` and
 * gives the model a `ToolAnswer`: the result, the failure, the denial, or "pending" with the
 * job id and state. When the operation asks for approval, `needsApproval` writes the job
 * (AWAITING_APPROVAL) and the run stops with a `tool-approval-request`; answer it with
 * `reckonApprovals()` once a person decided in reckon.
 */
export function durableTool<I, R>(
  q: AgentQueue,
  op: Operation<I, R>,
  options: DurableToolOptions,
): Tool<I, ToolAnswer> {
  const { runId } = options;
  if (typeof runId !== 'string' || runId.length === 0)
    throw new TypeError(
      'durableTool needs a runId: the id of the agent run, stable across replays',
    );
  const any = op as AnyOperation;
  const t = tool<I, ToolAnswer>({
    description: describe(any, options.description),
    inputSchema: jsonSchema<I>(inputJsonSchema(any)),
    execute: (input, { toolCallId, abortSignal }) =>
      callAsTool({
        q,
        op: any,
        input,
        key: { runId, stepId: toolCallId },
        ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}),
        ...(abortSignal ? { signal: abortSignal } : {}),
      }),
    ...(mayNeedApproval(any)
      ? {
          needsApproval: (input: unknown, { toolCallId }: { toolCallId: string }) =>
            needsReckonApproval({ q, op: any, input, runId, stepId: toolCallId }),
        }
      : {}),
  });
  Object.defineProperty(t, DURABLE, { value: { q, op: any, runId } satisfies DurableMeta });
  return t;
}

/** A `tool-approval-request` part of a `generateText` / `streamText` result's content. */
interface ApprovalRequestPart {
  type: 'tool-approval-request';
  approvalId: string;
  toolCall: { toolCallId: string; toolName: string; input: unknown };
}

export interface ReckonApprovals {
  /** Push `{ role: 'tool', content: responses }` onto the messages and call the model again. */
  responses: ToolApprovalResponse[];
  /** Requests still awaiting a person's decision in reckon after the wait. */
  waiting: { approvalId: string; toolCallId: string; jobId?: string }[];
}

/**
 * Answers the AI SDK's approval requests for durable tools with reckon's decisions, waiting up
 * to `timeoutMs` for them (made in `reckon approvals`, the dashboard or `q.approvals.decide`).
 * A denial carries the approver's note, which the AI SDK gives the model.
 */
export async function reckonApprovals(p: {
  tools: Record<string, unknown>;
  content: readonly { type: string }[];
  wait?: DecisionWait;
}): Promise<ReckonApprovals> {
  const out: ReckonApprovals = { responses: [], waiting: [] };
  const requests = p.content.filter(
    (c): c is ApprovalRequestPart => c.type === 'tool-approval-request',
  );
  for (const r of requests) {
    const meta = (p.tools[r.toolCall.toolName] as { [DURABLE]?: DurableMeta } | undefined)?.[
      DURABLE
    ];
    if (!meta) continue; // not reckon's: the application answers it
    const decision = await reckonDecision(
      { ...meta, input: r.toolCall.input, stepId: r.toolCall.toolCallId },
      p.wait,
    );
    if (!decision) {
      out.waiting.push({ approvalId: r.approvalId, toolCallId: r.toolCall.toolCallId });
      continue;
    }
    out.responses.push({
      type: 'tool-approval-response',
      approvalId: r.approvalId,
      approved: decision.approved,
      reason: decision.approved ? `approved in reckon (job ${decision.jobId})` : decision.reason,
    });
  }
  return out;
}
