/**
 * The JSON API (`/api/...`), one small handler per route over what `q.*` offers: read the
 * store's status, list and read jobs, enqueue one or a batch, `call` (enqueue or attach, and
 * wait for the outcome), and the decisions of people (approve or deny, resolve, cancel), each
 * recorded with the principal the server authenticated. Requests are validated by the zod
 * schemas of schemas.ts; errors are problem details (problem.ts).
 */
import { Hono, type Context } from 'hono';
import type { z } from 'zod';
import { InvalidInput, JobNotFound, NotPermitted, OutcomePending } from '../core/errors.js';
import type { DecisionBy } from '../runtime/decision-by.js';
import type { JobDetail } from '../store/store.js';
import type { ApiDeps } from './app.js';
import type { AppEnv } from './context.js';
import { readJson } from './edge.js';
import { openApiDocument } from './openapi.js';
import { authorize, enqueuerOf, redactJob, type Principal } from './principal.js';
import {
  ApprovalsQuery,
  CallBody,
  CancelBody,
  DecideBody,
  EnqueueBatchBody,
  EnqueueBody,
  JobsQuery,
  PauseBody,
  ResolveBody,
} from './schemas.js';
import { queueControlOf } from './queue-control.js';

type C = Context<AppEnv>;

type Allow = (c: C, action: Parameters<typeof authorize>[1], operation?: string) => void;
type Body = <S extends z.ZodType>(c: C, schema: S) => Promise<z.infer<S>>;

export function apiRoutes(deps: ApiDeps): Hono<AppEnv> {
  const api = new Hono<AppEnv>();
  const allow: Allow = (c, action, operation) =>
    authorize(c.get('principal'), action, {
      protectReads: deps.protectReads,
      ...(operation !== undefined ? { operation } : {}),
    });
  const body: Body = async (c, schema) => parse(schema, await readJson(c, deps.settings), 'body');
  readRoutes(api, deps, allow);
  produceRoutes(api, deps, allow, body);
  decisionRoutes(api, deps, allow, body);
  flowRoutes(api, deps, allow, body);
  return api;
}

/** Status, job lists, a job, the review and approval lists. */
function readRoutes(api: Hono<AppEnv>, deps: ApiDeps, allow: Allow): void {
  const { queue } = deps;
  api.get('/openapi.json', (c) => c.json(openApiDocument(deps.basePath)));
  // Who is signed in, and the session's form token for pages and scripts of this origin.
  api.get('/session', (c) =>
    c.json({ principal: c.get('principal'), csrfToken: c.get('csrfToken') }),
  );

  api.get('/status', async (c) => {
    allow(c, 'read');
    const [stats, approvals] = await Promise.all([
      queue.store.statsGet(),
      queue.store.jobApprovalStats(),
    ]);
    return c.json({
      store: queue.store.location,
      ...deps.health(stats, approvals),
      ...stats,
      approvals: approvals.byOperation,
    });
  });

  api.get('/jobs', async (c) => {
    allow(c, 'read');
    const q = parse(JobsQuery, queryOf(c, ['state']), 'query');
    // The console's bounded search: whatever the filters match, one request reads at most a
    // window of jobs (see q.search); `scanStopped` says the window ended before the page filled.
    const page = await queue.search({
      ...(q.state ? { state: q.state } : {}),
      ...(q.queue ? { queue: q.queue } : {}),
      ...(q.operation ? { operation: q.operation } : {}),
      ...(q.q ? { text: q.q } : {}),
      ...(q.from !== undefined ? { from: q.from } : {}),
      ...(q.to !== undefined ? { to: q.to } : {}),
      ...(q.before ? { before: q.before } : {}),
      limit: q.limit ?? 100,
    });
    const p = c.get('principal');
    return c.json({
      jobs: page.jobs.map((j) => redactJob(p, j)),
      nextBefore: page.nextBeforeId,
      scanStopped: page.scanStopped,
    });
  });

  api.get('/jobs/:id', async (c) => {
    const detail = await readableJob(c, deps, c.req.param('id'));
    const p = c.get('principal');
    return c.json({ ...detail, job: redactJob(p, detail.job) });
  });

  api.get('/review', async (c) => {
    allow(c, 'read');
    const p = c.get('principal');
    const jobs = await queue.review.list();
    return c.json({ jobs: jobs.map((d) => ({ ...d, job: redactJob(p, d.job) })) });
  });

  api.get('/approvals', async (c) => {
    allow(c, 'read');
    const q = parse(ApprovalsQuery, queryOf(c, []), 'query');
    const jobs = await queue.approvals.list({
      ...(q.operation ? { operation: q.operation } : {}),
      limit: q.limit ?? 100,
    });
    const p = c.get('principal');
    return c.json({ jobs: jobs.map((j) => redactJob(p, j)) });
  });
}

/** What a producer does: enqueue one or a batch, call. */
function produceRoutes(api: Hono<AppEnv>, deps: ApiDeps, allow: Allow, body: Body): void {
  const { queue } = deps;
  api.post('/jobs', async (c) => {
    allow(c, 'enqueue');
    const { operation, ...item } = await body(c, EnqueueBody);
    const job = await queue.enqueue(operation, item.input, {
      ...enqueueOptions(item),
      actor: enqueuerOf(c.get('principal')),
    });
    return c.json({ job, deduplicated: job.deduplicated }, job.deduplicated ? 200 : 201);
  });

  api.post('/jobs/batch', async (c) => {
    allow(c, 'enqueue');
    const b = await body(c, EnqueueBatchBody);
    const jobs = await queue.enqueueMany(
      b.operation,
      b.jobs.map((j) => ({ input: j.input, ...enqueueOptions(j) })),
      { actor: enqueuerOf(c.get('principal')) },
    );
    return c.json({ jobs }, 201);
  });

  api.post('/call', (c) => callRoute(c, deps, allow));
}

/** A person's decisions: cancel, resolve, approve or deny; each records the principal. */
function decisionRoutes(api: Hono<AppEnv>, deps: ApiDeps, allow: Allow, body: Body): void {
  const { queue } = deps;
  api.post('/jobs/:id/cancel', async (c) => {
    const id = c.req.param('id');
    allow(c, 'cancel');
    const { reason } = await body(c, CancelBody);
    const detail = await queue.job(id);
    if (!detail) throw new JobNotFound(id);
    allow(c, 'cancel', detail.job.operation);
    const job = await queue.cancel(id, {
      ...(reason !== undefined ? { reason } : {}),
      by: decisionBy(c.get('principal')),
    });
    return c.json({ job });
  });

  api.post('/review/:id/resolve', async (c) => {
    const id = c.req.param('id');
    allow(c, 'review');
    const b = await body(c, ResolveBody);
    const detail = await queue.job(id);
    if (!detail) throw new JobNotFound(id);
    allow(c, 'review', detail.job.operation);
    const job = await queue.review.resolve(id, {
      as: b.as,
      ...(b.note !== undefined ? { note: b.note } : {}),
      by: decisionBy(c.get('principal')),
    });
    return c.json({ job });
  });

  api.post('/approvals/:id', async (c) => {
    const id = c.req.param('id');
    allow(c, 'approve');
    const b = await body(c, DecideBody);
    const detail = await queue.job(id);
    if (!detail) throw new JobNotFound(id);
    const p = c.get('principal');
    allow(c, 'approve', detail.job.operation);
    if (deps.refuseSelfApproval && b.approve && enqueuedBy(detail) === enqueuerOf(p))
      throw new NotPermitted(
        `token ${p.name} enqueued job ${id}; this server refuses an approval by the principal that asked for the job (four eyes)`,
      );
    const job = await queue.approvals.decide(id, {
      approve: b.approve,
      ...(b.note !== undefined ? { note: b.note } : {}),
      by: decisionBy(p),
    });
    return c.json({ job });
  });
}

/**
 * Flow control (`q.queues`): list the queues with their pauses; pause or resume a queue or an
 * operation (admin: a pause stops every worker's claims of it). The pause records the
 * authenticated principal.
 */
function flowRoutes(api: Hono<AppEnv>, deps: ApiDeps, allow: Allow, body: Body): void {
  const control = queueControlOf(deps.queue);
  api.get('/queues', async (c) => {
    allow(c, 'read');
    return c.json(await control.list());
  });
  api.post('/queues/:name/:act{pause|resume}', async (c) => {
    allow(c, 'admin');
    const b = await body(c, PauseBody);
    const name = c.req.param('name');
    const act = c.req.param('act') as 'pause' | 'resume';
    const changed = await control[act](name, c.get('principal'), b);
    const kind = b.operation ? 'operation' : 'queue';
    return c.json({ kind, name, paused: act === 'pause', changed });
  });
}

/** POST /api/call: enqueue or attach, then wait; pending answers 202 as `q.call` rejects. */
async function callRoute(c: C, deps: ApiDeps, allow: Allow): Promise<Response> {
  const { queue } = deps;
  allow(c, 'enqueue');
  const b = parse(CallBody, await readJson(c, deps.settings), 'body');
  const waitMs = b.waitMs ?? 30_000;
  if (waitMs > deps.settings.callWaitMsMax)
    throw new InvalidInput(
      `waitMs is at most ${deps.settings.callWaitMsMax} on this server (callWaitMsMax); call again to wait longer`,
    );
  // The client going away ends the wait (the job goes on).
  const wait = { timeoutMs: waitMs, signal: c.req.raw.signal };
  try {
    if (b.jobId !== undefined) {
      await readableJob(c, deps, b.jobId);
      return c.json(await queue.waitFor(b.jobId, wait));
    }
    const outcome = await queue.call(b.operation!, b.input, {
      ...enqueueOptions(b),
      ...wait,
      actor: enqueuerOf(c.get('principal')),
    });
    return c.json(outcome);
  } catch (err) {
    if (!(err instanceof OutcomePending)) throw err;
    return c.json(
      {
        code: err.code,
        jobId: err.jobId,
        state: err.state,
        reason: err.reason,
        message: err.message,
        evidence: err.evidence,
      },
      202,
    );
  }
}

/** The job, if the principal may read it: a producer reads only the jobs it enqueued. */
async function readableJob(c: C, deps: ApiDeps, id: string): Promise<JobDetail> {
  const p = c.get('principal');
  const detail = await deps.queue.job(id);
  if (p.role === 'producer') {
    // Not found either way: a producer learns nothing of other principals' jobs.
    if (!detail || enqueuedBy(detail) !== enqueuerOf(p)) throw new JobNotFound(id);
    return detail;
  }
  authorize(p, 'read', { protectReads: deps.protectReads });
  if (!detail) throw new JobNotFound(id);
  return detail;
}

/** Who asked for the job: its recorded enqueuer (`JobDetail.enqueuedBy`). */
function enqueuedBy(detail: JobDetail): string | undefined {
  return detail.enqueuedBy ?? undefined;
}

function decisionBy(p: Principal): DecisionBy {
  return { principal: p.name, role: p.role, tokenId: p.tokenId, via: `http:${p.via}` };
}

function enqueueOptions(item: z.infer<typeof EnqueueBody> | z.infer<typeof CallBody>) {
  return {
    ...(item.key !== undefined ? { key: item.key } : {}),
    ...(item.runId !== undefined ? { runId: item.runId } : {}),
    ...(item.stepId !== undefined ? { stepId: item.stepId } : {}),
    ...(item.queue !== undefined ? { queue: item.queue } : {}),
    ...(item.priority !== undefined ? { priority: item.priority } : {}),
    ...(item.delayMs !== undefined ? { delayMs: item.delayMs } : {}),
    ...(item.runAt !== undefined ? { runAt: item.runAt } : {}),
  };
}

/** The query string as an object; `multi` names parameters that may repeat. */
function queryOf(c: C, multi: string[]): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(c.req.queries())) {
    out[k] = multi.includes(k) && v.length > 1 ? v : v[0]!;
  }
  return out;
}

/** Validates with a schema; a failure is InvalidInput naming the field (400). */
export function parse<S extends z.ZodType>(schema: S, value: unknown, where: string): z.infer<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const path = issue.path.map(String).join('.');
  throw new InvalidInput(
    `${where}${path ? `.${path}` : ''}: ${issue.message}`,
    `$${path ? `.${path}` : ''}`,
  );
}
