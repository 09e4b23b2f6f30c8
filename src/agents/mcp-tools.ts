/**
 * reckon's own MCP tools beside the operations: `reckon_job` (a job's outcome and evidence) and,
 * where the server allows it, the approval queue (`reckon_approvals`, `reckon_approval_decide`).
 */
import type { DecisionBy } from '../runtime/decision-by.js';
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import { InvalidInput, JobNotFound, NotAuthorized } from '../core/errors.js';
import type { JobDetail } from '../store/store.js';
import type { AgentQueue } from './outcome.js';

/** Who an MCP session authenticated as, as far as these tools need it (see McpPrincipal). */
interface Caller {
  name: string;
  role?: string;
  tokenId?: string;
  mayApprove: boolean;
  operations?: string[];
}

export type ApprovalsMode = 'none' | 'list' | 'decide';

/** The queue an MCP server needs: the adapters' part, and the approvals API if it is exposed. */
export type McpQueue = AgentQueue & {
  approvals?: {
    list(): Promise<unknown[]>;
    decide(
      jobId: string,
      d: { approve: boolean; actor: string; note?: string; by?: DecisionBy },
    ): Promise<unknown>;
  };
};

export interface OwnTool {
  tool: Tool;
  call(args: Record<string, unknown>): Promise<CallToolResult>;
}

const EVENTS_SHOWN_MAX = 50;

export function jobTools(
  q: McpQueue,
  approvals: ApprovalsMode,
  caller: Caller | undefined,
): OwnTool[] {
  const tools: OwnTool[] = [
    {
      tool: {
        name: 'reckon_job',
        description:
          "A reckon job's state, result or error, its attempts, and its journal (the evidence of what happened). Use it to follow a pending tool call by its job id.",
        inputSchema: {
          type: 'object',
          properties: { jobId: { type: 'string', description: 'the job id a tool call returned' } },
          required: ['jobId'],
        },
        annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
      },
      call: async (args) => {
        const jobId = stringArg(args, 'jobId');
        const detail = await q.job(jobId);
        if (!detail) throw new JobNotFound(jobId);
        return json(jobView(detail));
      },
    },
  ];
  if (approvals === 'none') return tools;
  const api = q.approvals;
  if (!api) throw new InvalidInput('this reckon has no approvals API (q.approvals)');
  tools.push({
    tool: {
      name: 'reckon_approvals',
      description: 'Jobs awaiting a person’s approval, with their input and reason.',
      inputSchema: { type: 'object', properties: {} },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    call: async () => json({ awaiting: await api.list() }),
  });
  if (approvals === 'decide') tools.push(decideTool(q, api, caller));
  return tools;
}

/** `reckon_approval_decide`: only for a person the session authenticated as an approver. */
function decideTool(
  q: McpQueue,
  api: NonNullable<McpQueue['approvals']>,
  caller: Caller | undefined,
): OwnTool {
  return {
    tool: {
      name: 'reckon_approval_decide',
      description:
        'Approve or deny a job awaiting approval, for the person this session authenticated as (an approver token); the decision is recorded with that person as its actor. A model must never call it to approve its own calls.',
      inputSchema: {
        type: 'object',
        properties: {
          jobId: { type: 'string' },
          approve: { type: 'boolean' },
          note: { type: 'string', description: 'why; a denial’s note is what the agent is told' },
        },
        required: ['jobId', 'approve'],
      },
      annotations: { destructiveHint: true, idempotentHint: false, openWorldHint: false },
    },
    call: async (args) => {
      const jobId = stringArg(args, 'jobId');
      if (!caller?.mayApprove)
        throw new NotAuthorized(
          'reckon_approval_decide acts only for a person: connect with an approver token (reckon tokens create NAME --role approver) to decide here, or decide in the console or with reckon approvals',
        );
      if (caller.operations) {
        const detail = await q.job(jobId);
        if (!detail) throw new JobNotFound(jobId);
        if (!caller.operations.includes(detail.job.operation))
          throw new NotAuthorized(
            `${caller.name} may decide only on ${caller.operations.join(', ')}, not ${detail.job.operation}`,
          );
      }
      if (typeof args.approve !== 'boolean')
        throw new InvalidInput('approve: expected a boolean', '$.approve');
      const note = typeof args.note === 'string' ? args.note : undefined;
      const decided = await api.decide(jobId, {
        approve: args.approve,
        actor: `mcp:${caller.name}`,
        by: {
          principal: caller.name,
          ...(caller.role !== undefined ? { role: caller.role } : {}),
          ...(caller.tokenId !== undefined ? { tokenId: caller.tokenId } : {}),
          via: 'mcp',
        },
        ...(note !== undefined ? { note } : {}),
      });
      return json({ decided });
    },
  };
}

function jobView({ job, attempts, events }: JobDetail): Record<string, unknown> {
  return {
    jobId: job.id,
    operation: job.operation,
    requestKey: job.requestKey,
    state: job.state,
    result: job.result,
    error: job.error,
    attempts: attempts.map((a) => ({
      attemptNo: a.attemptNo,
      state: a.state,
      dispatchedAt: a.dispatchedAt,
      finishedAt: a.finishedAt,
      reason: a.reason,
      resolution: a.resolution,
      resolutionSource: a.resolutionSource,
      resolutionEvidence: a.resolutionEvidence,
    })),
    events: events.slice(-EVENTS_SHOWN_MAX).map((e) => ({
      kind: e.kind,
      attemptNo: e.attemptNo,
      from: e.fromState,
      to: e.toState,
      actor: e.actor,
      at: new Date(e.at).toISOString(),
      detail: e.detail,
    })),
  };
}

function stringArg(args: Record<string, unknown>, name: string): string {
  const v = args[name];
  if (typeof v !== 'string' || v.length === 0)
    throw new InvalidInput(`${name}: expected a non-empty string`, `$.${name}`);
  return v;
}

function json(value: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(value) }], structuredContent: value };
}
