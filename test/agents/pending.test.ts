/**
 * A tool call whose outcome is not known when the wait ends is an answer the model can act on
 * (job id, state, "do not retry"), not an error the framework hands back for a blind retry;
 * and calling again with the same run id attaches to the same job.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue, type Queue } from '../../src/index.js';
import { aiSdkAgent, email, openaiAgent, type AgentModule, type ToolAnswer } from './harness.js';

let q: Queue | undefined;
afterEach(async () => {
  await q?.close();
  q = undefined;
});

const AGENTS: { name: string; agent: AgentModule }[] = [
  { name: 'AI SDK', agent: aiSdkAgent },
  { name: 'OpenAI Agents', agent: openaiAgent },
];

describe.each(AGENTS)('$name: outcome still pending', ({ agent }) => {
  it('tells the model the job id, the state and not to retry; a replay attaches', async () => {
    q = await openQueue({ store: 'sqlite::memory:', operations: [email.sendEmail] });
    // No worker runs: the job stays QUEUED past the tool's wait.
    const out = await agent.runAgent({ q, runId: 'run-p', waitMs: 150 });
    const answer = out.toolAnswer as ToolAnswer & { state: string; instruction: string };
    expect(answer).toMatchObject({
      status: 'pending',
      state: 'QUEUED',
      requestKey: 'run-p:call-1',
    });
    expect(answer.instruction).toMatch(/Do not call the tool again/);
    expect(out.text).toContain(answer.jobId);

    const again = await agent.runAgent({ q, runId: 'run-p', waitMs: 50 });
    expect((again.toolAnswer as ToolAnswer).jobId).toBe(answer.jobId);
    expect(await q.jobs()).toHaveLength(1);
  });
});
