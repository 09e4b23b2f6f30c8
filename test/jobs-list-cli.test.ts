/**
 * Issue #28: `reckon jobs list` goes through the bounded search of GET /api/jobs. A filter that
 * matches nothing reads one window of jobs (`--scan-rows`) and says where it stopped, instead of
 * reading the whole journal; `--before` walks on, window by window. On both stores, through the
 * real CLI process.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openQueue, type JobRecord } from '../src/index.js';
import { echo } from './fixtures/cli-ops.js';
import { reckon, type CliRun } from './helpers/cli.js';
import {
  STORE_KINDS,
  makeTestStore,
  pgUnavailableReason,
  type TestStore,
} from './helpers/stores.js';

const pgReason = await pgUnavailableReason();

/** Jobs in the store: the oldest is a step of run `run-x`, then 60 plain ones. */
const PLAIN = 60;
const WINDOW = 25;

interface Page {
  jobs: JobRecord[];
  nextBefore: string | null;
  scanStopped: boolean;
}

function page(run: CliRun): Page {
  expect(run.code, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as Page;
}

describe.each(STORE_KINDS)('reckon jobs list on %s', (kind) => {
  const skip = kind === 'postgres' && pgReason !== null;
  let store: TestStore;
  /** Every job id, newest first. */
  let ids: string[];
  let runJob: JobRecord;
  const list = (...args: string[]) =>
    reckon(['jobs', 'list', ...args], { env: { RECKON_STORE: store.url } });

  beforeAll(async () => {
    if (skip) return;
    store = await makeTestStore(kind);
    const q = await openQueue({ store: store.url, operations: [echo] });
    try {
      runJob = await q.enqueue(echo, { n: -1 }, { runId: 'run-x', stepId: 'fetch' });
      await q.enqueueMany(
        echo,
        Array.from({ length: PLAIN }, (_, n) => ({ input: { n }, key: `plain-${n}` })),
      );
      ids = (await q.jobs({ limit: 1_000 })).map((j) => j.id);
    } finally {
      await q.close();
    }
    expect(ids).toHaveLength(PLAIN + 1);
    expect(ids.at(-1)).toBe(runJob.id);
  }, 60_000);

  afterAll(async () => {
    if (!skip) await store.drop();
  });

  it.skipIf(skip)(
    'a filter matching nothing reads one window and says so; --before walks the rest',
    async () => {
      const first = page(await list('--queue', 'nowhere', '--scan-rows', String(WINDOW), '--json'));
      // The newest WINDOW jobs were read, no more: the next window starts below the lowest.
      expect(first).toEqual({ jobs: [], nextBefore: ids[WINDOW - 1], scanStopped: true });
      const second = page(
        await list(
          '--queue',
          'nowhere',
          '--scan-rows',
          String(WINDOW),
          '--before',
          first.nextBefore!,
          '--json',
        ),
      );
      expect(second).toEqual({ jobs: [], nextBefore: ids[2 * WINDOW - 1], scanStopped: true });
      // The last window holds fewer than WINDOW jobs: the whole journal has been searched.
      const last = page(
        await list(
          '--queue',
          'nowhere',
          '--scan-rows',
          String(WINDOW),
          '--before',
          second.nextBefore!,
          '--json',
        ),
      );
      expect(last).toEqual({ jobs: [], nextBefore: null, scanStopped: false });

      const table = await list('--state', 'FAILED', '--scan-rows', String(WINDOW));
      expect(table.code, table.stderr).toBe(0);
      expect(table.stdout).toContain(
        `(no jobs match in the ${WINDOW} jobs searched; older jobs were not searched: go on with --before ${ids[WINDOW - 1]})`,
      );
    },
    120_000,
  );

  it.skipIf(skip)(
    '--run finds a run step below the first window; pages by --limit and --before',
    async () => {
      const byRun = page(await list('--run', 'run-x', '--scan-rows', String(PLAIN), '--json'));
      expect(byRun).toEqual({ jobs: [], nextBefore: ids[PLAIN - 1], scanStopped: true });
      const found = page(
        await list(
          '--run',
          'run-x',
          '--scan-rows',
          String(PLAIN),
          '--before',
          byRun.nextBefore!,
          '--json',
        ),
      );
      expect(found.jobs.map((j) => j.id)).toEqual([runJob.id]);
      expect(found).toMatchObject({ nextBefore: null, scanStopped: false });

      const top = page(await list('--limit', '10', '--json'));
      expect(top.jobs.map((j) => j.id)).toEqual(ids.slice(0, 10));
      expect(top).toMatchObject({ nextBefore: ids[9], scanStopped: false });
      const table = await list('--limit', '10', '--before', ids[9]!);
      expect(table.code, table.stderr).toBe(0);
      expect(table.stdout).toContain(ids[10]);
      expect(table.stdout).not.toContain(ids[9]);
      expect(table.stdout).toContain(`(first 10; next page: --before ${ids[19]})`);

      const byKey = page(await list('--text', 'plain-7', '--json'));
      expect(byKey.jobs.map((j) => j.requestKey)).toEqual(['plain-7']);
    },
    120_000,
  );
});
