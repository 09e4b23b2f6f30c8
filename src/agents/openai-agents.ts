/**
 * `reckon/openai-agents`: a reckon operation as a function tool of the OpenAI Agents SDK.
 *
 *   const agent = new Agent({ name, model, tools: [durableTool(q, sendEmail, { runId })] });
 *   let result = await run(agent, input);
 *   while (result.interruptions.length > 0) {           // operations that ask for approval
 *     const { state } = await reckonInterruptions({ result, wait: { timeoutMs: 600_000 } });
 *     result = await run(agent, state);
 *   }
 *
 * Each call is one job keyed `${runId}:${callId}`; see docs/agents.md.
 */
import { tool, type FunctionTool, type RunState, type RunToolApprovalItem } from '@openai/agents';
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
  /** The tool's name for the model; default: the operation's name with `.`, `:` and `/` as `_`. */
  name?: string;
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
  name: string;
}

/** The tool name a model may use for an operation (letters, digits, `_` and `-`). */
export function toolNameOf(op: { name: string }): string {
  return op.name.replace(/[^A-Za-z0-9_-]/g, '_');
}

/**
 * A function tool whose `execute` calls `q.call(op, input, { runId, stepId: callId })` and
 * gives the model a `ToolAnswer` (as JSON). When the operation asks for approval,
 * `needsApproval` writes the job (AWAITING_APPROVAL) and the run stops with an interruption;
 * answer it with `reckonInterruptions()` once a person decided in reckon.
 */
export function durableTool<I, R>(
  q: AgentQueue,
  op: Operation<I, R>,
  options: DurableToolOptions,
): FunctionTool<unknown, never, ToolAnswer> {
  const { runId } = options;
  if (typeof runId !== 'string' || runId.length === 0)
    throw new TypeError(
      'durableTool needs a runId: the id of the agent run, stable across replays',
    );
  const any = op as AnyOperation;
  const name = options.name ?? toolNameOf(op);
  const t = tool({
    name,
    description: describe(any, options.description),
    // Non-strict: enqueue checks the input with the operation's own schema and names the field.
    parameters: inputJsonSchema(any) as never,
    strict: false,
    execute: async (input: unknown, _ctx, details): Promise<ToolAnswer> => {
      const callId = details?.toolCall?.callId;
      if (!callId)
        throw new Error('reckon durableTool: the SDK gave no call id for this tool call');
      return callAsTool({
        q,
        op: any,
        input: parsed(input),
        key: { runId, stepId: callId },
        ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}),
        ...(details?.signal ? { signal: details.signal } : {}),
      });
    },
    ...(mayNeedApproval(any)
      ? {
          needsApproval: async (_ctx: unknown, input: unknown, callId?: string) =>
            callId !== undefined &&
            (await needsReckonApproval({
              q,
              op: any,
              input: parsed(input),
              runId,
              stepId: callId,
            })),
        }
      : {}),
  }) as unknown as FunctionTool<unknown, never, ToolAnswer>;
  Object.defineProperty(t, DURABLE, { value: { q, op: any, runId, name } satisfies DurableMeta });
  return t;
}

/** A non-strict tool may be handed its arguments as the model's JSON text. */
function parsed(input: unknown): unknown {
  if (typeof input !== 'string') return input;
  try {
    return JSON.parse(input) as unknown;
  } catch {
    return input;
  }
}

interface InterruptedResult {
  interruptions: RunToolApprovalItem[];
  state: RunState<unknown, never>;
}

/**
 * Answers a run's interruptions for durable tools with reckon's decisions (made in
 * `reckon approvals`, the dashboard or `q.approvals.decide`), waiting up to `timeoutMs`:
 * approved ones are approved on the run state, denied ones rejected with the approver's note as
 * the message the model sees. Run the agent again with `state` to continue.
 */
export async function reckonInterruptions<S extends InterruptedResult['state']>(p: {
  result: { interruptions: RunToolApprovalItem[]; state: S };
  wait?: DecisionWait;
}): Promise<{ state: S; waiting: RunToolApprovalItem[] }> {
  const waiting: RunToolApprovalItem[] = [];
  for (const item of p.result.interruptions) {
    const raw = item.rawItem as { type?: string; callId?: string; arguments?: string };
    const meta = (item.agent.tools ?? [])
      .map((t) => (t as { [DURABLE]?: DurableMeta })[DURABLE])
      .find((m) => m?.name === item.name);
    if (!meta || raw.type !== 'function_call' || !raw.callId) continue; // not reckon's
    const decision = await reckonDecision(
      { ...meta, input: parsed(raw.arguments ?? '{}'), stepId: raw.callId },
      p.wait,
    );
    if (!decision) waiting.push(item);
    else if (decision.approved) p.result.state.approve(item);
    else
      p.result.state.reject(item, {
        message: `Not carried out, ${decision.reason}. Do not retry it; tell the user why.`,
      });
  }
  return { state: p.result.state, waiting };
}
