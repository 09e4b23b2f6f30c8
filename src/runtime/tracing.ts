/**
 * OpenTelemetry spans, when the application has `@opentelemetry/api` (an optional peer) and a
 * tracer provider registered. The API is loaded once, lazily, by `openQueue`; without it every
 * function here is a no-op that allocates nothing. With it but no SDK registered, its own no-op
 * tracer answers (no spans are recorded and no trace context is stored with jobs).
 *
 * Spans (docs/tracing.md): `reckon.enqueue` in the enqueuing code's trace, whose context
 * (W3C traceparent) is stored with the job; `reckon.attempt` in the worker, a child of that
 * context, active while the operation runs (so its HTTP client's spans are its children),
 * `reckon.dispatch` around the side effect, `reckon.lookup` for each lookup, and
 * `reckon.decision` for each person's decision.
 */
import type * as Otel from '@opentelemetry/api';
import { safeMessage } from '../core/errors.js';

type Api = typeof Otel;
let api: Api | null = null;
let loading: Promise<void> | undefined;

const TRACER = 'reckon';

/** Loads `@opentelemetry/api` if it is installed; once per process. */
export function loadTracing(): Promise<void> {
  loading ??= import('@opentelemetry/api').then(
    (m) => void (api = m),
    () => undefined,
  );
  return loading;
}

export type SpanKind = 'producer' | 'consumer' | 'client' | 'internal';
export type Attributes = Record<string, string | number | boolean>;

/** A started span, or null when tracing is off. */
export interface ReckonSpan {
  span: Otel.Span;
  context: Otel.Context;
}

function kindOf(a: Api, kind: SpanKind): Otel.SpanKind {
  const k = a.SpanKind;
  return kind === 'producer'
    ? k.PRODUCER
    : kind === 'consumer'
      ? k.CONSUMER
      : kind === 'client'
        ? k.CLIENT
        : k.INTERNAL;
}

/**
 * Starts a span, a child of `traceParent` when given (a job's stored context), else of the
 * active context. Null when tracing is off.
 */
export function startSpan(
  name: string,
  kind: SpanKind,
  attributes: Attributes,
  traceParent?: string | null,
): ReckonSpan | null {
  const a = api;
  if (!a) return null;
  let parent = a.context.active();
  if (traceParent) parent = a.propagation.extract(parent, { traceparent: traceParent });
  const span = a.trace
    .getTracer(TRACER)
    .startSpan(name, { kind: kindOf(a, kind), attributes }, parent);
  if (!span.isRecording()) return null;
  return { span, context: a.trace.setSpan(parent, span) };
}

/** The span's context as a W3C traceparent, to store with a job; null when not sampled. */
export function traceParentOf(s: ReckonSpan | null): string | null {
  if (!s || !api) return null;
  const c = s.span.spanContext();
  const flags = c.traceFlags.toString(16).padStart(2, '0');
  return `00-${c.traceId}-${c.spanId}-${flags}`;
}

/** Runs `fn` with the span active (children of it: the operation's own spans). */
export function within<T>(s: ReckonSpan | null, fn: () => T): T {
  if (!s || !api) return fn();
  return api.context.with(s.context, fn);
}

/** Ends the span with its attributes; an error marks it failed. */
export function endSpan(s: ReckonSpan | null, attributes: Attributes = {}, error?: unknown): void {
  if (!s || !api) return;
  s.span.setAttributes(attributes);
  if (error !== undefined) {
    s.span.recordException(error instanceof Error ? error : new Error(safeMessage(error)));
    s.span.setStatus({ code: api.SpanStatusCode.ERROR });
  }
  s.span.end();
}

/** Runs `fn` in a span of its own that ends when it settles. */
export async function traced<T>(
  name: string,
  kind: SpanKind,
  attributes: Attributes,
  fn: () => Promise<T>,
  traceParent?: string | null,
): Promise<T> {
  const s = startSpan(name, kind, attributes, traceParent);
  if (!s) return fn();
  try {
    const value = await within(s, fn);
    endSpan(s);
    return value;
  } catch (err) {
    endSpan(s, {}, err);
    throw err;
  }
}

interface TracedJob {
  job: { id: string; operation: string; requestKey: string; traceParent?: string | null };
  attempt: { attemptNo: number };
}

/**
 * Runs one attempt in a `reckon.attempt` span, a child of the trace context stored with its job
 * (the enqueuing code's), so the worker's spans join the agent's trace across processes.
 */
export async function tracedAttempt<
  E extends { kind: string; outcome: { state: string }; jobState?: string },
>({ job, attempt }: TracedJob, run: () => Promise<E>): Promise<E> {
  const s = startSpan(
    `reckon.attempt ${job.operation}`,
    'consumer',
    {
      'reckon.operation': job.operation,
      'reckon.job_id': job.id,
      'reckon.attempt_no': attempt.attemptNo,
      'reckon.request_key': job.requestKey,
    },
    job.traceParent,
  );
  if (!s) return run();
  const end = await within(s, run); // never rejects (AttemptRun.run)
  endSpan(s, {
    'reckon.outcome': end.outcome.state,
    'reckon.fenced': end.kind === 'fenced',
    ...(end.jobState ? { 'reckon.job_state': end.jobState } : {}),
  });
  return end;
}

/**
 * A `reckon.enqueue` span in the caller's trace; its context is stored with each new job
 * (`traceParent`), the parent of the job's attempts wherever they run.
 */
export function enqueueSpan(
  operation: string,
  inserts: { requestKey: string; traceParent?: string | null }[],
): ReckonSpan | null {
  const s = startSpan(`reckon.enqueue ${operation}`, 'producer', {
    'reckon.operation': operation,
    'reckon.jobs': inserts.length,
    ...(inserts.length === 1 ? { 'reckon.request_key': inserts[0]!.requestKey } : {}),
  });
  const traceParent = traceParentOf(s);
  if (traceParent) for (const j of inserts) j.traceParent = traceParent;
  return s;
}

/** Ends it with what the store answered: an attach (deduplicated) is not a new job. */
export function endEnqueueSpan(
  s: ReckonSpan | null,
  results: { created: boolean; job: { id: string; state: string } }[],
): void {
  if (!s) return;
  const one = results.length === 1 ? results[0]! : undefined;
  endSpan(s, {
    'reckon.deduplicated': results.some((r) => !r.created),
    ...(one ? { 'reckon.job_id': one.job.id, 'reckon.job_state': one.job.state } : {}),
  });
}

/** The store's insert of new jobs inside their `reckon.enqueue` span (see `enqueueSpan`). */
export async function tracedInsert<
  R extends { created: boolean; job: { id: string; state: string } },
>(
  operation: string,
  inserts: { requestKey: string; traceParent?: string | null }[],
  insert: () => Promise<R[]>,
): Promise<R[]> {
  const span = enqueueSpan(operation, inserts);
  if (!span) return insert();
  try {
    const results = await insert();
    endEnqueueSpan(span, results);
    return results;
  } catch (err) {
    endSpan(span, {}, err);
    throw err;
  }
}
