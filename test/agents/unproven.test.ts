/**
 * Issue #33 item 1 through every adapter: the email's first attempt reached the downstream and
 * the connection reset, the same-key retries were all refused a connection. Nothing proves the
 * email was not sent, so no tool answer may say it was not carried out: each adapter (AI SDK
 * and OpenAI Agents with scripted models, and the MCP server with the SDK's client) answers
 * "pending", NEEDS_REVIEW, with the evidence, not "failed".
 */
import { Agent, Usage, run, setTracingDisabled } from '@openai/agents';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterEach, describe, expect, it } from 'vitest';
import type { Queue } from '../../src/index.js';
import { durableTool as aiTool } from '../../src/agents/ai.js';
import { createMcpServer, KEY_META } from '../../src/agents/mcp.js';
import { durableTool as agentsTool } from '../../src/agents/openai-agents.js';
import type { ToolAnswer } from '../../src/agents/outcome.js';
import type { Downstream } from '../../src/testkit/downstream.js';
import { notify } from '../fixtures/proof-ops.js';
import { tempSqliteStore } from '../helpers/stores.js';
import { resetThenRefuse, scenarioQueue } from '../helpers/unproven.js';

setTracingDisabled(true);

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const INPUT = { to: 'ada@example.com' };
const WAIT_MS = 60_000;

/** A store, the scenario's downstream, and a worker with recovery on short intervals. */
async function scenario(): Promise<{ q: Queue; ds: Downstream }> {
  const store = tempSqliteStore();
  cleanup.push(() => store.drop());
  const push = (undo: () => unknown) => void cleanup.push(undo);
  const ds = await resetThenRefuse(push);
  return { q: await scenarioQueue(store.url, push), ds };
}

function expectUnprovenAnswer(answer: ToolAnswer, ds: Downstream): void {
  expect(answer).toMatchObject({ status: 'pending', state: 'NEEDS_REVIEW' });
  expect(JSON.stringify(answer)).not.toMatch(/not carried out|definitively failed/);
  expect((answer as { evidence?: { attempt?: unknown } }).evidence?.attempt).toMatchObject({
    state: 'FAILED_BEFORE_SEND',
  });
  // It was sent: "failed" would have been a lie.
  expect(ds.effectsOf(answer.requestKey)).toBe(1);
  expect(ds.requestsOf(answer.requestKey)).toBe(1);
}

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

describe('an unproven attempt: no adapter says the effect did not happen', () => {
  it('AI SDK (reckon/ai)', async () => {
    const { q, ds } = await scenario();
    let seen: unknown;
    const model = new MockLanguageModelV3({
      doGenerate: ({ prompt }) => {
        const result = prompt
          .filter((m) => m.role === 'tool')
          .flatMap((m) => m.content)
          .find((c) => c.type === 'tool-result');
        if (result) seen = result.output.type === 'json' ? result.output.value : result.output;
        return Promise.resolve({
          content: result
            ? [{ type: 'text', text: 'done' }]
            : [
                {
                  type: 'tool-call',
                  toolCallId: 'call-1',
                  toolName: 'notify',
                  input: JSON.stringify(INPUT),
                },
              ],
          finishReason: { unified: result ? 'stop' : 'tool-calls', raw: undefined },
          usage: USAGE,
          warnings: [],
        });
      },
    });
    await generateText({
      model,
      tools: { notify: aiTool(q, notify, { runId: 'run-ai', waitMs: WAIT_MS }) },
      prompt: 'Notify Ada.',
      stopWhen: stepCountIs(3),
    });
    expectUnprovenAnswer(seen as ToolAnswer, ds);
  }, 90_000);

  it('OpenAI Agents (reckon/openai-agents)', async () => {
    const { q, ds } = await scenario();
    let seen: string | undefined;
    const model = {
      getResponse(request: { input: unknown }) {
        const items = Array.isArray(request.input)
          ? (request.input as { type: string; output?: unknown }[])
          : [];
        const result = items.find((i) => i.type === 'function_call_result');
        if (result) {
          const out = result.output as string | { text?: string };
          seen = typeof out === 'string' ? out : (out.text ?? '');
        }
        return Promise.resolve({
          usage: new Usage(),
          output: result
            ? [
                {
                  type: 'message',
                  role: 'assistant',
                  status: 'completed',
                  content: [{ type: 'output_text', text: 'done' }],
                },
              ]
            : [
                {
                  type: 'function_call',
                  callId: 'call-1',
                  name: 'notify',
                  arguments: JSON.stringify(INPUT),
                  status: 'completed',
                },
              ],
        });
      },
      // eslint-disable-next-line require-yield
      async *getStreamedResponse(): AsyncGenerator<never> {
        await Promise.resolve();
        throw new Error('the scripted model does not stream');
      },
    };
    const agent = new Agent({
      name: 'notifier',
      instructions: 'Send the notifications asked for.',
      model: model as never,
      tools: [agentsTool(q, notify, { runId: 'run-oa', name: 'notify', waitMs: WAIT_MS })],
    });
    await run(agent, 'Notify Ada.');
    expectUnprovenAnswer(JSON.parse(seen!) as ToolAnswer, ds);
  }, 90_000);

  it('MCP (reckon mcp)', async () => {
    const { q, ds } = await scenario();
    const server = createMcpServer(q, { operations: [notify], waitMs: WAIT_MS });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const client = new Client({ name: 'test', version: '1' });
    await client.connect(clientSide);
    cleanup.push(() => client.close());
    const r = await client.callTool(
      { name: 'proof_notify', arguments: INPUT, _meta: { [KEY_META]: 'mcp-1' } },
      undefined,
      { timeout: 90_000 },
    );
    expect(r.isError).toBe(false);
    expectUnprovenAnswer(r.structuredContent as ToolAnswer, ds);
  }, 90_000);
});
