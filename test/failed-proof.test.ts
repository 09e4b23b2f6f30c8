/**
 * Issue #33 item 1 end to end, on both stores: a job ends FAILED only when every attempt is
 * proven to have had no effect. Attempt 1 of an idempotent operation reaches the downstream
 * and the connection resets (UNKNOWN); the reconciler retries with the same key; every later
 * attempt is refused a connection (ECONNREFUSED: not sent). When the attempts run out the job
 * goes to NEEDS_REVIEW (attempt 1 may have sent the email), `q.call` answers pending at once,
 * and `reckon call` exits 5, not 3 ("failed": the email was not sent).
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { OutcomePending } from '../src/index.js';
import { notify } from './fixtures/proof-ops.js';
import {
  pgUnavailableReason,
  tempPgStore,
  tempSqliteStore,
  type TestStore,
} from './helpers/stores.js';
import { resetThenRefuse, scenarioQueue } from './helpers/unproven.js';

const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'src', 'cli', 'main.ts');
const pgReason = await pgUnavailableReason();

const cleanup: (() => unknown)[] = [];
const push = (undo: () => unknown) => void cleanup.push(undo);
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function reckon(store: TestStore, args: string[]): Promise<{ code: number | null; out: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, RECKON_STORE: store.url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  cleanup.push(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
  return new Promise((res, rej) => {
    child.once('error', rej);
    child.once('close', (code) => res({ code, out }));
  });
}

const kinds: ['sqlite' | 'postgres', string | null][] = [
  ['sqlite', null],
  ['postgres', pgReason],
];

describe.each(kinds)('an unproven attempt keeps a job from FAILED on %s', (kind, skipReason) => {
  it.skipIf(skipReason !== null)(
    'reset, same-key retry, refused connections: NEEDS_REVIEW, q.call pending, exit 5',
    async () => {
      const store = kind === 'sqlite' ? tempSqliteStore() : await tempPgStore();
      cleanup.push(() => store.drop());
      const ds = await resetThenRefuse(push);
      const q = await scenarioQueue(store.url, push);

      const started = Date.now();
      const err = await q.call(notify, { to: 'a@b.c' }, { key: 'mail-1', timeoutMs: 60_000 }).then(
        (out) => out,
        (e: unknown) => e,
      );
      // Answered as soon as the job reached review, not after the minute of the wait.
      expect(Date.now() - started).toBeLessThan(45_000);
      expect(err).toBeInstanceOf(OutcomePending);
      const pending = err as OutcomePending;
      expect(pending.state).toBe('NEEDS_REVIEW');
      expect(pending.reason).toBe('needs-review');

      const detail = (await q.job(pending.jobId))!;
      expect(detail.job.state).toBe('NEEDS_REVIEW');
      expect(
        detail.attempts.map((a) => [a.state, a.resolution, a.reason?.split(':')[0] ?? null]),
      ).toEqual([
        ['UNKNOWN', 'retry', 'no-definitive-answer'],
        ['FAILED_BEFORE_SEND', null, 'not-sent'],
        ['FAILED_BEFORE_SEND', null, 'not-sent'],
      ]);
      const last = detail.events.at(-1)!;
      expect(last).toMatchObject({ toState: 'NEEDS_REVIEW', kind: 'attempt-failed-before-send' });
      expect(last.detail).toMatchObject({ unprovenAttempts: [1] });
      // The downstream got one request, and it did take effect: "failed" would have been a lie.
      expect(ds.requestsOf('mail-1')).toBe(1);
      expect(ds.effectsOf('mail-1')).toBe(1);

      const cli = await reckon(store, [
        'call',
        'proof.notify',
        '{"to":"a@b.c"}',
        '--operations',
        'test/fixtures/proof-ops.ts',
        '--key',
        'mail-1',
        '--wait',
        '30s',
      ]);
      expect(cli.code, cli.out).toBe(5);
      expect(cli.out).toContain('NEEDS_REVIEW');
    },
    120_000,
  );
});
