/**
 * A multi-step agent run through a crash: fetch sources, write a draft, send it, three jobs of
 * run `run-1`. The worker is SIGKILLed right after the draft was written (before its outcome
 * was recorded), and the agent process dies with it: the host went down mid-run. Both start
 * again; the agent runs the same run again from the top. It must resume at the right step:
 *
 *   fetch: finished before the crash; attaches to its job and gets the recorded result;
 *   draft: UNKNOWN; the lookup finds the draft, so it is not written again;
 *   send:  never started; runs now, once.
 *
 * The verdict is what each service received per key (exactly one each), and
 * `reckon jobs list --run run-1` shows the run's three steps together.
 *
 *   npm run build && node examples/research-run/run.js
 */
/* global console */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { URL, fileURLToPath } from 'node:url';
import { openQueue } from 'reckon';
import { CLI, diedOfSigkill, startWorker, verdict } from '../shared/processes.js';
import { startResearchServices } from './services.js';

// Short waits before a lookup. The agent enqueues, so its process must see them too: a job
// records its operation's timeoutMs and grace when it is enqueued.
const env = { RESEARCH_TIMEOUT_MS: '2000', RESEARCH_GRACE_MS: '200' };
const services = await startResearchServices();
Object.assign(env, { RESEARCH_URL: services.url });
Object.assign(process.env, env);
const { fetchSources, sendDraft, writeDraft } = await import('./operations.js');

const OPERATIONS = fileURLToPath(new URL('./operations.js', import.meta.url));
const AGENT = fileURLToPath(new URL('./agent.js', import.meta.url));
const RUN = 'run-1';
const dir = mkdtempSync(join(tmpdir(), 'reckon-research-'));
// RECKON_EXAMPLE_STORE names another store to run on, e.g. an empty PostgreSQL database.
const store = process.env.RECKON_EXAMPLE_STORE ?? `sqlite:${join(dir, 'reckon.db')}`;
const q = await openQueue({ store, operations: [fetchSources, writeDraft, sendDraft] });

function startAgent() {
  const proc = spawn(process.execPath, [AGENT, store, RUN], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = [];
  proc.stdout.setEncoding('utf8').on('data', (d) => lines.push(...d.split('\n').filter(Boolean)));
  const exited = once(proc, 'exit').then(([code, signal]) => ({ code, signal }));
  return { proc, exited, steps: () => lines.map((l) => JSON.parse(l)) };
}

try {
  // The first hit of the fault point is the fetch step's, the second the draft's.
  const doomed = startWorker({
    store,
    operations: OPERATIONS,
    env,
    faults: 'after-response-before-commit=kill@2',
  });
  const first = startAgent();
  await diedOfSigkill(doomed, 60_000);
  first.proc.kill('SIGKILL');
  await first.exited;
  const show = (steps) =>
    steps.map((s) => (s.attached ? `${s.step} (attached, was ${s.wasState})` : s.step)).join(', ');
  console.log(`crash: worker and agent SIGKILLed; steps finished before: ${show(first.steps())}`);

  const worker = startWorker({ store, operations: OPERATIONS, env });
  const again = startAgent();
  const end = await again.exited;
  await worker.stop();
  console.log(`the same run again: ${show(again.steps())}`);

  const listed = spawnSync(
    process.execPath,
    [CLI, 'jobs', 'list', '--run', RUN, '--store', store],
    {
      encoding: 'utf8',
    },
  );
  console.log(`\n$ reckon jobs list --run ${RUN}\n${listed.stdout}`);
  const steps = await q.jobs({ runId: RUN });
  const draft = steps.find((j) => j.stepId === 'draft');
  const draftAttempts = draft ? (await q.job(draft.id)).attempts : [];
  const [fetchAgain, draftAgain, sendAgain] = again.steps();

  verdict(`research run ${RUN}: each step once, resumed at the right one`, [
    [
      'before the crash: fetch finished, nothing after it',
      first
        .steps()
        .map((s) => s.step)
        .join() === 'fetch',
    ],
    ['the run finished on the second try', end.code === 0],
    ['fetch: searched once', services.postsOf('/search', `${RUN}:fetch`) === 1],
    ['draft: written once', services.postsOf('/drafts', `${RUN}:draft`) === 1],
    ['send: sent once', services.postsOf('/outbox', `${RUN}:send`) === 1],
    [
      'again, fetch attached to its finished job',
      fetchAgain?.attached && fetchAgain.wasState === 'SUCCEEDED',
    ],
    [
      'again, draft attached and was settled by lookup',
      draftAgain?.attached === true && draftAttempts[0]?.resolutionSource === 'lookup',
    ],
    ['again, send ran for the first time', sendAgain?.attached === false],
    [
      'jobs list --run shows the three steps, SUCCEEDED',
      steps.length === 3 &&
        steps.every((j) => j.state === 'SUCCEEDED') &&
        listed.status === 0 &&
        ['fetch', 'draft', 'send'].every((step) => listed.stdout.includes(`${RUN}:${step}`)),
    ],
  ]);
} finally {
  await q.close();
  await services.close();
  rmSync(dir, { recursive: true, force: true });
}
