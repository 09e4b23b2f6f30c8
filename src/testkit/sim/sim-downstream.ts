/**
 * The simulated downstream and the operations that call it. Requests and answers are events of
 * the world: a request leaves with its sender's event, arrives after a seeded latency (whatever
 * happened to the sender meanwhile), commits its effect, and answers, or loses its answer.
 * The ledger counts effects per request key: the business outcome the verdict judges.
 */
import { DefiniteFailure } from '../../core/errors.js';
import { defineOperation, type AnyOperation, type LookupResult } from '../../core/operation.js';
import type { EffectLedger } from '../verdict.js';
import type { SimProcess, World } from './world.js';

export const SIM_FLAVOURS = ['lookup', 'idempotent', 'none', 'approved'] as const;
export type SimFlavour = (typeof SIM_FLAVOURS)[number];

export interface DownstreamRates {
  /** The effect commits, the answer is lost (the caller times out: UNKNOWN). */
  drop: number;
  /** A definitive refusal (422): no effect. */
  refuse: number;
  /** A 5xx after the effect committed: not proof either way. */
  error: number;
  /** Share of requests that are slow (up to `slowMsMax`). */
  slow: number;
  latencyMsMax: number;
  slowMsMax: number;
  /**
   * Share of the slow requests that arrive late, from `lateMsMin` on (past their attempt's
   * timeout): still in flight when the sender's attempt is marked UNKNOWN.
   */
  late: number;
  lateMsMin: number;
  /** Share of lookups that fail (inconclusive), and how far a lookup's view lags its writes. */
  lookupFail: number;
  lookupLagMsMax: number;
  /** Connections refused (ECONNREFUSED: provably not sent) until then. */
  downUntil: number;
  /** Answers 429 (not processed) until then. */
  throttledUntil: number;
}

export const HEALTHY: DownstreamRates = {
  drop: 0,
  refuse: 0,
  error: 0,
  slow: 0,
  latencyMsMax: 20,
  slowMsMax: 0,
  late: 0,
  lateMsMin: 0,
  lookupFail: 0,
  lookupLagMsMax: 0,
  downUntil: 0,
  throttledUntil: 0,
};

class Throttled extends Error {
  readonly status = 429;
  constructor() {
    super('downstream answered HTTP 429');
  }
}

function connError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

export class SimDownstream implements EffectLedger {
  rates: DownstreamRates = HEALTHY;
  private readonly effects = new Map<string, number[]>();
  /** Requests sent and not yet arrived, per key (an operator waits for none before deciding). */
  readonly inFlight = new Map<string, number>();
  requests = 0;

  constructor(private readonly world: World) {}

  effectsOf(key: string): number {
    return this.effects.get(key)?.length ?? 0;
  }

  effectKeys(): Iterable<string> {
    return this.effects.keys();
  }

  send(p: {
    proc: SimProcess;
    key: string;
    dedup: boolean;
    signal: AbortSignal;
  }): Promise<{ effectId: string }> {
    const { world } = this;
    return new Promise((resolve, reject) => {
      const answer = (fn: () => void) =>
        world.schedule(world.int(0, this.rates.latencyMsMax), p.proc, 'downstream.reply', fn);
      // The request leaves with its sender's next event: a crash before it, and nothing left.
      world.schedule(0, p.proc, 'downstream.send', () => {
        if (p.signal.aborted) return reject(p.signal.reason as Error);
        p.signal.addEventListener('abort', () => reject(p.signal.reason as Error), { once: true });
        if (world.now < this.rates.downUntil) {
          world.log(p.proc, `send ${p.key}: connection refused`);
          return void answer(() => reject(connError('ECONNREFUSED', 'connect ECONNREFUSED')));
        }
        const { rates } = this;
        const slow = world.chance(rates.slow);
        const late = slow && world.chance(rates.late);
        const latency = world.int(
          late ? rates.lateMsMin : 0,
          slow ? rates.slowMsMax : rates.latencyMsMax,
        );
        this.inFlight.set(p.key, (this.inFlight.get(p.key) ?? 0) + 1);
        world.log(p.proc, `send ${p.key}${slow ? ` (slow: ${latency} ms)` : ''}`);
        world.schedule(latency, null, 'downstream.arrive', () => {
          this.inFlight.set(p.key, this.inFlight.get(p.key)! - 1);
          this.arrive(p.key, p.dedup, p.proc, answer, resolve, reject);
        });
      });
    });
  }

  private arrive(
    key: string,
    dedup: boolean,
    proc: SimProcess,
    answer: (fn: () => void) => void,
    resolve: (r: { effectId: string }) => void,
    reject: (e: unknown) => void,
  ): void {
    const { world } = this;
    this.requests++;
    if (world.now < this.rates.throttledUntil) {
      world.log('downstream', `${key} from ${proc.name}: 429`);
      return answer(() => reject(new Throttled()));
    }
    const list = this.effects.get(key) ?? [];
    // A key it has seen is answered with its first answer: never refused afterwards.
    const repeat = dedup && list.length > 0;
    if (!repeat && world.chance(this.rates.refuse)) {
      world.log('downstream', `${key} from ${proc.name}: refused (422)`);
      return answer(() => reject(new DefiniteFailure('downstream refused: HTTP 422')));
    }
    if (!repeat) {
      list.push(world.now);
      this.effects.set(key, list);
    }
    const effectId = `${key}#1`;
    world.log('downstream', `${key} from ${proc.name}: effect ${list.length}`);
    if (world.chance(this.rates.drop)) return world.log('downstream', `${key}: answer lost`);
    if (world.chance(this.rates.error))
      return answer(() => reject(new Error('downstream answered HTTP 503')));
    answer(() => resolve({ effectId }));
  }

  lookup(proc: SimProcess, key: string, signal: AbortSignal): Promise<LookupResult> {
    const { world } = this;
    return new Promise((resolve, reject) => {
      signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
      world.schedule(world.int(0, this.rates.latencyMsMax), null, 'downstream.lookup', () => {
        const fail = world.chance(this.rates.lookupFail);
        // Its view lags its writes by up to the lag: an effect that recent is not seen yet.
        const seenUpTo = world.now - world.int(0, this.rates.lookupLagMsMax);
        const found = (this.effects.get(key) ?? []).some((at) => at <= seenUpTo);
        world.log(
          'downstream',
          `lookup ${key}: ${fail ? 'failed' : found ? 'found' : 'not found'}`,
        );
        world.schedule(world.int(0, this.rates.latencyMsMax), proc, 'lookup.reply', () =>
          fail
            ? reject(new Error('lookup failed: HTTP 503'))
            : resolve(
                found
                  ? { found: true, outcome: 'succeeded', result: { effectId: `${key}#1` } }
                  : { found: false },
              ),
        );
      });
    });
  }
}

export interface SimOperationSettings {
  timeoutMs: number;
  graceMs: number;
  maxAttempts: number;
  approvalTimeoutMs: number;
}

export function simOperationName(flavour: SimFlavour): string {
  return `sim.${flavour}`;
}

/**
 * The operation of a flavour as one process runs it (its requests leave with its events).
 * `old`: the version of an older release, before the downstream's lookup was wired in (an
 * UNKNOWN attempt goes to review, checked at once).
 */
export function simOperation(
  flavour: SimFlavour,
  s: SimOperationSettings,
  downstream: SimDownstream,
  proc: SimProcess,
  old = false,
): AnyOperation {
  const dedup = flavour === 'idempotent';
  const lookup = !old && (flavour === 'lookup' || flavour === 'approved');
  return defineOperation<{ n: number }, { effectId: string }>({
    name: simOperationName(flavour),
    fingerprint: (input) => ({ n: input.n }),
    idempotentWithKey: dedup,
    ...(lookup
      ? { lookup: (key: string, _i: unknown, ctx) => downstream.lookup(proc, key, ctx.signal) }
      : {}),
    classify: (err) => (err instanceof Throttled ? 'retryable-failure' : undefined),
    execute: (_input, ctx) =>
      ctx.dispatch(() => downstream.send({ proc, key: ctx.requestKey, dedup, signal: ctx.signal })),
    timeoutMs: s.timeoutMs,
    reconcile: { graceMs: s.graceMs, lookupBackoffMs: 200, lookupBackoffMaxMs: 2_000 },
    retry: { maxAttempts: s.maxAttempts, backoff: { initialMs: 100, factor: 2, maxMs: 1_000 } },
    ...(flavour === 'approved' ? { approval: true, approvalTimeoutMs: s.approvalTimeoutMs } : {}),
  });
}
