/**
 * The fake downstream itself: if its ledger lied, every reliability verdict would be worthless.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  DownstreamClient,
  randomPolicy,
  scripted,
  startDownstream,
  type Downstream,
  type DownstreamOptions,
} from '../src/testkit/index.js';
import { childConfigFromEnv, childEnv } from '../src/testkit/index.js';

const open: Downstream[] = [];
afterEach(async () => {
  while (open.length) await open.pop()!.close();
});

async function service(options: DownstreamOptions = {}) {
  const d = await startDownstream(options);
  open.push(d);
  return { d, client: new DownstreamClient(d.url) };
}

describe('downstream ledger', () => {
  it('honours Idempotency-Key when asked: a second request replays the first answer, no second effect', async () => {
    const { d, client } = await service({ honourIdempotencyKey: true });
    const a = await client.post('k1', { x: 1 }, { idempotencyKey: 'k1' });
    const b = await client.post('k1', { x: 1 }, { idempotencyKey: 'k1' });
    expect(a.status).toBe(200);
    expect(b.body).toEqual({ ...a.body, replayed: true });
    expect(d.effectsOf('k1')).toBe(1);
    expect(d.requestsOf('k1')).toBe(2);
    expect(d.duplicates()).toEqual([]);
  });

  it('by default the key is not honoured: the same request twice is two effects, and duplicates() says so', async () => {
    const { d, client } = await service();
    await client.post('k1', {}, { idempotencyKey: 'k1' });
    await client.post('k1', {}, { idempotencyKey: 'k1' });
    expect(d.ledger()).toEqual(new Map([['k1', 2]]));
    expect(d.duplicates()).toEqual([{ key: 'k1', effects: 2 }]);
  });

  it('answers lookups by key: succeeded, failed, or 404', async () => {
    const { client } = await service({
      behaviour: scripted({ bad: [{ action: 'fail', status: 402 }] }),
    });
    const ok = await client.post('good', {}, { idempotencyKey: 'good' });
    const refused = await client.post('bad', {}, { idempotencyKey: 'bad' });
    expect(refused.status).toBe(402);
    expect(await client.lookup('good')).toEqual({
      found: true,
      outcome: 'succeeded',
      result: { effectId: ok.body.effectId, key: 'good' },
    });
    expect(await client.lookup('bad')).toMatchObject({
      found: true,
      outcome: 'failed',
      status: 402,
    });
    expect(await client.lookup('never')).toEqual({ found: false });
  });

  it('a lookup-less service refuses lookups', async () => {
    const { client } = await service({ lookup: false });
    await expect(client.lookup('k')).rejects.toThrow(/501/);
  });

  it('5xx and reset commit nothing; drop commits and loses the answer; delay delays', async () => {
    const { d, client } = await service({
      behaviour: scripted({
        e: [{ action: 'error', status: 500 }],
        r: [{ action: 'reset' }],
        x: [{ action: 'drop' }],
        s: [{ action: 'ok', delayMs: 150 }],
      }),
    });
    expect((await client.post('e', {})).status).toBe(500);
    await expect(client.post('r', {})).rejects.toMatchObject({ code: 'ECONNRESET' });
    await expect(client.post('x', {})).rejects.toThrow();
    const t0 = Date.now();
    expect((await client.post('s', {})).status).toBe(200);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(140);
    expect(Object.fromEntries(d.ledger())).toEqual({ x: 1, s: 1 });
    expect(d.stats.byAction).toMatchObject({ error: 1, reset: 1, drop: 1, ok: 1 });
  });

  it('a request with the same key still in progress gets 409, not a second effect', async () => {
    const { d, client } = await service({
      honourIdempotencyKey: true,
      behaviour: () => ({ action: 'ok', delayMs: 100 }),
    });
    const [a, b] = await Promise.all([
      client.post('k', {}, { idempotencyKey: 'k' }),
      new Promise((r) => setTimeout(r, 20)).then(() =>
        client.post('k', {}, { idempotencyKey: 'k' }),
      ),
    ]);
    expect([a.status, b.status]).toEqual([200, 409]);
    expect(d.effectsOf('k')).toBe(1);
  });

  it('randomPolicy depends only on seed, key and request number', () => {
    const weights = { ok: 1, fail: 1, error: 1, reset: 1, drop: 1, delayProbability: 0.5 };
    const p1 = randomPolicy(9, weights);
    const p2 = randomPolicy(9, weights);
    const req = (key: string, nth: number) => ({ key, nth, idempotencyKey: key });
    const keys = Array.from({ length: 50 }, (_, i) => `k${i}`);
    expect(keys.map((k) => p1(req(k, 1)))).toEqual(
      [...keys]
        .reverse()
        .map((k) => p2(req(k, 1)))
        .reverse(),
    );
    expect(new Set(keys.map((k) => p1(req(k, 1)).action)).size).toBe(5);
  });
});

describe('worker child configuration', () => {
  it('round-trips through the environment and rejects nonsense', () => {
    const env = childEnv({
      storeUrl: 'sqlite:/tmp/x.db',
      downstreamUrl: 'http://127.0.0.1:1',
      flavours: ['lookup'],
      concurrency: 3,
      faults: 'after-attempt-commit=kill',
    });
    expect(childConfigFromEnv(env)).toMatchObject({
      storeUrl: 'sqlite:/tmp/x.db',
      flavours: ['lookup'],
      concurrency: 3,
      faults: 'after-attempt-commit=kill',
    });
    expect(() => childConfigFromEnv({ ...env, WORKER_FLAVOURS: 'magic' })).toThrow(
      /unknown flavour/,
    );
    expect(() => childConfigFromEnv({ ...env, WORKER_LEASE_MS: '-5' })).toThrow(/WORKER_LEASE_MS/);
    expect(() => childConfigFromEnv({ DOWNSTREAM_URL: 'x' })).toThrow(/RECKON_STORE/);
  });
});
