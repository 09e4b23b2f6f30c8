/**
 * OpenTelemetry across two processes: an AI SDK tool call (scripted model) in this process
 * enqueues a job; a `reckon work` child with its own SDK runs it; the operation's HTTP request
 * reaches a downstream here. One trace: ai.toolCall → reckon.enqueue → reckon.attempt (child
 * process, parented by the traceparent stored with the job) → reckon.dispatch → the downstream's
 * span. A replayed run's spans show the attach (reckon.deduplicated), not a second dispatch.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { durableTool } from '../src/agents/ai.js';
import { defineOperation, openQueue } from '../src/index.js';

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

let dir: string;
let downstream: Server;
let url: string;
const received = new Map<string, number>();

beforeAll(async () => {
  provider.register();
  dir = mkdtempSync(join(tmpdir(), 'reckon-trace-'));
  downstream = createServer((req, res) => {
    const parent = propagation.extract(context.active(), req.headers);
    const span = trace
      .getTracer('downstream')
      .startSpan('downstream POST', { kind: SpanKind.SERVER }, parent);
    const key = String(req.headers['x-request-key']);
    received.set(key, (received.get(key) ?? 0) + 1);
    req.resume();
    req.on('end', () => {
      span.end();
      res.end(JSON.stringify({ receipt: `r-${key}` }));
    });
  });
  await new Promise<void>((r) => downstream.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(downstream.address() as AddressInfo).port}`;
});

afterAll(async () => {
  downstream.closeAllConnections();
  await new Promise((r) => downstream.close(r));
  await provider.shutdown();
  trace.disable();
  propagation.disable();
  context.disable();
  rmSync(dir, { recursive: true, force: true });
});

/** The enqueuing side of test/fixtures/traced-ops.js (the worker child runs that one). */
const notify = defineOperation({
  name: 'traced.notify',
  description: 'Notify someone. Returns the receipt.',
  execute: () => Promise.reject(new Error('runs in the worker child only')),
});

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A tool call first; once the prompt holds the tool's answer, a reply. */
function scriptedModel() {
  return new MockLanguageModelV3({
    doGenerate: ({ prompt }) => {
      const answered = prompt.some((m) => m.role === 'tool');
      return Promise.resolve({
        content: answered
          ? [{ type: 'text' as const, text: 'done' }]
          : [
              {
                type: 'tool-call' as const,
                toolCallId: 'call-1',
                toolName: 'notify',
                input: JSON.stringify({ to: 'ada' }),
              },
            ],
        finishReason: {
          unified: answered ? ('stop' as const) : ('tool-calls' as const),
          raw: undefined,
        },
        usage: USAGE,
        warnings: [],
      });
    },
  });
}

interface ChildSpan {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  attributes: Record<string, unknown>;
}

it('one trace from the tool call through the attempt in another process to the downstream', async () => {
  const store = `sqlite:${join(dir, 'reckon.db')}`;
  const traceFile = join(dir, 'worker-spans.jsonl');
  const q = await openQueue({ store, operations: [notify] });
  const worker = spawn(
    process.execPath,
    ['--import', './test/fixtures/otel-worker.js', 'dist/cli/main.js', 'work']
      .concat(['--operations', 'test/fixtures/traced-ops.js', '--store', store])
      .concat(['--log-level', 'warn']),
    {
      env: { ...process.env, TRACE_FILE: traceFile, DOWNSTREAM_URL: url },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  worker.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = once(worker, 'exit');
  const agent = () =>
    generateText({
      model: scriptedModel(),
      tools: { notify: durableTool(q, notify, { runId: 'run-t', waitMs: 30_000 }) },
      prompt: 'Notify ada.',
      stopWhen: stepCountIs(3),
      experimental_telemetry: { isEnabled: true },
    });
  try {
    const first = await agent();
    expect(first.text).toBe('done');
    const replay = await agent();
    expect(replay.text).toBe('done');
  } finally {
    worker.kill('SIGTERM');
    await exited;
    await q.close();
  }
  expect(stderr).not.toMatch(/error/i);

  const here = exporter.getFinishedSpans();
  const there = existsSync(traceFile)
    ? readFileSync(traceFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as ChildSpan)
    : [];
  const toolCalls = here.filter((s) => s.name === 'ai.toolCall');
  const enqueues = here.filter((s) => s.name === 'reckon.enqueue traced.notify');
  expect(toolCalls).toHaveLength(2);
  expect(enqueues).toHaveLength(2);
  const [call, replayCall] = toolCalls;
  const [enqueue, attach] = enqueues;
  // First run: the tool call's span is the enqueue's parent.
  expect(enqueue!.spanContext().traceId).toBe(call!.spanContext().traceId);
  expect(enqueue!.parentSpanContext?.spanId).toBe(call!.spanContext().spanId);
  expect(enqueue!.attributes['reckon.deduplicated']).toBe(false);
  // The worker process: one attempt, a child of the enqueue through the stored traceparent.
  const attempts = there.filter((s) => s.name === 'reckon.attempt traced.notify');
  const dispatches = there.filter((s) => s.name === 'reckon.dispatch traced.notify');
  expect(attempts).toHaveLength(1);
  expect(dispatches).toHaveLength(1);
  expect(attempts[0]).toMatchObject({
    traceId: call!.spanContext().traceId,
    parentSpanId: enqueue!.spanContext().spanId,
    attributes: { 'reckon.outcome': 'SUCCEEDED', 'reckon.request_key': 'run-t:call-1' },
  });
  expect(dispatches[0]!.parentSpanId).toBe(attempts[0]!.spanId);
  // The downstream, back in this process: a child of the dispatch, in the same trace.
  const served = here.filter((s) => s.name === 'downstream POST');
  expect(served).toHaveLength(1);
  expect(served[0]!.spanContext().traceId).toBe(call!.spanContext().traceId);
  expect(served[0]!.parentSpanContext?.spanId).toBe(dispatches[0]!.spanId);
  // The replay: its own tool call span, an attach to the same job, and no second dispatch.
  expect(attach!.parentSpanContext?.spanId).toBe(replayCall!.spanContext().spanId);
  expect(attach!.attributes['reckon.deduplicated']).toBe(true);
  expect(attach!.attributes['reckon.job_id']).toBe(enqueue!.attributes['reckon.job_id']);
  expect(received.get('run-t:call-1')).toBe(1);
}, 60_000);
