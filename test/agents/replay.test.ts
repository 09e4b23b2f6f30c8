/**
 * Per framework, with its real package and real processes: the model calls the tool, the worker
 * is SIGKILLed after the mail server accepted the email and before the outcome was written, the
 * agent process is killed too, and the run is replayed from the start with the same run id.
 * One email in the mailbox; the tool's answer (the message id the mailbox holds) given back to
 * the model; the journal shows the recovery: the attempt UNKNOWN, resolved by the lookup.
 *
 * The fault point is `after-response-before-commit`: `after-send-before-response` fires before
 * an SMTP client's bytes leave the process (see src/runtime/faults.ts), so it cannot model "the
 * mail went out and the worker died".
 */
import { afterEach, describe, expect, it } from 'vitest';
import { openQueue } from '../../src/index.js';
import {
  makeTestStore,
  pgUnavailableReason,
  type StoreKind,
  type TestStore,
} from '../helpers/stores.js';
import {
  agentResult,
  email,
  FAST_RECOVERY_ENV,
  startChild,
  startWorker,
  stop,
  type Child,
  type Mailbox,
  type ToolAnswer,
} from './harness.js';

const FRAMEWORKS = [
  { name: 'AI SDK', agent: 'examples/agent/ai-sdk.js', key: 'run-1:call-1' },
  { name: 'OpenAI Agents', agent: 'examples/agent/openai-agents.js', key: 'run-1:call-1' },
  { name: 'MCP', agent: 'examples/agent/mcp-client.js', key: /^mcp:run-1:email_send:/ },
] as const;

// Every framework on SQLite; one on PostgreSQL (the adapters do not see the store).
const CASES: ((typeof FRAMEWORKS)[number] & { store: StoreKind })[] = [
  ...FRAMEWORKS.map((f) => ({ ...f, store: 'sqlite' as const })),
  { ...FRAMEWORKS[0], store: 'postgres' },
];

let store: TestStore | undefined;
let mailbox: Mailbox | undefined;
const children: Child[] = [];

afterEach(async () => {
  for (const c of children.splice(0)) await stop(c);
  await mailbox?.close();
  await store?.drop();
  mailbox = store = undefined;
});

describe.each(CASES)('$name on $store: worker and agent killed, run replayed', (fw) => {
  it('sends one email and gives the model its outcome', async (t) => {
    if (fw.store === 'postgres') {
      const why = await pgUnavailableReason();
      if (why) return t.skip(why);
    }
    store = await makeTestStore(fw.store);
    await (await openQueue({ store: store.url })).close();
    mailbox = await email.startMailbox();
    const env = {
      ...mailbox.env,
      ...FAST_RECOVERY_ENV,
      RECKON_STORE: store.url,
      RUN_ID: 'run-1',
      AGENT_WAIT_MS: '60000',
    };
    const spawnChild = (start: () => Child) => {
      const c = start();
      children.push(c);
      return c;
    };

    const worker1 = spawnChild(() =>
      startWorker(store!.url, { ...env, RECKON_FAULTS: 'after-response-before-commit=kill' }),
    );
    const agent1 = spawnChild(() => startChild([fw.agent], env));
    expect((await worker1.exited).signal).toBe('SIGKILL');
    expect(mailbox.messages()).toHaveLength(1);
    // The agent is still waiting for its tool's outcome: it dies too.
    expect(agent1.proc.exitCode).toBeNull();
    await stop(agent1);

    spawnChild(() => startWorker(store!.url, env));
    const out = await agentResult(spawnChild(() => startChild([fw.agent], env)));
    const answer = ((out as { answer?: ToolAnswer }).answer ?? out.toolAnswer) as ToolAnswer;

    const [sent] = mailbox.messages();
    expect(mailbox.messages()).toHaveLength(1);
    expect(sent!.key).toMatch(fw.key);
    expect(answer).toMatchObject({ status: 'succeeded', requestKey: sent!.key });
    expect(answer.result?.messageId).toBe(sent!.messageId);
    if (out.text !== undefined) expect(out.text).toContain(sent!.messageId!);

    const q = await openQueue({ store: store.url });
    try {
      const jobs = await q.jobs();
      expect(jobs).toHaveLength(1);
      const detail = (await q.job(jobs[0]!.id))!;
      expect(detail.job.state).toBe('SUCCEEDED');
      expect(detail.attempts).toHaveLength(1);
      expect(detail.attempts[0]).toMatchObject({
        state: 'UNKNOWN',
        resolution: 'succeeded',
        resolutionSource: 'lookup',
      });
      const moves = detail.events.map((e) => `${e.fromState}->${e.toState}`);
      expect(moves).toContain('LEASED->UNKNOWN');
      expect(moves).toContain('UNKNOWN->SUCCEEDED');
    } finally {
      await q.close();
    }
  });
});
