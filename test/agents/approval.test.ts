/**
 * Approval through each framework, decided in reckon (as `reckon approvals` or the dashboard
 * would): approved → one email and the model gets its outcome; denied → no email, no attempt,
 * and the model is told why (the approver's note).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { openQueue, type Queue, type Worker } from '../../src/index.js';
import { tempSqliteStore, type TestStore } from '../helpers/stores.js';
import {
  aiSdkAgent,
  email,
  mcpClient,
  openaiAgent,
  until,
  type AgentModule,
  type Mailbox,
} from './harness.js';

let store: TestStore | undefined;
let mailbox: Mailbox | undefined;
let q: Queue | undefined;
let worker: Worker | undefined;
let client: Client | undefined;

afterEach(async () => {
  await client?.close();
  await worker?.stop();
  await q?.close();
  await mailbox?.close();
  await store?.drop();
  client = worker = q = mailbox = store = undefined;
});

async function setUp(): Promise<Queue> {
  store = tempSqliteStore();
  mailbox = await email.startMailbox();
  Object.assign(process.env, mailbox.env);
  q = await openQueue({ store: store.url });
  worker = q.worker({ operations: [email.sendEmailWithApproval] });
  await worker.start();
  return q;
}

/** A person decides in reckon once the request shows up in the approval queue. */
async function decideWhenAsked(queue: Queue, approve: boolean, note: string): Promise<string> {
  let jobId = '';
  await until(async () => {
    const awaiting = await queue.approvals.list();
    jobId = awaiting[0]?.id ?? '';
    return jobId !== '';
  });
  await queue.approvals.decide(jobId, { approve, actor: 'alice', note });
  return jobId;
}

const AGENTS: { name: string; agent: AgentModule }[] = [
  { name: 'AI SDK', agent: aiSdkAgent },
  { name: 'OpenAI Agents', agent: openaiAgent },
];

describe.each(AGENTS)('$name approval decided in reckon', ({ agent }) => {
  it('approve: one email, the model gets the outcome', async () => {
    const queue = await setUp();
    const [out, jobId] = await Promise.all([
      agent.runAgent({ q: queue, runId: 'run-a', approval: true, waitMs: 20_000 }),
      decideWhenAsked(queue, true, 'fine'),
    ]);
    expect(mailbox!.messages()).toHaveLength(1);
    expect(out.toolAnswer).toMatchObject({ status: 'succeeded', jobId });
    const detail = (await queue.job(jobId))!;
    expect(detail.job.state).toBe('SUCCEEDED');
    expect(detail.events.map((e) => e.kind)).toContain('approved');
    // Replayed after the decision: the recorded decision answers at once, no second email.
    const again = await agent.runAgent({
      q: queue,
      runId: 'run-a',
      approval: true,
      approvalWaitMs: 0,
    });
    expect(again.toolAnswer).toEqual(out.toolAnswer);
    expect(mailbox!.messages()).toHaveLength(1);
  });

  it('deny: no email, no attempt, the model told why', async () => {
    const queue = await setUp();
    const [out, jobId] = await Promise.all([
      agent.runAgent({ q: queue, runId: 'run-d', approval: true, waitMs: 20_000 }),
      decideWhenAsked(queue, false, 'not to customers on Sundays'),
    ]);
    expect(JSON.stringify(out.toolAnswer)).toContain('not to customers on Sundays');
    expect(out.text).toContain('not to customers on Sundays');
    const detail = (await queue.job(jobId))!;
    expect(detail.job.state).toBe('CANCELLED');
    expect(detail.attempts).toHaveLength(0);
    const again = await agent.runAgent({
      q: queue,
      runId: 'run-d',
      approval: true,
      approvalWaitMs: 0,
    });
    expect(again.text).toContain('not to customers on Sundays');
    await worker!.stop();
    expect(mailbox!.messages()).toHaveLength(0);
  });
});

describe('MCP approval decided in reckon', () => {
  for (const approve of [true, false])
    it(approve ? 'approve: one email' : 'deny: no email, the model told why', async () => {
      const queue = await setUp();
      client = await mcpClient.connectReckon({
        store: store!.url,
        args: ['--wait-ms', '300', '--approvals', 'list'],
        env: mailbox!.env,
      });
      const call = () =>
        client!.callTool({
          name: 'email_send-approved',
          arguments: { to: 'ada@example.com', subject: 'Report', body: 'ready' },
          _meta: { 'reckon/key': 'mcp-approval-1' },
        });
      const first = await call();
      expect(first.isError).toBe(false);
      expect(first.structuredContent).toMatchObject({
        status: 'pending',
        state: 'AWAITING_APPROVAL',
        requestKey: 'mcp-approval-1',
      });
      const listed = await client.callTool({ name: 'reckon_approvals', arguments: {} });
      expect(JSON.stringify(listed.structuredContent)).toContain('mcp-approval-1');
      const jobId = (first.structuredContent as { jobId: string }).jobId;
      // A person decides in reckon; over stdio the decide tool is refused (no person to act for).
      await decideWhenAsked(queue, approve, 'checked by alice');
      expect((await queue.job(jobId))!.events.at(-1)).toMatchObject({
        kind: approve ? 'approved' : 'denied',
      });
      await until(async () => {
        const again = await call();
        const status = (again.structuredContent as { status: string }).status;
        if (status === 'pending') return false;
        expect(again.structuredContent).toMatchObject(
          approve ? { status: 'succeeded' } : { status: 'denied' },
        );
        if (!approve) {
          expect(again.isError).toBe(true);
          expect(JSON.stringify(again.content)).toContain('checked by alice');
        }
        return true;
      });
      expect(mailbox!.messages()).toHaveLength(approve ? 1 : 0);
    });
});
