/**
 * An agent run with the OpenAI Agents SDK whose one tool sends an email through reckon.
 *
 * The model is scripted (the SDK's `Model` interface, no network): it asks to send the email,
 * then answers with what the tool gave back. It decides from the run's items alone, so a run
 * replayed with the same run id makes the same call (same call id) and reckon attaches it to
 * the job the first run made. An operation that asks for approval interrupts the run; the
 * interruption is answered by reckon's decision (CLI, dashboard or `q.approvals.decide`).
 *
 *   RECKON_STORE=sqlite:./reckon.db RUN_ID=run-1 MAILBOX_SMTP_PORT=… MAILBOX_URL=… \
 *     node examples/agent/openai-agents.js [--approval]
 */
import process from 'node:process';
import { fileURLToPath } from 'node:url';
import { Agent, Usage, run, setTracingDisabled } from '@openai/agents';
import { openQueue } from 'reckon';
import { durableTool, reckonInterruptions } from 'reckon/openai-agents';
import { sendEmail, sendEmailWithApproval } from './email.js';

setTracingDisabled(true); // no traces sent to OpenAI from an example

/** The scripted model: a function call first; once the input holds its result, a reply. */
export function scriptedModel(email) {
  const seen = [];
  return {
    seen,
    async getResponse(request) {
      const items = Array.isArray(request.input) ? request.input : [];
      const answered = items.find(
        (i) => i.type === 'function_call_result' && i.callId === 'call-1',
      );
      if (!answered)
        return {
          usage: new Usage(),
          output: [
            {
              type: 'function_call',
              callId: 'call-1',
              name: 'send_email',
              arguments: JSON.stringify(email),
              status: 'completed',
            },
          ],
        };
      const output =
        typeof answered.output === 'string' ? answered.output : (answered.output.text ?? '');
      seen.push(output);
      return {
        usage: new Usage(),
        output: [
          {
            type: 'message',
            role: 'assistant',
            status: 'completed',
            content: [{ type: 'output_text', text: `tool said: ${output}` }],
          },
        ],
      };
    },
    // eslint-disable-next-line require-yield
    async *getStreamedResponse() {
      throw new Error('the scripted model does not stream');
    },
  };
}

/** One agent run; interruptions are answered by reckon, waited for up to `approvalWaitMs`. */
export async function runAgent({ q, runId, approval = false, waitMs, approvalWaitMs = 60_000 }) {
  const email = { to: 'ada@example.com', subject: 'Report', body: 'The report is ready.' };
  const model = scriptedModel(email);
  const agent = new Agent({
    name: 'mailer',
    instructions: 'Send the emails the user asks for.',
    model,
    tools: [
      durableTool(q, approval ? sendEmailWithApproval : sendEmail, {
        runId,
        name: 'send_email',
        waitMs,
      }),
    ],
  });
  let result = await run(agent, `Email ${email.to} that the report is ready.`);
  while (result.interruptions.length > 0) {
    const { state, waiting } = await reckonInterruptions({
      result,
      wait: { timeoutMs: approvalWaitMs, pollMs: 100 },
    });
    if (waiting.length > 0) return { text: null, waitingForApproval: waiting.length };
    result = await run(agent, state);
  }
  const last = model.seen.at(-1);
  let toolAnswer = last ?? null;
  try {
    toolAnswer = JSON.parse(last);
  } catch {
    // a rejection message is text, not JSON
  }
  return { text: result.finalOutput, toolAnswer };
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
