/**
 * The console: server-rendered pages (hono/html, escaped by default) with htmx for live updates,
 * mounted by the app (`app.route('/', consoleRoutes(deps))`) behind its edge checks and
 * authentication. Every page reads through the library (`q.overview`, `q.search`, `q.job`,
 * `q.approvals`, `q.review`), never the tables; every action authorizes the principal and
 * records it as the decider. One template per page (pages/), one partial per repeated piece
 * (partials/).
 */
import { Hono, type Context } from 'hono';
import type { AppEnv, ConsoleDeps } from '../context.js';
import { authorize, type Action } from '../principal.js';
import { cancelJob, decideApprovals, queueFlow, resolveReview } from './actions.js';
import { assetRoutes } from './assets.js';
import type { JobDetail } from '../../store/store.js';
import { href, viewOf, type Html } from './format.js';
import { page } from './layout.js';
import { LIVE_DEFAULTS, liveStream, signatureOf, type LiveSettings } from './live.js';
import { approvalsBody } from './pages/approvals.js';
import { jobBody } from './pages/job.js';
import { filtersOf, jobsBody } from './pages/jobs.js';
import { overviewBody } from './pages/overview.js';
import { reviewBody } from './pages/review.js';
import { signInBody } from './pages/sign-in.js';
import { queueControlOf } from '../queue-control.js';

/** How many jobs the approvals and review pages show at once (oldest first). */
export const CONSOLE_LIST_MAX = 200;

export interface ConsoleOptions {
  live?: Partial<LiveSettings>;
  /**
   * Refuse an approval by the principal that enqueued the job (the app's four-eyes option; by
   * default, the app's own setting when its deps carry it).
   */
  refuseSelfApproval?: boolean;
}

type C = Context<AppEnv>;

/** A page's response: HTML, never cached (it carries job data). */
function respond(c: C, body: Html, status: 200 | 400 | 401 | 404 = 200) {
  c.header('cache-control', 'no-store');
  return c.html(body, status);
}

/**
 * Authorizes a read; a browser without a session is sent to sign in (and back here after),
 * other refusals propagate to the app (401/403 problem).
 */
function allowed(c: C, deps: ConsoleDeps, action: Action): Response | null {
  try {
    authorize(c.get('principal'), action, { protectReads: deps.protectReads });
    return null;
  } catch (err) {
    if (
      c.get('principal').via === 'anonymous' &&
      (c.req.header('accept') ?? '').includes('text/html')
    ) {
      const url = new URL(c.req.url);
      return c.redirect(
        `${deps.basePath}/login?next=${encodeURIComponent(url.pathname + url.search)}`,
        303,
      );
    }
    throw err;
  }
}

function flashOf(c: C): { notice?: string; error?: string } {
  const notice = c.req.query('notice');
  const error = c.req.query('error');
  return { ...(notice ? { notice } : {}), ...(error ? { error } : {}) };
}

function pageRoutes(app: Hono<AppEnv>, deps: ConsoleDeps): void {
  const q = deps.queue;
  const live = (detail?: JobDetail) => ({
    source: detail
      ? href(deps.basePath, '/live', { job: detail.job.id, seen: signatureOf(detail) })
      : `${deps.basePath}/live`,
  });
  app.get('/', async (c) => {
    const no = allowed(c, deps, 'read');
    if (no) return no;
    const [overview, paused] = await Promise.all([q.overview(), queueControlOf(q).paused()]);
    const health = deps.health(overview.stats);
    const view = viewOf(c, deps);
    const body = overviewBody(view, { overview, health, paused, ...flashOf(c) });
    return respond(c, page(view, { title: 'Overview', section: 'overview', body, live: live() }));
  });
  app.get('/jobs', async (c) => {
    const no = allowed(c, deps, 'read');
    if (no) return no;
    const now = q.clock.now();
    const { filters, query, error } = filtersOf(new URL(c.req.url).searchParams, now);
    let failure = error;
    const result = query
      ? await q.search(query).catch((err: Error) => ((failure = err.message), null))
      : null;
    const view = viewOf(c, deps);
    const body = jobsBody(view, { filters, page: result, error: failure, now });
    return respond(
      c,
      page(view, { title: 'Jobs', section: 'jobs', body, live: live() }),
      failure ? 400 : 200,
    );
  });
  app.get('/jobs/:id', async (c) => {
    const no = allowed(c, deps, 'read');
    if (no) return no;
    const id = c.req.param('id');
    const detail = await q.job(id);
    const view = viewOf(c, deps);
    if (!detail) {
      const body = jobsBody(view, {
        filters: filtersOf(new URLSearchParams(), 0).filters,
        page: null,
        error: `No job with id ${id}.`,
        now: 0,
      });
      return respond(c, page(view, { title: 'No such job', section: 'jobs', body }), 404);
    }
    const body = jobBody(view, detail, { now: q.clock.now(), ...flashOf(c) });
    return respond(c, page(view, { title: `Job ${id}`, section: 'job', body, live: live(detail) }));
  });
  app.get('/approvals', async (c) => {
    const no = allowed(c, deps, 'read');
    if (no) return no;
    const waiting = await q.approvals.list({ limit: CONSOLE_LIST_MAX });
    const view = viewOf(c, deps);
    const body = approvalsBody(view, { waiting, ...flashOf(c) });
    return respond(c, page(view, { title: 'Approvals', section: 'approvals', body, live: live() }));
  });
  app.get('/review', async (c) => {
    const no = allowed(c, deps, 'read');
    if (no) return no;
    const cases = await q.review.list({ limit: CONSOLE_LIST_MAX });
    const view = viewOf(c, deps);
    const body = reviewBody(view, { cases, ...flashOf(c) });
    return respond(c, page(view, { title: 'Review', section: 'review', body, live: live() }));
  });
}

/**
 * The sign-in page: asked for (200), or answering a token the server did not accept (401, with
 * the error on the page, so that the person can try again).
 */
export function signInPage(
  c: C,
  deps: ConsoleDeps,
  d: { next: string; error?: string },
  status: 200 | 401 = 200,
): Response | Promise<Response> {
  const view = viewOf(c, deps);
  const body = signInBody(view, d);
  return respond(c, page(view, { title: 'Sign in', section: 'sign-in', body }), status);
}

export function consoleRoutes(deps: ConsoleDeps, options: ConsoleOptions = {}): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const settings = { ...LIVE_DEFAULTS, ...options.live };
  assetRoutes(app);
  app.get('/login', (c) => {
    const next = c.req.query('next') ?? `${deps.basePath}/`;
    const error = c.req.query('error');
    return signInPage(c, deps, { next, ...(error ? { error } : {}) });
  });
  pageRoutes(app, deps);
  app.get('/live', (c) => {
    authorize(c.get('principal'), 'read', { protectReads: deps.protectReads });
    const job = c.req.query('job');
    return liveStream(
      c,
      deps.queue,
      settings,
      job ? { id: job, seen: c.req.query('seen') ?? '' } : undefined,
    );
  });
  const refuseSelf =
    options.refuseSelfApproval ??
    (deps as ConsoleDeps & { refuseSelfApproval?: boolean }).refuseSelfApproval ??
    false;
  app.post('/approvals/decide', (c) => decideApprovals(c, deps, refuseSelf));
  app.post('/review/:id/resolve', (c) => resolveReview(c, deps, c.req.param('id')));
  app.post('/jobs/:id/cancel', (c) => cancelJob(c, deps, c.req.param('id')));
  app.post('/queues/:name/:act{pause|resume}', (c) =>
    queueFlow(
      c,
      deps,
      queueControlOf(deps.queue),
      c.req.param('name'),
      c.req.param('act') as 'pause' | 'resume',
    ),
  );
  return app;
}
