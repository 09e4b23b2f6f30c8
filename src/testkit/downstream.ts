/**
 * A fake downstream service for reliability tests: an HTTP server on loopback that keeps a
 * ledger of the effects it committed per request key, and misbehaves on request the way real
 * services do (slow, definitive refusals, 5xx, resets before committing, and the worst one:
 * committing the effect and then losing the response).
 *
 * Wire protocol (JSON bodies):
 *   POST /effects          body { key, payload }, header Idempotency-Key (optional),
 *                          header X-Reckon-Worker-Pid (the sending process, for kill-on-receipt)
 *                          200 { effectId, key, replayed } | 4xx/5xx { error }
 *   GET  /effects/:key     200 { found: true, outcome: 'succeeded', result }
 *                          200 { found: true, outcome: 'failed', error, status }
 *                          404 { found: false }        (501 when lookups are disabled)
 *
 * The ledger counts committed effects per key, whatever the idempotency settings: it is the
 * business truth the tests judge reckon by.
 */
import {
  createServer,
  request,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { mulberry32 } from '../runtime/faults.js';

export const BEHAVIOUR_ACTIONS = ['ok', 'fail', 'error', 'reset', 'drop'] as const;

/** What the service does with one POST. */
export interface Behaviour {
  /**
   * - `ok`: commit the effect and answer 200;
   * - `fail`: refuse definitively (no effect), with `status` (default 422);
   * - `error`: answer a 5xx (`status`, default 503) without committing;
   * - `reset`: reset the connection before committing (no effect);
   * - `drop`: commit the effect, then destroy the socket without answering.
   */
  action: (typeof BEHAVIOUR_ACTIONS)[number];
  /** Wait this long after the request arrived before acting. */
  delayMs?: number;
  status?: number;
}

export interface RequestInfo {
  key: string;
  /** 1 for the first POST with this key, 2 for the second, … */
  nth: number;
  idempotencyKey: string | null;
  /** The process that sent it (`X-Reckon-Worker-Pid`), when the client said. */
  pid?: number | null;
}

/** Chooses a behaviour per request. */
export type BehaviourPolicy = (req: RequestInfo) => Behaviour;

export interface DownstreamOptions {
  /**
   * A second request with the same Idempotency-Key replays the first answer, without a new
   * effect: true, or for the keys this accepts. Default false: every request that arrives is
   * acted on, so a resent request is a second effect the ledger counts (a test asks for a
   * deduplicating downstream only where the operation declares `idempotentWithKey`).
   */
  honourIdempotencyKey?: boolean | ((key: string) => boolean);
  /** Serve `GET /effects/:key`. Default true. */
  lookup?: boolean;
  /** Default: every request succeeds at once. */
  behaviour?: BehaviourPolicy;
}

export type LedgerEntry =
  | { outcome: 'succeeded'; result: EffectResult }
  | { outcome: 'failed'; status: number; error: string };

export interface EffectResult {
  effectId: string;
  key: string;
}

export interface DownstreamStats {
  requests: number;
  lookups: number;
  effects: number;
  replays: number;
  byAction: Record<Behaviour['action'], number>;
}

export const OK: Behaviour = { action: 'ok' };

/** Per key, a queue of behaviours for its 1st, 2nd, … request; `fallback` after that and for other keys. */
export function scripted(
  script: Record<string, Behaviour[]>,
  fallback: Behaviour = OK,
): BehaviourPolicy {
  return ({ key, nth }) => script[key]?.[nth - 1] ?? fallback;
}

export interface RandomPolicyWeights {
  ok?: number;
  fail?: number;
  error?: number;
  reset?: number;
  drop?: number;
  /** Probability that a request is delayed, and the longest delay. */
  delayProbability?: number;
  delayMsMax?: number;
}

/**
 * What is wrong with these weights, or undefined: every number finite and at least 0, the delay
 * probability at most 1, and some answer above 0 (`ok` counts 1 when left out, as in
 * `randomPolicy`).
 */
export function weightsProblem(weights: RandomPolicyWeights): string | undefined {
  for (const [name, value] of Object.entries(weights))
    if (!(Number.isFinite(value) && value >= 0)) return `${name} must be a number of at least 0`;
  if ((weights.delayProbability ?? 0) > 1) return 'delayProbability must be at most 1';
  const w = { ok: 1, ...weights };
  if (!BEHAVIOUR_ACTIONS.some((a) => (w[a] ?? 0) > 0))
    return 'weights leave every answer at weight 0';
  return undefined;
}

/**
 * A seeded policy: the behaviour of the nth request of a key depends only on (seed, key, nth),
 * so a run replays from its seed whatever order the requests arrive in. Weights that
 * `weightsProblem` refuses throw a RangeError.
 */
export function randomPolicy(seed: number, weights: RandomPolicyWeights = {}): BehaviourPolicy {
  const problem = weightsProblem(weights);
  if (problem) throw new RangeError(`downstream ${problem}`);
  const w = { ok: 1, fail: 0, error: 0, reset: 0, drop: 0, ...weights };
  const actions = BEHAVIOUR_ACTIONS.filter((a) => w[a] > 0);
  const total = actions.reduce((s, a) => s + w[a], 0);
  return ({ key, nth }) => {
    const rand = mulberry32(hashOf(`${seed}:${key}:${nth}`));
    let pick = rand() * total;
    let action: Behaviour['action'] = 'ok';
    for (const a of actions) {
      pick -= w[a];
      if (pick < 0) {
        action = a;
        break;
      }
    }
    const delayed = rand() < (weights.delayProbability ?? 0);
    return {
      action,
      ...(delayed ? { delayMs: Math.floor(rand() * (weights.delayMsMax ?? 200)) } : {}),
    };
  };
}

function hashOf(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}

const BODY_BYTES_MAX = 64 * 1024;

export class Downstream {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private readonly effects = new Map<string, number>();
  private readonly outcomes = new Map<string, LedgerEntry>();
  private readonly inProgress = new Set<string>();
  private readonly posts = new Map<string, number>();
  private nextEffect = 1;
  private policy: BehaviourPolicy;
  readonly stats: DownstreamStats = {
    requests: 0,
    lookups: 0,
    effects: 0,
    replays: 0,
    byAction: { ok: 0, fail: 0, error: 0, reset: 0, drop: 0 },
  };
  /**
   * Called when a POST arrives, before it is acted on: the request has left its worker. Tests
   * and the chaos harness use it to kill the sender here (`RequestInfo.pid`), which models a
   * worker that died after its request left and before the answer came back.
   */
  onRequest: ((req: RequestInfo) => void) | undefined;
  /** Called right after an effect is committed. */
  onEffect: ((key: string, count: number) => void) | undefined;

  constructor(private readonly options: DownstreamOptions = {}) {
    this.policy = options.behaviour ?? (() => OK);
  }

  /** Listens on 127.0.0.1 on a free port. */
  async start(): Promise<this> {
    const server = createServer((req, res) => this.handle(req, res));
    server.keepAliveTimeout = 1_000;
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.once('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    this.server = server;
    return this;
  }

  get url(): string {
    const addr = this.server?.address() as AddressInfo | null | undefined;
    if (!addr) throw new Error('the downstream is not listening; call start() first');
    return `http://127.0.0.1:${addr.port}`;
  }

  setBehaviour(policy: BehaviourPolicy): void {
    this.policy = policy;
  }

  /** Committed effects per request key. */
  ledger(): Map<string, number> {
    return new Map(this.effects);
  }

  effectsOf(key: string): number {
    return this.effects.get(key) ?? 0;
  }

  /** Every key with a committed effect. */
  effectKeys(): Iterable<string> {
    return this.effects.keys();
  }

  /** POSTs received for a key (each attempt that reached the service). */
  requestsOf(key: string): number {
    return this.posts.get(key) ?? 0;
  }

  /** Keys whose effect was committed more than once: must always be empty. */
  duplicates(): { key: string; effects: number }[] {
    return [...this.effects].filter(([, n]) => n > 1).map(([key, effects]) => ({ key, effects }));
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  // ---------------------------------------------------------------- handling

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://downstream');
    if (req.method === 'GET' && url.pathname.startsWith('/effects/')) {
      this.lookup(decodeURIComponent(url.pathname.slice('/effects/'.length)), res);
      return;
    }
    if (req.method === 'POST' && url.pathname === '/effects') {
      readBody(req)
        .then((body) => this.post(req, res, body))
        .catch((err: unknown) => send(res, 400, { error: String(err) }));
      return;
    }
    send(res, 404, { error: 'no such route' });
  }

  private lookup(key: string, res: ServerResponse): void {
    this.stats.lookups++;
    if (this.options.lookup === false) return send(res, 501, { error: 'lookups not supported' });
    const entry = this.outcomes.get(key);
    if (!entry) return send(res, 404, { found: false });
    if (entry.outcome === 'succeeded')
      return send(res, 200, { found: true, outcome: 'succeeded', result: entry.result });
    return send(res, 200, {
      found: true,
      outcome: 'failed',
      status: entry.status,
      error: entry.error,
    });
  }

  private honours(key: string): boolean {
    const h = this.options.honourIdempotencyKey ?? false;
    return typeof h === 'function' ? h(key) : h;
  }

  private async post(req: IncomingMessage, res: ServerResponse, raw: string): Promise<void> {
    let body: { key?: unknown; payload?: unknown };
    try {
      body = JSON.parse(raw) as typeof body;
    } catch {
      return send(res, 400, { error: 'body is not JSON' });
    }
    const header = req.headers['idempotency-key'];
    const idempotencyKey = typeof header === 'string' ? header : null;
    const key = typeof body.key === 'string' ? body.key : idempotencyKey;
    if (!key) return send(res, 400, { error: 'a request needs a key' });
    this.stats.requests++;
    const nth = (this.posts.get(key) ?? 0) + 1;
    this.posts.set(key, nth);
    const pidHeader = Number(req.headers['x-reckon-worker-pid']);
    const pid = Number.isInteger(pidHeader) && pidHeader > 0 ? pidHeader : null;
    const info: RequestInfo = { key, nth, idempotencyKey, pid };
    this.onRequest?.(info);
    const honoured = idempotencyKey !== null && this.honours(idempotencyKey);
    if (honoured) {
      const previous = this.outcomes.get(idempotencyKey);
      if (previous) {
        this.stats.replays++;
        return previous.outcome === 'succeeded'
          ? send(res, 200, { ...previous.result, replayed: true })
          : send(res, previous.status, { error: previous.error, replayed: true });
      }
      // A concurrent request with the same key: not definitive, the client must not assume.
      if (this.inProgress.has(idempotencyKey))
        return send(res, 409, { error: 'a request with this key is in progress' });
      this.inProgress.add(idempotencyKey);
    }
    try {
      const b = this.policy(info);
      this.stats.byAction[b.action]++;
      if (b.delayMs) await new Promise((r) => setTimeout(r, b.delayMs));
      this.act(b, key, res);
    } finally {
      if (honoured) this.inProgress.delete(idempotencyKey);
    }
  }

  private act(b: Behaviour, key: string, res: ServerResponse): void {
    switch (b.action) {
      case 'ok':
        return send(res, 200, { ...this.commit(key), replayed: false });
      case 'drop':
        this.commit(key);
        res.socket?.destroy();
        return;
      case 'fail': {
        const status = b.status ?? 422;
        const error = `refused with ${status}`;
        this.outcomes.set(key, { outcome: 'failed', status, error });
        return send(res, status, { error });
      }
      case 'error':
        return send(res, b.status ?? 503, { error: 'service unavailable' });
      case 'reset': {
        // An RST, not a FIN: the client sees ECONNRESET, as when a proxy or the host dies.
        res.socket?.resetAndDestroy();
        return;
      }
    }
  }

  private commit(key: string): EffectResult {
    const count = (this.effects.get(key) ?? 0) + 1;
    this.effects.set(key, count);
    this.stats.effects++;
    const result: EffectResult = { effectId: `eff_${this.nextEffect++}`, key };
    // A lookup reports the first effect; a duplicate would show in the ledger, not here.
    if (this.outcomes.get(key)?.outcome !== 'succeeded')
      this.outcomes.set(key, { outcome: 'succeeded', result });
    this.onEffect?.(key, count);
    return result;
  }
}

export async function startDownstream(options: DownstreamOptions = {}): Promise<Downstream> {
  return new Downstream(options).start();
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > BODY_BYTES_MAX) {
        reject(new Error('body too large'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

// ------------------------------------------------------------------ client

export interface DownstreamResponse<T = unknown> {
  status: number;
  body: T;
}

export type LookupAnswer =
  | { found: true; outcome: 'succeeded'; result: EffectResult }
  | { found: true; outcome: 'failed'; status: number; error: string }
  | { found: false };

/**
 * A small client for the downstream. One connection per request (no keep-alive), so that a
 * reset or a dropped response concerns exactly one request.
 */
export class DownstreamClient {
  constructor(readonly baseUrl: string) {}

  post(
    key: string,
    payload: unknown,
    options: { idempotencyKey?: string; signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<DownstreamResponse<Record<string, unknown>>> {
    // Who sent it, so that a test can kill exactly this process when the request arrives.
    const headers: Record<string, string> = { 'x-reckon-worker-pid': String(process.pid) };
    if (options.idempotencyKey) headers['idempotency-key'] = options.idempotencyKey;
    return this.call('POST', '/effects', JSON.stringify({ key, payload }), headers, options);
  }

  async lookup(key: string, options: { signal?: AbortSignal } = {}): Promise<LookupAnswer> {
    const res = await this.call<LookupAnswer>(
      'GET',
      `/effects/${encodeURIComponent(key)}`,
      null,
      {},
      options,
    );
    if (res.status === 404) return { found: false };
    if (res.status !== 200) throw new Error(`lookup answered HTTP ${res.status}`);
    return res.body;
  }

  private call<T>(
    method: string,
    path: string,
    body: string | null,
    headers: Record<string, string>,
    options: { signal?: AbortSignal; timeoutMs?: number },
  ): Promise<DownstreamResponse<T>> {
    return new Promise((resolve, reject) => {
      const req = request(
        new URL(path, this.baseUrl),
        {
          method,
          agent: false,
          headers: {
            ...headers,
            connection: 'close',
            ...(body !== null
              ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
              : {}),
          },
          ...(options.signal ? { signal: options.signal } : {}),
          ...(options.timeoutMs ? { timeout: options.timeoutMs } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            try {
              resolve({ status: res.statusCode ?? 0, body: JSON.parse(text || 'null') as T });
            } catch (err) {
              reject(err instanceof Error ? err : new Error(String(err)));
            }
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${options.timeoutMs} ms`)));
      req.on('error', reject);
      req.end(body ?? undefined);
    });
  }
}
