/**
 * Everything in one process: a mailbox on loopback, a reckon store in a temp directory, a
 * worker, and one agent run (AI SDK by default, or the OpenAI Agents SDK) whose tool sends an
 * email through reckon. No network beyond 127.0.0.1, no API key: the models are scripted.
 *
 *   npm run build && node examples/agent/run.js [ai-sdk|openai-agents]
 */
/* global console */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { openQueue } from 'reckon';
import { sendEmail, sendEmailWithApproval, startMailbox } from './email.js';

const framework = process.argv[2] ?? 'ai-sdk';
const { runAgent } = await import(
  framework === 'openai-agents' ? './openai-agents.js' : './ai-sdk.js'
);

const dir = mkdtempSync(join(tmpdir(), 'reckon-agent-'));
const mailbox = await startMailbox();
Object.assign(process.env, mailbox.env);
const q = await openQueue({ store: `sqlite:${join(dir, 'reckon.db')}` });
const worker = q.worker({ operations: [sendEmail, sendEmailWithApproval] });
await worker.start();
try {
  const out = await runAgent({ q, runId: 'run-1' });
  console.log('the model said:', out.text);
  // The same run again (a crash and replay): the tool call attaches to the same job.
  const again = await runAgent({ q, runId: 'run-1' });
  console.log('replayed, the model said:', again.text);
  console.log('emails in the mailbox:', mailbox.messages().length);
} finally {
  await worker.stop();
  await q.close();
  await mailbox.close();
  rmSync(dir, { recursive: true, force: true });
}
