/**
 * An agent run with the Vercel AI SDK (6) whose one tool sends an email through reckon.
 *
 * The model is the AI SDK's own test model, scripted: it asks to send the email, then answers
 * with what the tool gave back. It decides from the messages alone, as a real model does, so a
 * replayed run (same run id, same messages) makes the same tool call with the same call id,
 * and reckon attaches it to the job the first run made: no second email.
 *
 * Run alone (a store, a worker and the mailbox must exist; see run.js for everything in one):
 *   RECKON_STORE=sqlite:./reckon.db RUN_ID=run-1 MAILBOX_SMTP_PORT=… MAILBOX_URL=… \
 *     node examples/agent/ai-sdk.js [--approval]
 * It prints one JSON line: the model's final text and the tool answer it was given.
 */
import process from 'node:process';
import { fileURLToPath } from 'node:url';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { openQueue } from 'reckon';
import { durableTool, reckonApprovals } from 'reckon/ai';
import { sendEmail, sendEmailWithApproval } from './email.js';

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** The scripted model: a tool call first; once the prompt holds the tool's answer, a reply. */
export function scriptedModel(email) {
  return new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      const answered = prompt
        .filter((m) => m.role === 'tool')
        .flatMap((m) => m.content)
        .find((c) => c.type === 'tool-result' && c.toolCallId === 'call-1');
      if (!answered)
        return {
          content: [
            {
              type: 'tool-call',
              toolCallId: 'call-1',
              toolName: 'send_email',
              input: JSON.stringify(email),
            },
          ],
          finishReason: { unified: 'tool-calls', raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      const seen = answered.output.type === 'json' ? answered.output.value : answered.output;
      return {
        content: [{ type: 'text', text: `tool said: ${JSON.stringify(seen)}` }],
        finishReason: { unified: 'stop', raw: undefined },
        usage: USAGE,
        warnings: [],
      };
    },
  });
}

/**
 * One agent run. Approval requests are answered with reckon's decisions, waited for up to
 * `approvalWaitMs` (a person decides in `reckon approvals` or the dashboard).
 */
export async function runAgent({ q, runId, approval = false, waitMs, approvalWaitMs = 60_000 }) {
  const email = { to: 'ada@example.com', subject: 'Report', body: 'The report is ready.' };
  const op = approval ? sendEmailWithApproval : sendEmail;
  const tools = { send_email: durableTool(q, op, { runId, waitMs }) };
  const model = scriptedModel(email);
  const messages = [{ role: 'user', content: `Email ${email.to} that the report is ready.` }];
  for (;;) {
    const result = await generateText({ model, tools, messages, stopWhen: stepCountIs(4) });
    messages.push(...result.response.messages);
    const { responses, waiting } = await reckonApprovals({
      tools,
      content: result.content,
      wait: { timeoutMs: approvalWaitMs, pollMs: 100 },
    });
    if (waiting.length > 0) return { text: null, waitingForApproval: waiting };
    if (responses.length === 0) {
      const toolAnswer = seenByModel(model);
      return { text: result.text, toolAnswer };
    }
    messages.push({ role: 'tool', content: responses });
  }
}

/** What the tool answer looked like in the model's last prompt. */
function seenByModel(model) {
  const last = model.doGenerateCalls.at(-1);
  const part = last?.prompt
    .filter((m) => m.role === 'tool')
    .flatMap((m) => m.content)
    .find((c) => c.type === 'tool-result');
  if (!part) return null;
  return part.output.type === 'json' ? part.output.value : part.output;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const q = await openQueue({ store: process.env.RECKON_STORE });
  try {
    const out = await runAgent({
      q,
      runId: process.env.RUN_ID ?? 'run-1',
      approval: process.argv.includes('--approval'),
      waitMs: Number(process.env.AGENT_WAIT_MS ?? 60_000),
    });
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } finally {
    await q.close();
  }
}
