/**
 * The agent of a research run: three dependent steps, each through `q.call` keyed by the run
 * id and the step id, so that running it again after a crash attaches to the steps already in
 * the journal (finished ones answer at once, with their recorded result) and starts only those
 * that never were. Prints one JSON line per step.
 *
 *   node examples/research-run/agent.js <store> <runId>      (RESEARCH_URL set)
 */
/* global console */
import process from 'node:process';
import { openQueue } from 'reckon';
import { fetchSources, sendDraft, writeDraft } from './operations.js';

const [store, runId] = process.argv.slice(2);
const q = await openQueue({ store, operations: [fetchSources, writeDraft, sendDraft] });

/** One step: enqueue it, or attach to the job its key already names, and wait for its outcome. */
async function step(op, stepId, input) {
  const job = await q.enqueue(op, input, { runId, stepId });
  const out = await q.waitFor(job.id, { timeoutMs: 60_000 });
  if (out.state !== 'SUCCEEDED') throw new Error(`${stepId} ended ${out.state}`);
  console.log(
    JSON.stringify({
      step: stepId,
      jobId: job.id,
      attached: job.deduplicated,
      wasState: job.state,
    }),
  );
  return out.result;
}

try {
  const topic = 'durable side effects';
  const { sources } = await step(fetchSources, 'fetch', { topic });
  const draft = await step(writeDraft, 'draft', { topic, sources });
  await step(sendDraft, 'send', { draftId: draft.draftId, to: 'editor@example.test' });
} finally {
  await q.close();
}
