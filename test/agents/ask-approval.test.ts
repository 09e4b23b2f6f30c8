/**
 * Issue #33 item 8: a framework asking `needsApproval` writes nothing for an input that needs
 * none (the job is written by `execute`, only if the framework runs it: a QUEUED job written
 * at the ask would run even if the step were aborted before `execute`, and the model never
 * see it). For an input that needs approval, the job is written AWAITING_APPROVAL at once.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { defineOperation, openQueue, type Queue } from '../../src/index.js';
import { durableTool as aiTool } from '../../src/agents/ai.js';
import { durableTool as agentsTool } from '../../src/agents/openai-agents.js';

let q: Queue | undefined;
afterEach(async () => {
  await q?.close();
  q = undefined;
});

const pay = defineOperation<{ cents: number }, null>({
  name: 'ask.pay',
  approval: (input) => (input.cents > 10_000 ? 'over 100.00' : false),
  execute: (_input, ctx) => ctx.dispatch(() => Promise.resolve(null)),
});

type Ask = (input: { cents: number }, callId: string) => Promise<boolean>;

const FRAMEWORKS: { name: string; ask: (q: Queue) => Ask }[] = [
  {
    name: 'AI SDK',
    ask: (queue) => {
      const t = aiTool(queue, pay, { runId: 'run-ai' });
      const needs = t.needsApproval as unknown as (
        input: unknown,
        o: { toolCallId: string; messages: [] },
      ) => Promise<boolean>;
      return (input, callId) => needs(input, { toolCallId: callId, messages: [] });
    },
  },
  {
    name: 'OpenAI Agents',
    ask: (queue) => {
      const t = agentsTool(queue, pay, { runId: 'run-oa' });
      const needs = t.needsApproval as unknown as (
        ctx: unknown,
        input: unknown,
        callId: string,
      ) => Promise<boolean>;
      return (input, callId) => needs({}, input, callId);
    },
  },
];

describe.each(FRAMEWORKS)('$name: asking whether a call needs approval', ({ ask }) => {
  it('writes nothing for an input that needs none; AWAITING_APPROVAL for one that does', async () => {
    q = await openQueue({ store: 'sqlite::memory:', operations: [pay] });
    const needs = ask(q);
    expect(await needs({ cents: 500 }, 'call-small')).toBe(false);
    expect(await q.jobs()).toEqual([]);

    expect(await needs({ cents: 50_000 }, 'call-big')).toBe(true);
    const jobs = await q.jobs();
    expect(jobs.map((j) => [j.state, j.approvalReason])).toEqual([
      ['AWAITING_APPROVAL', 'over 100.00'],
    ]);
    // Asked again (the AI SDK asks before running an approved call): still true, one job.
    expect(await needs({ cents: 50_000 }, 'call-big')).toBe(true);
    expect(await q.jobs()).toHaveLength(1);
  });
});
