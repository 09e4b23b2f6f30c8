/**
 * The HTTP app (createReckonApp) in process, on both stores: who may do what, what a decision
 * records, and the edge (cross-site requests, body limits, rate limit). Requests go through
 * `app.request()`: the same middleware and routes as `reckon serve`, without a socket.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { v7 as uuidv7 } from 'uuid';
import { defineOperation, openQueue, type Queue } from '../src/index.js';
import { createReckonApp, type ReckonApp, type ReckonAppOptions } from '../src/server/app.js';
import { SEARCH_SCAN_ROWS_DEFAULT } from '../src/runtime/search.js';
import { newToken, tokenHash } from '../src/server/auth.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type StoreKind,
  type TestStore,
} from './helpers/stores.js';

const refund = defineOperation({
  name: 'payments.refund',
  approval: true,
  execute: (input: unknown, ctx) => ctx.dispatch(() => Promise.resolve({ refunded: input })),
});
const payout = defineOperation({
  name: 'payments.payout',
  approval: true,
  execute: (input: unknown, ctx) => ctx.dispatch(() => Promise.resolve({ paid: input })),
});
const echo = defineOperation({
  name: 'test.echo',
  execute: (input: unknown, ctx) => ctx.dispatch(() => Promise.resolve({ echoed: input })),
});

interface Rig {
  q: Queue;
  store: TestStore;
  reckon: ReckonApp;
  /** A token of this role (and operations), made in the store as `reckon tokens create` does. */
  token(name: string, role: string, operations?: string[], grants?: string[]): Promise<string>;
  req(path: string, init?: RequestInit & { token?: string }): Promise<Response>;
}

async function rig(kind: StoreKind, options: Partial<ReckonAppOptions> = {}): Promise<Rig> {
  const store = await makeTestStore(kind);
  const q = await openQueue({ store: store.url, operations: [refund, payout, echo] });
  const reckon = createReckonApp({ queue: q, ...options });
  const r: Rig = {
    q,
    store,
    reckon,
    async token(name, role, operations, grants) {
      const token = newToken();
      await q.store.tokenInsert({
        id: uuidv7(),
        name,
        role,
        operations: operations ?? null,
        grants: grants ?? [],
        hash: tokenHash(token),
        createdBy: 'test',
        expiresInMs: null,
      });
      return token;
    },
    async req(path, init = {}) {
      const { token, ...rest } = init;
      const headers = new Headers(rest.headers);
      if (token) headers.set('authorization', `Bearer ${token}`);
      if (typeof rest.body === 'string' && !headers.has('content-type'))
        headers.set('content-type', 'application/json');
      return reckon.app.request(path, { ...rest, headers });
    },
  };
  opened.push(r);
  return r;
}

const opened: Rig[] = [];
afterEach(async () => {
  for (const r of opened.splice(0)) {
    await r.q.close();
    await r.store.drop();
  }
});

const post = (body: unknown, token?: string): RequestInit & { token?: string } => ({
  method: 'POST',
  body: typeof body === 'string' ? body : JSON.stringify(body),
  ...(token ? { token } : {}),
});

describe.each(STORE_KINDS)('the HTTP app on %s', (kind) => {
  beforeEach(async (ctx) => {
    if (kind === 'postgres') {
      const why = await pgUnavailableReason();
      if (why) ctx.skip(why);
    }
  });

  it('no token: 401 for a decision, and for reads when reads are protected', async () => {
    const open = await rig(kind);
    const job = await open.q.enqueue(refund, { amount: 5 });
    const res = await open.req(`/api/approvals/${job.id}`, post({ approve: true }));
    expect(res.status).toBe(401);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await res.json()).toMatchObject({ status: 401, code: 'UNAUTHORIZED' });
    expect((await open.req('/api/jobs')).status).toBe(200);
    // A wrong token is never anonymous.
    expect((await open.req('/api/jobs', { token: 'rk_nope' })).status).toBe(401);

    const closed = await rig(kind, { protectReads: true });
    expect((await closed.req('/api/jobs')).status).toBe(401);
    expect((await closed.req('/api/status')).status).toBe(401);
    const viewer = await closed.token('v', 'viewer');
    expect((await closed.req('/api/jobs', { token: viewer })).status).toBe(200);
  });

  it('a viewer reads jobs with inputs redacted and may not approve (403)', async () => {
    const r = await rig(kind);
    const job = await r.q.enqueue(refund, { card: '4242 4242 4242 4242' });
    const viewer = await r.token('val', 'viewer');
    const listed = (await (await r.req('/api/jobs', { token: viewer })).json()) as {
      jobs: { id: string; input: unknown }[];
    };
    expect(listed.jobs.map((j) => j.id)).toEqual([job.id]);
    expect(JSON.stringify(listed)).not.toContain('4242');
    const res = await r.req(`/api/approvals/${job.id}`, post({ approve: true }, viewer));
    expect(res.status).toBe(403);
    expect((await r.q.job(job.id))!.job.state).toBe('AWAITING_APPROVAL');
    const granted = await r.token('auditor', 'viewer', undefined, ['inputs']);
    const seen = await (await r.req(`/api/jobs/${job.id}`, { token: granted })).json();
    expect(JSON.stringify(seen)).toContain('4242');
  });

  it('an approver limited to one operation: 403 on another; its decision records the principal, not the body', async () => {
    const r = await rig(kind);
    const a = await r.q.enqueue(refund, { amount: 5 });
    const b = await r.q.enqueue(payout, { amount: 7 });
    const alice = await r.token('alice', 'approver', ['payments.refund']);
    const other = await r.req(`/api/approvals/${b.id}`, post({ approve: true }, alice));
    expect(other.status).toBe(403);
    expect(((await other.json()) as { detail: string }).detail).toContain('payments.refund');
    expect((await r.q.job(b.id))!.job.state).toBe('AWAITING_APPROVAL');

    const ok = await r.req(
      `/api/approvals/${a.id}`,
      post({ approve: true, actor: 'mallory', note: 'customer called' }, alice),
    );
    expect(ok.status).toBe(200);
    const detail = (await r.q.job(a.id))!;
    const event = detail.events.find((e) => e.kind === 'approved')!;
    const token = (await r.q.store.tokenList({})).find((t) => t.name === 'alice')!;
    expect(event.actor).toBe('operator:alice');
    expect(event.detail).toEqual({
      approve: true,
      note: 'customer called',
      by: { principal: 'alice', role: 'approver', tokenId: token.id, via: 'http:bearer' },
    });
    expect(JSON.stringify(detail.events)).not.toContain('mallory');
    // Time on the store's clock: the event's time is the job's update time.
    expect(event.at).toBe(detail.job.updatedAt);
  });

  it('two approvers at once: one decision, the other told 409', async () => {
    const r = await rig(kind);
    const job = await r.q.enqueue(refund, { amount: 9 });
    const [x, y] = [await r.token('x', 'approver'), await r.token('y', 'approver')];
    const answers = await Promise.all([
      r.req(`/api/approvals/${job.id}`, post({ approve: true }, x)),
      r.req(`/api/approvals/${job.id}`, post({ approve: false, note: 'no' }, y)),
    ]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 409]);
    const loser = answers.find((a) => a.status === 409)!;
    expect(await loser.json()).toMatchObject({ code: 'JOB_STATE_CONFLICT' });
    const decided = (await r.q.job(job.id))!.events.filter(
      (e) => e.kind === 'approved' || e.kind === 'denied',
    );
    expect(decided).toHaveLength(1);
  });

  it('a cookie session: HttpOnly SameSite=Strict cookie; cross-site and tokenless posts refused', async () => {
    const r = await rig(kind);
    const job = await r.q.enqueue(refund, { amount: 3 });
    const ann = await r.token('ann', 'approver');
    const login = await r.req('/login', {
      method: 'POST',
      body: new URLSearchParams({ token: ann, next: '/approvals' }),
    });
    expect(login.status).toBe(303);
    expect(login.headers.get('location')).toBe('/approvals');
    const setCookie = login.headers.get('set-cookie')!;
    expect(setCookie).toMatch(/HttpOnly/i);
    expect(setCookie).toMatch(/SameSite=Strict/i);
    expect(setCookie).toMatch(/Expires=/i);
    expect(setCookie).not.toMatch(/Secure/i); // http: a Secure cookie would not come back
    const cookie = setCookie.split(';')[0]!;
    // A wrong token: the sign-in page again (HTML, 401) saying so, keeping where it was going.
    const wrong = await r.req('/login', {
      method: 'POST',
      body: 'token=wrong&next=%2Fapprovals',
      headers: form(),
    });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('content-type')).toMatch(/^text\/html/);
    expect(wrong.headers.get('set-cookie')).toBeNull();
    const page = await wrong.text();
    expect(page).toContain('That token was not accepted');
    expect(page).toMatch(/<form method="post" action="\/login">/);
    expect(page).toContain('name="next" value="/approvals"');

    // A page of another site posting with the person's cookie:
    const url = `/api/approvals/${job.id}`;
    const body = JSON.stringify({ approve: true });
    const crossSite = await r.req(url, {
      method: 'POST',
      body,
      headers: { cookie, 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' },
    });
    expect(crossSite.status).toBe(403);
    expect(await crossSite.json()).toMatchObject({ code: 'CROSS_SITE_REQUEST' });
    const evilOrigin = await r.req(url, {
      method: 'POST',
      body,
      headers: { cookie, origin: 'https://evil.example' },
    });
    expect(evilOrigin.status).toBe(403);
    // Same origin but without the session's form token:
    const noToken = await r.req(url, { method: 'POST', body, headers: { cookie } });
    expect(noToken.status).toBe(403);
    expect((await r.q.job(job.id))!.job.state).toBe('AWAITING_APPROVAL');

    // The console's pages get the form token from the context; the API echoes who is signed in.
    const csrf = await csrfOf(r, cookie);
    const ok = await r.req(url, {
      method: 'POST',
      body,
      headers: { cookie, 'x-csrf-token': csrf, 'sec-fetch-site': 'same-origin' },
    });
    expect(ok.status).toBe(200);
    const event = (await r.q.job(job.id))!.events.find((e) => e.kind === 'approved')!;
    expect(event.detail).toMatchObject({ by: { principal: 'ann', via: 'http:session' } });

    // Revoking the token ends its sessions at once.
    await r.q.store.tokenRevoke({ name: 'ann' });
    const after = await r.req('/api/session', { headers: { cookie } });
    expect(await after.json()).toMatchObject({ principal: { name: 'anonymous' } });
  });

  it('SQL injection strings in filters: answered verbatim (nothing matches) or 400, the schema intact', async () => {
    const r = await rig(kind);
    const job = await r.q.enqueue(echo, { n: 1 });
    const admin = await r.token('root', 'admin');
    for (const evil of [
      "' OR '1'='1",
      "x'; DROP TABLE jobs; --",
      'x"); DELETE FROM events; --',
      "default' UNION SELECT * FROM tokens --",
    ]) {
      for (const param of ['operation', 'queue', 'q']) {
        const res = await r.req(`/api/jobs?${param}=${encodeURIComponent(evil)}`, { token: admin });
        expect([200, 400], `${param}=${evil}`).toContain(res.status);
        if (res.status === 200)
          expect(await res.json()).toEqual({ jobs: [], nextBefore: null, scanStopped: false });
      }
      const state = await r.req(`/api/jobs?state=${encodeURIComponent(evil)}`, { token: admin });
      expect(state.status).toBe(400);
      expect(await state.json()).toMatchObject({ code: 'INVALID_INPUT' });
      const one = await r.req(`/api/jobs/${encodeURIComponent(evil)}`, { token: admin });
      expect(one.status).toBe(404);
    }
    const all = (await (await r.req('/api/jobs', { token: admin })).json()) as {
      jobs: { id: string }[];
    };
    expect(all.jobs.map((j) => j.id)).toEqual([job.id]);
    expect((await r.q.job(job.id))!.events.length).toBeGreaterThan(0);
    expect((await r.q.store.tokenList({})).map((t) => t.name)).toEqual(['root']);
  });

  it('searches jobs over the API: by key, text in the input, time; pages by nextBefore', async () => {
    const r = await rig(kind);
    const viewer = await r.token('vic', 'viewer', undefined, ['inputs']);
    const jobs = await r.q.enqueueMany(
      echo,
      ['alpha', 'beta', 'gamma'].map((name, i) => ({
        input: { customer: `cus_${name}` },
        key: `order-${i}`,
      })),
    );
    const list = async (query: string) => {
      const res = await r.req(`/api/jobs?${query}`, { token: viewer });
      expect(res.status, query).toBe(200);
      return (await res.json()) as {
        jobs: { id: string; requestKey: string }[];
        nextBefore: string | null;
        scanStopped: boolean;
      };
    };
    expect((await list('q=order-1')).jobs.map((j) => j.id)).toEqual([jobs[1]!.id]);
    expect((await list('q=CUS_GAMMA')).jobs.map((j) => j.requestKey)).toEqual(['order-2']);
    expect((await list(`q=${jobs[0]!.id}`)).jobs.map((j) => j.requestKey)).toEqual(['order-0']);
    expect((await list(`from=${Date.now() + 3_600_000}`)).jobs).toEqual([]);
    const first = await list('limit=2');
    expect(first.jobs.map((j) => j.requestKey)).toEqual(['order-2', 'order-1']);
    expect(first).toMatchObject({ nextBefore: jobs[1]!.id, scanStopped: false });
    const rest = await list(`limit=2&before=${first.nextBefore!}`);
    expect(rest).toEqual({
      jobs: [expect.objectContaining({ requestKey: 'order-0' })],
      nextBefore: null,
      scanStopped: false,
    });
    expect((await r.req('/api/jobs?limit=501', { token: viewer })).status).toBe(400);
  });

  it('a match below the default window: the first request stops there, nextBefore finds it', async () => {
    const r = await rig(kind);
    const viewer = await r.token('vic', 'viewer', undefined, ['inputs']);
    const [deep] = await r.q.enqueueMany(echo, [{ input: { note: 'Needle-42' }, key: 'deep' }]);
    for (let n = 0; n < SEARCH_SCAN_ROWS_DEFAULT; n += 2_500)
      await r.q.enqueueMany(
        echo,
        Array.from({ length: 2_500 }, (_, i) => ({ input: { n: n + i } })),
      );
    const search = async (query: string) =>
      (await (await r.req(`/api/jobs?${query}`, { token: viewer })).json()) as {
        jobs: { id: string }[];
        nextBefore: string | null;
        scanStopped: boolean;
      };
    // One request reads the newest SEARCH_SCAN_ROWS_DEFAULT jobs, all above the match.
    const first = await search('q=needle-42');
    expect(first).toMatchObject({ jobs: [], scanStopped: true });
    const next = await search(`q=needle-42&before=${first.nextBefore!}`);
    expect(next).toEqual({
      jobs: [expect.objectContaining({ id: deep!.id })],
      nextBefore: null,
      scanStopped: false,
    });
  });

  it('a 10 MiB body is refused with 413 before it is parsed; so is JSON nested too deep', async () => {
    const r = await rig(kind);
    const admin = await r.token('root', 'admin');
    const big = JSON.stringify({ operation: 'test.echo', input: 'x'.repeat(10 * 1024 * 1024) });
    const res = await r.req('/api/jobs', post(big, admin));
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ code: 'REQUEST_TOO_LARGE' });
    const deep = `{"operation":"test.echo","input":${'['.repeat(5000)}${']'.repeat(5000)}}`;
    const nested = await r.req('/api/jobs', post(deep, admin));
    expect(nested.status).toBe(413);
    expect(await r.q.jobs()).toEqual([]);
  });

  it('a burst over the rate limit: 429 with Retry-After, per token', async () => {
    const r = await rig(kind, { settings: { rateLimitMax: 5, rateLimitWindowMs: 60_000 } });
    const a = await r.token('a', 'viewer');
    const b = await r.token('b', 'viewer');
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await r.req('/api/jobs', { token: a })).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    const limited = await r.req('/api/jobs', { token: a });
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Number(limited.headers.get('retry-after'))).toBeLessThanOrEqual(60);
    expect((await r.req('/api/jobs', { token: b })).status).toBe(200);
  });

  it('a producer enqueues and calls, reads only its own jobs, and may not decide', async () => {
    const r = await rig(kind);
    const p1 = await r.token('agent-1', 'producer');
    const p2 = await r.token('agent-2', 'producer');
    const made = await r.req(
      '/api/jobs',
      post({ operation: 'test.echo', input: { n: 1 }, key: 'k1' }, p1),
    );
    expect(made.status).toBe(201);
    const { job } = (await made.json()) as { job: { id: string; state: string } };
    const again = await r.req(
      '/api/jobs',
      post({ operation: 'test.echo', input: { n: 1 }, key: 'k1' }, p1),
    );
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ job: { id: job.id }, deduplicated: true });
    expect((await r.req(`/api/jobs/${job.id}`, { token: p1 })).status).toBe(200);
    expect((await r.req(`/api/jobs/${job.id}`, { token: p2 })).status).toBe(404);
    expect((await r.req('/api/jobs', { token: p1 })).status).toBe(403);
    const enqueued = (await r.q.job(job.id))!.events.find((e) => e.kind === 'enqueued')!;
    expect(enqueued.actor).toBe('http:agent-1');

    const pending = await r.req(
      '/api/call',
      post({ operation: 'test.echo', input: { n: 2 }, key: 'k2', waitMs: 0 }, p1),
    );
    expect(pending.status).toBe(202);
    const body = (await pending.json()) as {
      code: string;
      state: string;
      jobId: string;
      evidence: unknown;
    };
    expect(body).toMatchObject({ code: 'OUTCOME_PENDING', state: 'QUEUED', reason: 'timeout' });
    expect(body.evidence).toBeDefined();

    const w = r.q.worker({ operations: [echo], pollIntervalMs: 10 });
    await w.start();
    try {
      const done = await r.req(
        '/api/call',
        post({ operation: 'test.echo', input: { n: 2 }, key: 'k2', waitMs: 20_000 }, p1),
      );
      expect(done.status).toBe(200);
      expect(await done.json()).toEqual({
        state: 'SUCCEEDED',
        jobId: body.jobId,
        result: { echoed: { n: 2 } },
      });
    } finally {
      await w.stop();
    }
    const job1 = await r.q.enqueue(refund, { amount: 1 });
    expect((await r.req(`/api/approvals/${job1.id}`, post({ approve: true }, p1))).status).toBe(
      403,
    );
  });

  it('refuseSelfApproval: the principal that enqueued a job may not approve it', async () => {
    const r = await rig(kind, { refuseSelfApproval: true });
    const root = await r.token('root', 'admin');
    const other = await r.token('boss', 'admin');
    const made = await r.req(
      '/api/jobs',
      post({ operation: 'payments.refund', input: { amount: 2 } }, root),
    );
    const { job } = (await made.json()) as { job: { id: string } };
    const self = await r.req(`/api/approvals/${job.id}`, post({ approve: true }, root));
    expect(self.status).toBe(403);
    expect((await r.req(`/api/approvals/${job.id}`, post({ approve: true }, other))).status).toBe(
      200,
    );
  });

  it('an admin pauses and resumes a queue and an operation; the pause records the principal', async () => {
    const r = await rig(kind);
    const admin = await r.token('ops-lead', 'admin');
    const approver = await r.token('dana', 'approver');
    const viewer = await r.token('vic', 'viewer');
    await r.q.enqueue(echo, { n: 1 });
    // Only an admin: a pause stops every worker's claims of the queue.
    expect((await r.req('/api/queues/default/pause', post({}))).status).toBe(401);
    const refused = await r.req('/api/queues/default/pause', post({}, approver));
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ code: 'FORBIDDEN' });
    expect(await r.q.queues.paused()).toEqual([]);

    const paused = await r.req(
      '/api/queues/default/pause',
      post({ reason: 'maintenance', actor: 'mallory' }, admin),
    );
    expect(paused.status).toBe(200);
    expect(await paused.json()).toEqual({
      kind: 'queue',
      name: 'default',
      paused: true,
      changed: true,
    });
    const again = await r.req('/api/queues/default/pause', post({}, admin));
    expect(await again.json()).toMatchObject({ paused: true, changed: false });
    const op = await r.req('/api/queues/test.echo/pause', post({ operation: true }, admin));
    expect(await op.json()).toMatchObject({ kind: 'operation', name: 'test.echo', changed: true });
    expect((await r.req('/api/queues/no%20such/pause', post({}, admin))).status).toBe(400);

    // Durable, in the store, with the authenticated principal (the body's actor ignored):
    // another queue object on the store sees it, and so does a viewer over the API.
    const other = await openQueue({ store: r.store.url });
    try {
      const pauses = await other.queues.paused();
      expect(pauses.map((p) => [p.kind, p.name, p.actor, p.reason])).toEqual(
        expect.arrayContaining([
          ['queue', 'default', 'operator:ops-lead', 'maintenance'],
          ['operation', 'test.echo', 'operator:ops-lead', null],
        ]),
      );
      expect(pauses).toHaveLength(2);
      const listed = (await (await r.req('/api/queues', { token: viewer })).json()) as {
        queues: { name: string; paused: { actor: string } | null; counts: object }[];
        pauses: unknown[];
      };
      expect(listed.pauses).toHaveLength(2);
      expect(listed.queues.find((q) => q.name === 'default')).toMatchObject({
        paused: { actor: 'operator:ops-lead' },
        counts: { QUEUED: 1 },
      });

      const resumed = await r.req('/api/queues/default/resume', post({}, admin));
      expect(await resumed.json()).toEqual({
        kind: 'queue',
        name: 'default',
        paused: false,
        changed: true,
      });
      await r.req('/api/queues/test.echo/resume', post({ operation: true }, admin));
      expect(await other.queues.paused()).toEqual([]);
    } finally {
      await other.close();
    }
  });

  it('serves an OpenAPI 3.1 document made from the request schemas', async () => {
    const r = await rig(kind);
    const doc = (await (await r.req('/api/openapi.json')).json()) as {
      openapi: string;
      paths: Record<
        string,
        Record<
          string,
          { requestBody?: { content: Record<string, { schema: { properties?: object } }> } }
        >
      >;
    };
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        '/jobs',
        '/jobs/batch',
        '/call',
        '/approvals/{id}',
        '/review/{id}/resolve',
        '/queues',
        '/queues/{name}/pause',
        '/queues/{name}/resume',
      ]),
    );
    const enqueue = doc.paths['/jobs']!.post!.requestBody!.content['application/json']!.schema;
    expect(Object.keys(enqueue.properties!)).toEqual(
      expect.arrayContaining(['operation', 'input', 'key']),
    );
    const decide =
      doc.paths['/approvals/{id}']!.post!.requestBody!.content['application/json']!.schema;
    expect(Object.keys(decide.properties!)).not.toContain('actor');
  });

  it('every response carries the CSP, frame-ancestors none and no-store', async () => {
    const r = await rig(kind);
    for (const path of ['/', '/api/jobs', '/api/nope']) {
      const res = await r.req(path);
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp, path).toContain("default-src 'self'");
      expect(csp, path).toContain("frame-ancestors 'none'");
      expect(res.headers.get('cache-control'), path).toBe('no-store');
    }
  });
});

function form(): Record<string, string> {
  return { 'content-type': 'application/x-www-form-urlencoded' };
}

/** The session's form token, as a page of the console would have it. */
async function csrfOf(r: Rig, cookie: string): Promise<string> {
  const res = await r.req('/api/session', { headers: { cookie } });
  expect(res.status).toBe(200);
  const s = (await res.json()) as { csrfToken: string };
  return s.csrfToken;
}
