/**
 * The store side of the console's reads with many jobs (issue #28): each list and search the
 * load test asks for, timed in process one at a time (no HTTP, no concurrency), so a slow
 * query shows apart from the server's queueing. Run by hand on a store filled by
 * bench/server-load.ts:
 *
 *   npx tsx bench/search-probe.ts --store sqlite:/tmp/load.db [--runs 50]
 */
import { performance } from 'node:perf_hooks';
import { openQueue } from '../src/index.js';

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2)
  args.set(process.argv[i]!.slice(2), process.argv[i + 1] ?? '');
const STORE = args.get('store') ?? 'sqlite:/tmp/reckon-server-load.db';
const RUNS = Number(args.get('runs') ?? 50);

const q = await openQueue({ store: STORE });
const [newest] = await q.jobs({ limit: 1 });
const total = Number(/load:(\d+)/.exec(newest?.requestKey ?? '')?.[1] ?? 999_999) + 1;
const someKey = () => `load:${(Math.random() * total) | 0}`;
const cases: [string, () => Promise<unknown>][] = [
  ['jobs newest 50', () => q.jobs({ limit: 50 })],
  ['jobs state QUEUED', () => q.jobs({ state: 'QUEUED', limit: 50 })],
  ['jobs operation', () => q.jobs({ operation: 'payments.charge', limit: 50 })],
  ['search none', () => q.search({})],
  ['search key', () => q.search({ text: someKey() })],
  [
    'search text (recent)',
    () => q.search({ text: `user${total - 1 - ((Math.random() * 100) | 0)}` }),
  ],
  ['search text (no match)', () => q.search({ text: 'no-such-text' })],
  ['search state+operation', () => q.search({ state: 'QUEUED', operation: 'crm.update' })],
  ['search operation', () => q.search({ operation: 'payments.charge' })],
  ['search AWAITING_APPROVAL', () => q.search({ state: 'AWAITING_APPROVAL' })],
];
const rows = [];
for (const [name, run] of cases) {
  const ms: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now();
    await run();
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  const at = (p: number) => +ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]!.toFixed(2);
  rows.push({ case: name, p50Ms: at(0.5), p99Ms: at(0.99), maxMs: at(1) });
}
console.log(`${STORE}, ${total} jobs, ${RUNS} runs each`);
console.table(rows);
await q.close();
