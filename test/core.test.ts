import { describe, expect, it } from 'vitest';
import { decideAfterAttempt, decideAfterLookup, decideSameKeyRetry } from '../src/core/decide.js';
import { IllegalTransition, InvalidInput } from '../src/core/errors.js';
import { canonicalJson, encodePayload, fingerprintOf, sha256Hex } from '../src/core/json.js';
import { defineOperation } from '../src/core/operation.js';
import { backoffDelayMs } from '../src/core/retry.js';
import {
  ATTEMPT_STATES,
  assertAttemptTransition,
  assertJobTransition,
  canTransitionJob,
  JOB_STATES,
  type AttemptState,
  type JobState,
} from '../src/core/states.js';

const policy = {
  maxAttempts: 3,
  backoff: { initialMs: 100, factor: 2, maxMs: 1_000 },
  jitterSeed: 7,
};

describe('transition table', () => {
  it('lets nothing leave a terminal state', () => {
    for (const from of ['SUCCEEDED', 'FAILED', 'CANCELLED'] as const) {
      for (const to of JOB_STATES) expect(canTransitionJob(from, to)).toBe(false);
    }
  });

  it('throws on an illegal transition instead of ignoring it', () => {
    expect(() => assertJobTransition('QUEUED', 'SUCCEEDED')).toThrow(IllegalTransition);
    expect(() => assertJobTransition('UNKNOWN', 'LEASED')).toThrow(/UNKNOWN -> LEASED/);
    expect(() => assertAttemptTransition('UNKNOWN', 'SUCCEEDED')).toThrow(IllegalTransition);
    expect(() => assertAttemptTransition('LEASED', 'UNKNOWN')).not.toThrow();
  });

  it('is exactly this table: every allowed and every forbidden job and attempt move', () => {
    // Written out, not derived from the code: adding a move (AWAITING_APPROVAL -> LEASED,
    // UNKNOWN -> CANCELLED, ...) or dropping one fails here, so such a change is a decision.
    const JOB: Record<JobState, JobState[]> = {
      AWAITING_APPROVAL: ['QUEUED', 'NEEDS_REVIEW', 'CANCELLED'],
      QUEUED: ['LEASED', 'CANCELLED'],
      LEASED: ['QUEUED', 'SUCCEEDED', 'FAILED', 'UNKNOWN', 'NEEDS_REVIEW', 'CANCELLED'],
      UNKNOWN: ['QUEUED', 'SUCCEEDED', 'FAILED', 'NEEDS_REVIEW'],
      NEEDS_REVIEW: ['QUEUED', 'SUCCEEDED', 'FAILED'],
      SUCCEEDED: [],
      FAILED: [],
      CANCELLED: [],
    };
    const ATTEMPT: Record<AttemptState, AttemptState[]> = {
      LEASED: ['SUCCEEDED', 'FAILED_BEFORE_SEND', 'FAILED', 'UNKNOWN'],
      SUCCEEDED: [],
      FAILED_BEFORE_SEND: [],
      FAILED: [],
      UNKNOWN: [],
    };
    expect(Object.keys(JOB).sort()).toEqual([...JOB_STATES].sort());
    expect(Object.keys(ATTEMPT).sort()).toEqual([...ATTEMPT_STATES].sort());
    let pairs = 0;
    for (const from of JOB_STATES)
      for (const to of JOB_STATES) {
        const allowed = JOB[from].includes(to);
        expect({ from, to, allowed: canTransitionJob(from, to) }).toEqual({ from, to, allowed });
        if (allowed) expect(() => assertJobTransition(from, to)).not.toThrow();
        else expect(() => assertJobTransition(from, to)).toThrow(IllegalTransition);
        pairs++;
      }
    for (const from of ATTEMPT_STATES)
      for (const to of ATTEMPT_STATES) {
        const allowed = ATTEMPT[from].includes(to);
        const check = () => assertAttemptTransition(from, to);
        if (allowed) expect(check, `${from} -> ${to}`).not.toThrow();
        else expect(check, `${from} -> ${to}`).toThrow(IllegalTransition);
        pairs++;
      }
    expect(pairs).toBe(8 * 8 + 5 * 5);
  });

  it('never lets an UNKNOWN job be leased again without reconciliation', () => {
    expect(canTransitionJob('UNKNOWN', 'LEASED')).toBe(false);
    expect(canTransitionJob('UNKNOWN', 'QUEUED')).toBe(true);
  });
});

describe('canonical JSON and fingerprints', () => {
  it('ignores key order and whitespace', () => {
    expect(canonicalJson({ b: 1, a: [1, { d: 2, c: 3 }] })).toBe('{"a":[1,{"c":3,"d":2}],"b":1}');
    expect(fingerprintOf({ b: 1, a: 2 })).toBe(fingerprintOf({ a: 2, b: 1 }));
    expect(fingerprintOf({ a: 2 })).not.toBe(fingerprintOf({ a: 3 }));
    expect(fingerprintOf({ a: 1 })).toMatch(/^[0-9a-f]{64}$/);
  });

  it.each([
    ['a function', { f: () => 1 }, /function at \$\.f/],
    ['a BigInt', { n: 1n }, /BigInt at \$\.n/],
    ['undefined at the top', undefined, /undefined/],
    ['a Date', { d: new Date(0) }, /Date at \$\.d.*ISO/],
    ['a Map', { m: new Map() }, /Map at \$\.m/],
    ['NaN', { x: Number.NaN }, /non-finite/],
    ['undefined in an array', [1, undefined], /undefined at \$\[1\]/],
    ['a symbol deep down', { a: [{ b: { c: Symbol('s') } }] }, /symbol at \$\.a\[0\]\.b\.c/],
    ['a class instance', { a: new (class Point {})() }, /Point at \$\.a/],
    ['Infinity in an array', { a: [0, Number.POSITIVE_INFINITY] }, /non-finite.*\$\.a\[1\]/],
  ])('rejects %s with its path', (_name, value, message) => {
    expect(() => canonicalJson(value)).toThrow(InvalidInput);
    expect(() => canonicalJson(value)).toThrow(message);
  });

  it('rejects a cycle', () => {
    const a: Record<string, unknown> = {};
    a.self = a;
    expect(() => canonicalJson(a)).toThrow(/cycle at \$\.self/);
  });

  it('stores a payload as canonical JSON: parsing it back gives the same data, and its hash is the fingerprint', () => {
    const values: unknown[] = [
      { seq: 1, sentAt: 2 },
      { z: { y: [3, { b: null, a: 'é\u2028\ud800"\\' }] }, a: -0, n: 1e21, m: 5e-7, f: 0.1 },
      Object.assign(Object.create(null) as object, { k: 'v', 10: 'ten', 2: 'two' }),
      { dropped: undefined, kept: true, '': 'empty key', é: 1, Z: 2 },
      // eslint-disable-next-line no-sparse-arrays
      [1, , 2, [], {}],
      'text',
      -1.5,
      false,
      null,
    ];
    for (const v of values) {
      const text = encodePayload(v, 'payload', 1_000_000);
      // The same data JSON.stringify writes (key order aside), and stable through a restart.
      expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify(v)));
      expect(encodePayload(JSON.parse(text), 'payload', 1_000_000)).toBe(text);
      expect(sha256Hex(text)).toBe(fingerprintOf(v));
      expect(fingerprintOf(JSON.parse(text))).toBe(fingerprintOf(v));
    }
    expect(encodePayload({ b: [2, { d: 1, c: 0 }], a: 'x' }, 'payload', 100)).toBe(
      '{"a":"x","b":[2,{"c":0,"d":1}]}',
    );
  });

  it('accepts a shared (non-cyclic) reference', () => {
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: shared })).toBe('{"a":{"x":1},"b":{"x":1}}');
  });
});

describe('decisions', () => {
  it('retries a failure before send with backoff, then fails when out of attempts', () => {
    const first = decideAfterAttempt({ state: 'FAILED_BEFORE_SEND' }, 1, policy);
    expect(first.to).toBe('QUEUED');
    expect(first.delayMs).toBeGreaterThanOrEqual(90);
    expect(first.delayMs).toBeLessThanOrEqual(110);
    expect(decideAfterAttempt({ state: 'FAILED_BEFORE_SEND' }, 3, policy)).toEqual({
      to: 'FAILED',
    });
  });

  it('never retries an UNKNOWN attempt directly', () => {
    expect(decideAfterAttempt({ state: 'UNKNOWN' }, 1, policy)).toEqual({ to: 'UNKNOWN' });
  });

  it('retries a definite failure only when it says it is retryable', () => {
    expect(decideAfterAttempt({ state: 'FAILED', retryable: false }, 1, policy)).toEqual({
      to: 'FAILED',
    });
    expect(decideAfterAttempt({ state: 'FAILED', retryable: true }, 1, policy).to).toBe('QUEUED');
  });

  it('reads lookups: found, not found, inconclusive then review', () => {
    const lookups = { failuresSoFar: 0, max: 3, backoffMs: 100, backoffMaxMs: 1_000 };
    expect(decideAfterLookup({ kind: 'succeeded' }, 1, policy, lookups)).toMatchObject({
      resolution: 'succeeded',
      next: { to: 'SUCCEEDED' },
    });
    expect(decideAfterLookup({ kind: 'not_found' }, 1, policy, lookups)).toMatchObject({
      resolution: 'not_found',
      next: { to: 'QUEUED' },
    });
    expect(decideAfterLookup({ kind: 'not_found' }, 3, policy, lookups)).toMatchObject({
      resolution: 'not_found',
      next: { to: 'FAILED' },
    });
    const inconclusive = decideAfterLookup(
      { kind: 'inconclusive', error: new Error('x') },
      1,
      policy,
      { ...lookups, failuresSoFar: 1 },
    );
    expect(inconclusive).toEqual({ next: { to: 'UNKNOWN' }, recheckDelayMs: 200 });
    expect(
      decideAfterLookup({ kind: 'inconclusive', error: new Error('x') }, 1, policy, {
        ...lookups,
        failuresSoFar: 2,
      }),
    ).toEqual({ next: { to: 'NEEDS_REVIEW' } });
  });

  it('same-key retry goes to review when out of attempts', () => {
    expect(decideSameKeyRetry(1, policy)).toMatchObject({
      resolution: 'retry',
      next: { to: 'QUEUED' },
    });
    expect(decideSameKeyRetry(3, policy)).toEqual({ next: { to: 'NEEDS_REVIEW' } });
  });

  it('backoff grows by the factor and stops at maxMs', () => {
    const b = { initialMs: 100, factor: 2, maxMs: 1_000 };
    const delays = [2, 3, 4, 5, 6, 7].map((n) => backoffDelayMs(b, n, 1));
    expect(delays[1]! / delays[0]!).toBeGreaterThan(1.6);
    expect(Math.max(...delays)).toBeLessThanOrEqual(1_000);
    expect(backoffDelayMs(b, 2, 1)).toBe(backoffDelayMs(b, 2, 1));
  });
});

describe('defineOperation', () => {
  const execute = () => Promise.resolve(1);
  it('picks the recovery path of DESIGN §4', () => {
    expect(
      defineOperation({
        name: 'a',
        execute,
        lookup: () => Promise.resolve({ found: false as const }),
      }).recovery,
    ).toBe('lookup');
    expect(defineOperation({ name: 'b', execute, idempotentWithKey: true }).recovery).toBe(
      'same-key',
    );
    expect(defineOperation({ name: 'c', execute }).recovery).toBe('review');
  });

  it('rejects bad definitions with a clear error', () => {
    expect(() => defineOperation({ name: '', execute })).toThrow(/name "" is invalid/);
    expect(() => defineOperation({ name: 'x y', execute })).toThrow(InvalidInput);
    expect(() => defineOperation({ name: 'x', execute, retry: { maxAttempts: 0 } })).toThrow(
      /maxAttempts/,
    );
    expect(() => defineOperation({ name: 'x', execute, timeoutMs: -1 })).toThrow(/timeoutMs/);
    expect(() => defineOperation({ name: 'x' } as never)).toThrow(/execute must be a function/);
  });
});
