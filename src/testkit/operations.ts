/**
 * Operations against the fake downstream, shared by in-process tests, the worker child and
 * the demo. Three flavours, one per recovery path of DESIGN §4:
 *
 *  - `lookup`:     the downstream answers `GET /effects/:key`; an UNKNOWN attempt is settled by asking;
 *  - `idempotent`: the downstream deduplicates by Idempotency-Key; an UNKNOWN attempt is retried with the same key;
 *  - `none`:       neither; an UNKNOWN attempt goes to NEEDS_REVIEW, the only honest answer.
 */
import { DefiniteFailure } from '../core/errors.js';
import { defineOperation, type Operation } from '../core/operation.js';
import type { BackoffPolicy } from '../core/retry.js';
import { DownstreamClient, type EffectResult } from './downstream.js';

export const FLAVOURS = ['lookup', 'idempotent', 'none'] as const;
export type Flavour = (typeof FLAVOURS)[number];

export interface EffectInput {
  /** Anything that identifies the request; it is the fingerprint. */
  n: number;
  note?: string;
}

export interface DownstreamOperationOptions {
  /** Base URL of the downstream, e.g. `http://127.0.0.1:4321`. */
  url: string;
  /** Longest an attempt may wait for its answer. Default 1000 ms, short for tests. */
  timeoutMs?: number;
  /** Wait after dispatched_at + timeoutMs before the first lookup. Default 200 ms. */
  graceMs?: number;
  maxAttempts?: number;
  backoff?: Partial<BackoffPolicy>;
}

/** Answers that are the downstream's definitive "no": nothing happened, and asking again will not help. */
export const DEFINITIVE_STATUSES: ReadonlySet<number> = new Set([400, 402, 403, 422]);

export function operationName(flavour: Flavour): string {
  return `downstream.effect.${flavour}`;
}

export function isFlavour(value: unknown): value is Flavour {
  return typeof value === 'string' && (FLAVOURS as readonly string[]).includes(value);
}

export function downstreamOperation(
  flavour: Flavour,
  options: DownstreamOperationOptions,
): Operation<EffectInput, EffectResult> {
  const client = new DownstreamClient(options.url);
  return defineOperation<EffectInput, EffectResult>({
    name: operationName(flavour),
    fingerprint: (input) => ({ n: input.n }),
    idempotentWithKey: flavour === 'idempotent',
    ...(flavour === 'lookup'
      ? {
          async lookup(requestKey, _input, ctx) {
            const answer = await client.lookup(requestKey, { signal: ctx.signal });
            if (!answer.found) return { found: false };
            if (answer.outcome === 'succeeded')
              return { found: true, outcome: 'succeeded', result: answer.result };
            return { found: true, outcome: 'failed', error: answer.error, retryable: false };
          },
        }
      : {}),
    execute: (input, ctx) =>
      ctx.dispatch(async () => {
        const res = await client.post(ctx.requestKey, input, {
          idempotencyKey: ctx.requestKey,
          signal: ctx.signal,
        });
        if (DEFINITIVE_STATUSES.has(res.status))
          throw new DefiniteFailure(`downstream refused: HTTP ${res.status}`, {
            retryable: false,
            details: res.body,
          });
        // 409 (same key in progress), 5xx, anything else: not proof either way.
        if (res.status !== 200) throw new Error(`downstream answered HTTP ${res.status}`);
        const body = res.body as { effectId?: unknown; key?: unknown };
        return { effectId: String(body.effectId), key: String(body.key) };
      }),
    timeoutMs: options.timeoutMs ?? 1_000,
    reconcile: { graceMs: options.graceMs ?? 200, lookupBackoffMs: 100, lookupBackoffMaxMs: 1_000 },
    retry: {
      maxAttempts: options.maxAttempts ?? 5,
      backoff: { initialMs: 50, factor: 2, maxMs: 500, ...(options.backoff ?? {}) },
    },
  });
}

/** One operation per flavour, for a worker that serves them all. */
export function downstreamOperations(
  options: DownstreamOperationOptions,
  flavours: readonly Flavour[] = FLAVOURS,
): Operation<EffectInput, EffectResult>[] {
  return flavours.map((f) => downstreamOperation(f, options));
}
