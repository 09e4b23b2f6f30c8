/**
 * What a person does in the console: approve or deny (one job or several, each bound to the hash
 * of the input shown), resolve a review, cancel before dispatch, pause or resume a queue. Each
 * action authorizes the signed-in principal for the job's operation, records that principal as
 * the decider (never a name from the form), and redirects back with what happened (303).
 */
import type { Context } from 'hono';
import { JobNotFound, NotPermitted, ReckonError } from '../../core/errors.js';
import type { DecisionBy } from '../../runtime/decision-by.js';
import type { AppEnv, ConsoleDeps } from '../context.js';
import { authorize, enqueuerOf, type Principal } from '../principal.js';
import type { QueueControl } from '../queue-control.js';

type Form = Record<string, string | File | (string | File)[]>;

async function formOf(c: Context<AppEnv>): Promise<Form> {
  const body: unknown = await c.req.parseBody({ all: true });
  return body as Form;
}

function field(form: Form, name: string): string {
  const v = form[name];
  const one = Array.isArray(v) ? v[0] : v;
  return typeof one === 'string' ? one : '';
}

function fields(form: Form, name: string): string[] {
  const v = form[name];
  return (Array.isArray(v) ? v : v === undefined ? [] : [v]).filter(
    (x): x is string => typeof x === 'string' && x !== '',
  );
}

export function decisionBy(p: Principal): DecisionBy {
  return { principal: p.name, role: p.role, tokenId: p.tokenId, via: `http:${p.via}` };
}

/** Back to the page the form was on (only a path of this console), with a notice or an error. */
function back(
  c: Context<AppEnv>,
  deps: ConsoleDeps,
  form: Form,
  o: { notice?: string; error?: string },
) {
  const asked = field(form, 'back');
  const safe =
    asked.startsWith(`${deps.basePath}/`) && !asked.startsWith('//') && !asked.includes('\\')
      ? asked
      : `${deps.basePath}/`;
  const url = new URL(safe, 'http://console.invalid');
  url.searchParams.delete('notice');
  url.searchParams.delete('error');
  if (o.notice) url.searchParams.set('notice', o.notice);
  if (o.error) url.searchParams.set('error', o.error);
  return c.redirect(url.pathname + url.search, 303);
}

/** A refusal the person can act on (a conflict, a changed input); anything else propagates. */
function messageOf(err: unknown): string {
  if (err instanceof ReckonError) return err.message;
  throw err;
}

export async function decideApprovals(
  c: Context<AppEnv>,
  deps: ConsoleDeps,
  selfApprovalRefused: boolean,
) {
  const form = await formOf(c);
  const p = c.get('principal');
  const ids = fields(form, 'id');
  const decision = field(form, 'decision');
  if (decision !== 'approve' && decision !== 'deny')
    return back(c, deps, form, { error: 'Choose approve or deny.' });
  if (!ids.length) return back(c, deps, form, { error: 'Select at least one job.' });
  const approve = decision === 'approve';
  const done: string[] = [];
  const refused: string[] = [];
  for (const id of ids) {
    try {
      const detail = await deps.queue.job(id);
      if (!detail) throw new JobNotFound(id);
      authorize(p, 'approve', { protectReads: deps.protectReads, operation: detail.job.operation });
      if (selfApprovalRefused && approve && detail.enqueuedBy === enqueuerOf(p))
        throw new NotPermitted(
          `you enqueued job ${id}: this server refuses an approval by the principal that asked for the job (four eyes)`,
        );
      await deps.queue.approvals.decide(id, {
        approve,
        actor: p.name,
        by: decisionBy(p),
        note: field(form, 'note'),
        inputHash: field(form, `hash.${id}`),
      });
      done.push(id);
    } catch (err) {
      refused.push(`${id}: ${messageOf(err)}`);
    }
  }
  const verb = approve ? 'Approved' : 'Denied';
  return back(c, deps, form, {
    ...(done.length
      ? { notice: `${verb} ${done.length} job${done.length === 1 ? '' : 's'}.` }
      : {}),
    ...(refused.length ? { error: `Not decided: ${refused.join('; ')}` } : {}),
  });
}

export async function resolveReview(c: Context<AppEnv>, deps: ConsoleDeps, id: string) {
  const form = await formOf(c);
  const p = c.get('principal');
  const detail = await deps.queue.job(id);
  if (!detail) return back(c, deps, form, { error: `No job ${id}.` });
  authorize(p, 'review', { protectReads: deps.protectReads, operation: detail.job.operation });
  const as = field(form, 'as');
  try {
    await deps.queue.review.resolve(id, {
      as: as as never,
      actor: p.name,
      by: decisionBy(p),
      note: field(form, 'note'),
    });
    return back(c, deps, form, { notice: `Job ${id} resolved as ${as}.` });
  } catch (err) {
    return back(c, deps, form, { error: messageOf(err) });
  }
}

export async function cancelJob(c: Context<AppEnv>, deps: ConsoleDeps, id: string) {
  const form = await formOf(c);
  const p = c.get('principal');
  const detail = await deps.queue.job(id);
  if (!detail) return back(c, deps, form, { error: `No job ${id}.` });
  authorize(p, 'cancel', { protectReads: deps.protectReads, operation: detail.job.operation });
  try {
    await deps.queue.cancel(id, {
      actor: p.name,
      by: decisionBy(p),
      reason: field(form, 'reason') || 'cancelled in the console',
    });
    return back(c, deps, form, { notice: `Job ${id} cancelled.` });
  } catch (err) {
    return back(c, deps, form, { error: messageOf(err) });
  }
}

export async function queueFlow(
  c: Context<AppEnv>,
  deps: ConsoleDeps,
  control: QueueControl,
  name: string,
  act: 'pause' | 'resume',
) {
  const form = await formOf(c);
  const p = c.get('principal');
  authorize(p, 'admin', { protectReads: deps.protectReads });
  try {
    await control[act](name, p, { reason: field(form, 'reason') });
    return back(c, deps, form, {
      notice: `Queue ${name} ${act === 'pause' ? 'paused' : 'resumed'}.`,
    });
  } catch (err) {
    return back(c, deps, form, { error: messageOf(err) });
  }
}
