/**
 * The JSON API's requests and answers as zod schemas: the same schemas validate every request
 * and make the OpenAPI document (`GET /api/openapi.json`, see openapi.ts). Unknown fields of a
 * request body are dropped: a body's `actor`, for one, is never read (the server knows who asks).
 */
import { z } from 'zod';
import { JOB_STATES } from '../core/states.js';
import { SEARCH_LIMIT_MAX, SEARCH_TEXT_LENGTH_MAX } from '../runtime/search.js';

const key = z
  .string()
  .min(1)
  .max(512)
  .describe('Request key: one side effect (same key, same job)');

/** Where a job goes and when it runs (as `q.enqueue`'s options). */
export const EnqueueItem = z.object({
  input: z.unknown().describe('The operation input (JSON)'),
  key: key.optional(),
  runId: z
    .string()
    .min(1)
    .max(512)
    .optional()
    .describe('Agent run id; with stepId the key is runId:stepId'),
  stepId: z.string().min(1).max(512).optional(),
  queue: z.string().min(1).max(64).optional(),
  priority: z.number().int().min(-1000).max(1000).optional(),
  delayMs: z.number().int().min(0).optional(),
  runAt: z
    .number()
    .int()
    .min(0)
    .optional()
    .describe('Run no earlier than this (ms since the epoch)'),
});

export const EnqueueBody = EnqueueItem.extend({
  operation: z.string().min(1).max(200).describe('A registered operation name'),
});

export const EnqueueBatchBody = z.object({
  operation: z.string().min(1).max(200),
  jobs: z.array(EnqueueItem).min(1).max(10_000),
});

export const CallBody = EnqueueItem.partial({ input: true })
  .extend({
    operation: z.string().min(1).max(200).optional(),
    jobId: z
      .string()
      .min(1)
      .max(100)
      .optional()
      .describe('Wait for a known job instead of enqueueing'),
    waitMs: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe(
        "How long to wait for the outcome (default 30000; at most the server's callWaitMsMax)",
      ),
  })
  .refine((b) => (b.jobId === undefined) !== (b.operation === undefined), {
    message: 'give either operation (with input) or jobId',
  });

export const ResolveBody = z.object({
  as: z.enum(['succeeded', 'failed', 'retry']),
  note: z.string().max(10_000).optional(),
});

export const DecideBody = z.object({
  approve: z.boolean(),
  note: z.string().max(10_000).optional(),
});

export const CancelBody = z.object({
  reason: z.string().max(10_000).optional(),
});

export const PauseBody = z.object({
  operation: z
    .boolean()
    .optional()
    .describe('Pause or resume an operation (its jobs in every queue) rather than a queue'),
  reason: z.string().max(1_000).optional().describe('Recorded with the pause'),
});

const name = z.string().min(1).max(200);
const time = z.coerce
  .number()
  .int()
  .min(0)
  .optional()
  .describe('Creation time, ms since the epoch (the time in the job id)');
export const JobsQuery = z.object({
  state: z.union([z.enum(JOB_STATES), z.array(z.enum(JOB_STATES))]).optional(),
  queue: name.optional(),
  operation: name.optional(),
  q: z
    .string()
    .min(1)
    .max(SEARCH_TEXT_LENGTH_MAX)
    .optional()
    .describe(
      'A job id, request key, run id or fingerprint (exact), or text in the input or the key',
    ),
  from: time,
  to: time,
  before: z
    .string()
    .min(1)
    .max(100)
    .optional()
    .describe("Keyset cursor: the previous answer's nextBefore"),
  limit: z.coerce.number().int().min(1).max(SEARCH_LIMIT_MAX).optional(),
});

export const ApprovalsQuery = z.object({
  operation: name.optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
});

// ---------------------------------------------------------------- answers (documented only)

export const Job = z
  .object({
    id: z.string(),
    queue: z.string(),
    operation: z.string(),
    input: z.unknown(),
    requestKey: z.string(),
    fingerprint: z.string(),
    state: z.enum(JOB_STATES),
    attemptCount: z.number(),
    result: z.unknown(),
    error: z.unknown(),
    createdAt: z.number(),
    updatedAt: z.number(),
    finishedAt: z.number().nullable(),
  })
  .loose()
  .describe('A job (inputs and results redacted for a viewer without the inputs grant)');

export const JobsPage = z.object({
  jobs: z.array(Job),
  nextBefore: z
    .string()
    .nullable()
    .describe('Pass as before for the next page; null: no more jobs match'),
  scanStopped: z
    .boolean()
    .describe(
      'The window of jobs one request reads ended before the page filled: older jobs were not searched yet (go on with nextBefore)',
    ),
});

export const PauseRecord = z.object({
  kind: z.enum(['queue', 'operation']),
  name: z.string(),
  actor: z.string().describe('operator:<principal> over HTTP, cli:<os user> from the CLI'),
  reason: z.string().nullable(),
  pausedAt: z.number(),
});

export const FlowChange = z.object({
  kind: z.enum(['queue', 'operation']),
  name: z.string(),
  paused: z.boolean().describe('Whether it is paused now'),
  changed: z.boolean().describe('False when it already was'),
});

export const Outcome = z.object({
  jobId: z.string(),
  state: z.enum(['SUCCEEDED', 'FAILED', 'CANCELLED']),
  result: z.unknown().optional(),
  error: z.unknown().optional(),
});

export const Pending = z.object({
  code: z.literal('OUTCOME_PENDING'),
  jobId: z.string(),
  state: z.string().describe('UNKNOWN, NEEDS_REVIEW, AWAITING_APPROVAL, QUEUED or LEASED'),
  reason: z.enum(['timeout', 'aborted']),
  message: z.string(),
  evidence: z.unknown(),
});

export const ProblemDetails = z.object({
  type: z.string(),
  title: z.string(),
  status: z.number(),
  detail: z.string(),
  code: z.string(),
  instance: z.string().optional(),
});
