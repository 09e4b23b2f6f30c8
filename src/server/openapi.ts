/**
 * The OpenAPI 3.1 document of the JSON API, made from the zod schemas that validate the requests
 * (`z.toJSONSchema`), so the two cannot disagree. Served at `GET <base>/api/openapi.json`.
 */
import { z } from 'zod';
import {
  ApprovalsQuery,
  CallBody,
  CancelBody,
  DecideBody,
  EnqueueBatchBody,
  EnqueueBody,
  FlowChange,
  Job,
  JobsPage,
  JobsQuery,
  Outcome,
  PauseBody,
  PauseRecord,
  Pending,
  ProblemDetails,
  ResolveBody,
} from './schemas.js';

const schema = (s: z.ZodType, io: 'input' | 'output' = 'input') =>
  z.toJSONSchema(s, { target: 'draft-2020-12', io, unrepresentable: 'any' });

const json = (s: z.ZodType, io: 'input' | 'output' = 'output') => ({
  content: { 'application/json': { schema: schema(s, io) } },
});

const problems = (...statuses: number[]) =>
  Object.fromEntries(
    statuses.map((s) => [
      String(s),
      {
        description: PROBLEM_TEXT[s] ?? 'refused',
        content: {
          'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } },
        },
      },
    ]),
  );

const PROBLEM_TEXT: Record<number, string> = {
  400: 'invalid request (the detail names the field)',
  401: 'no token, or an unknown, revoked or expired one',
  403: "the token's role may not do this, or a cross-site request",
  404: "no such job (or not one of this producer's)",
  409: 'the job is no longer in a state that takes this decision, or a request key conflict',
  413: 'request body too large or too deeply nested',
  429: 'rate limit: see Retry-After',
};

function queryParameters(s: z.ZodObject) {
  const js = schema(s) as { properties?: Record<string, unknown> };
  return Object.entries(js.properties ?? {}).map(([name, sch]) => ({
    name,
    in: 'query',
    required: false,
    schema: sch,
  }));
}

const idParam = { name: 'id', in: 'path', required: true, schema: { type: 'string' } };
const body = (s: z.ZodType) => ({ required: true, ...json(s, 'input') });

const write = problems(400, 401, 403, 404, 409, 413, 429);
const read = problems(400, 401, 403, 404, 429);

export function openApiDocument(basePath: string): object {
  return {
    openapi: '3.1.0',
    info: {
      title: 'reckon',
      version: '1',
      description:
        'The JSON API of reckon serve: enqueue and call from any language, read jobs, and decide. ' +
        'Authenticate with Authorization: Bearer <token> (reckon tokens create).',
    },
    servers: [{ url: `${basePath}/api` }],
    security: [{ bearer: [] }],
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      schemas: { Problem: schema(ProblemDetails, 'output') },
    },
    paths: { ...readPaths(), ...writePaths(), ...flowPaths() },
  };
}

function readPaths() {
  return {
    '/status': {
      get: {
        summary: 'Store health, queues and counts',
        responses: { 200: { description: 'status' }, ...read },
      },
    },
    '/jobs': {
      get: {
        summary:
          'List and search jobs, newest first (cursor: before=nextBefore); one request reads a bounded window',
        parameters: queryParameters(JobsQuery),
        responses: { 200: json(JobsPage), ...read },
      },
      post: {
        summary: 'Enqueue one job (producer, admin); a known request key answers its job (200)',
        requestBody: body(EnqueueBody),
        responses: {
          201: json(z.object({ job: Job, deduplicated: z.boolean() })),
          200: { description: 'deduplicated: the job this request key already names' },
          ...write,
        },
      },
    },
  };
}

function writePaths() {
  return {
    '/jobs/batch': {
      post: {
        summary: 'Enqueue a batch: all or none',
        requestBody: body(EnqueueBatchBody),
        responses: { 201: json(z.object({ jobs: z.array(Job) })), ...write },
      },
    },
    '/jobs/{id}': {
      get: {
        summary: 'A job with its attempts and events',
        parameters: [idParam],
        responses: { 200: { description: 'the job, attempts and events' }, ...read },
      },
    },
    '/jobs/{id}/cancel': {
      post: {
        summary: 'Cancel a job that has not dispatched (approver, reviewer, admin)',
        parameters: [idParam],
        requestBody: body(CancelBody),
        responses: { 200: json(z.object({ job: Job })), ...write },
      },
    },
    '/call': {
      post: {
        summary: 'Enqueue or attach, and wait for the outcome (as q.call)',
        requestBody: body(CallBody),
        responses: {
          200: { description: 'the outcome', ...json(Outcome) },
          202: {
            description: 'no outcome yet: the state and evidence; call again with the same key',
            ...json(Pending),
          },
          ...write,
        },
      },
    },
    '/review': {
      get: {
        summary: 'NEEDS_REVIEW jobs with their evidence',
        responses: { 200: { description: 'jobs' }, ...read },
      },
    },
    '/review/{id}/resolve': {
      post: {
        summary: 'Resolve a NEEDS_REVIEW or UNKNOWN job (reviewer, admin)',
        parameters: [idParam],
        requestBody: body(ResolveBody),
        responses: { 200: json(z.object({ job: Job })), ...write },
      },
    },
    '/approvals': {
      get: {
        summary: 'Jobs awaiting approval, oldest first',
        parameters: queryParameters(ApprovalsQuery),
        responses: { 200: json(z.object({ jobs: z.array(Job) })), ...read },
      },
    },
    '/approvals/{id}': {
      post: {
        summary: 'Approve or deny (approver, admin); of two deciders one wins, the other gets 409',
        parameters: [idParam],
        requestBody: body(DecideBody),
        responses: { 200: json(z.object({ job: Job })), ...write },
      },
    },
  };
}

function flowPaths() {
  const nameParam = {
    name: 'name',
    in: 'path',
    required: true,
    schema: { type: 'string' },
    description: 'A queue, or an operation with { operation: true }',
  };
  const change = (summary: string) => ({
    post: {
      summary,
      parameters: [nameParam],
      requestBody: body(PauseBody),
      responses: { 200: json(FlowChange), ...write },
    },
  });
  return {
    '/queues': {
      get: {
        summary: 'Queues with their counts and pauses, and every pause in force',
        responses: {
          200: json(z.object({ queues: z.array(z.unknown()), pauses: z.array(PauseRecord) })),
          ...read,
        },
      },
    },
    '/queues/{name}/pause': change(
      'Pause a queue or an operation: workers stop claiming its jobs (admin)',
    ),
    '/queues/{name}/resume': change('Resume a queue or an operation (admin)'),
  };
}
