/**
 * The three steps of a research run, one operation (one side effect) each: fetch sources, write
 * a draft, send it. Each is a job keyed `runId:stepId`; a step's input carries what the step
 * before it returned, so the run's order lives in the agent (agent.js), and each step's outcome
 * lives in reckon's journal.
 *
 * Where the services are comes from RESEARCH_URL; RESEARCH_TIMEOUT_MS and RESEARCH_GRACE_MS
 * shorten the wait before a lookup (the example sets them before it loads this module).
 */
/* global fetch */
import process from 'node:process';
import { defineOperation } from 'reckon';

const services = () => {
  if (!process.env.RESEARCH_URL) throw new Error('set RESEARCH_URL (see startResearchServices)');
  return process.env.RESEARCH_URL;
};
const timing = {
  timeoutMs: Number(process.env.RESEARCH_TIMEOUT_MS ?? 10_000),
  reconcile: { graceMs: Number(process.env.RESEARCH_GRACE_MS ?? 2_000), lookupBackoffMs: 200 },
  retry: { maxAttempts: 3, backoff: { initialMs: 100, factor: 2, maxMs: 1_000 } },
};

async function post(path, body, ctx) {
  const res = await fetch(`${services()}${path}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json', 'x-request-key': ctx.requestKey },
    signal: ctx.signal,
  });
  if (!res.ok) throw new Error(`${path} answered HTTP ${res.status}`); // UNKNOWN
  return res.json();
}

/** A lookup by request key on `path`: what the step made, or not found. */
function lookupOn(path) {
  return async (requestKey, _input, ctx) => {
    const res = await fetch(`${services()}${path}?key=${encodeURIComponent(requestKey)}`, {
      signal: ctx.signal,
    });
    if (res.status === 404) return { found: false };
    if (!res.ok) throw new Error(`${path} lookup answered HTTP ${res.status}`); // inconclusive
    return { found: true, outcome: 'succeeded', result: await res.json() };
  };
}

/** A read: searching twice changes nothing, so a same-key retry is the recovery. */
export const fetchSources = defineOperation({
  name: 'research.fetch',
  ...timing,
  idempotentWithKey: true,
  execute: (input, ctx) => ctx.dispatch(() => post('/search', { topic: input.topic }, ctx)),
});

export const writeDraft = defineOperation({
  name: 'research.draft',
  ...timing,
  lookup: lookupOn('/drafts'),
  execute: (input, ctx) => ctx.dispatch(() => post('/drafts', input, ctx)),
});

export const sendDraft = defineOperation({
  name: 'research.send',
  ...timing,
  lookup: lookupOn('/outbox'),
  execute: (input, ctx) => ctx.dispatch(() => post('/outbox', input, ctx)),
});
