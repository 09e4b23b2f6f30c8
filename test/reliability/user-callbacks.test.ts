/**
 * The user's own callbacks are code reckon does not control (issue #21 item 3): a classifier,
 * logger or event listener that throws is a typed, recorded error for that job, never a
 * crashed worker.
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { defineOperation, openQueue, type Logger } from '../../src/index.js';
import { badClassify, fine } from '../fixtures/throwing-ops.js';
import { STORE_KINDS, tempSqliteStore } from '../helpers/stores.js';
import { FAST, Rig, until } from './harness.js';

const OPS_MODULE = fileURLToPath(new URL('../fixtures/throwing-ops.ts', import.meta.url));

describe.each(STORE_KINDS)('user callbacks that throw, on %s', (kind) => {
  it('a classifier that throws after dispatch: UNKNOWN with the error recorded; the worker process stays up', async (ctx) => {
    const rig = await Rig.open(ctx, kind);
    const child = rig.child({ operationsModule: OPS_MODULE });
    expect(await child.ready).toBe(true);
    const bad = await rig.q.enqueue(badClassify, { n: 1 }, { key: 'bad-1' });
    const detail = await until('the attempt is recorded', async () => {
      if (child.exitInfo) throw new Error(`the worker process died:\n${rig.childLogs()}`);
      const d = await rig.job(bad.id);
      return d.attempts[0]?.finishedAt ? d : null;
    });
    // The marker committed, so a throwing classifier cannot prove non-delivery: UNKNOWN.
    expect(detail.attempts[0]).toMatchObject({
      state: 'UNKNOWN',
      error: { code: 'CALLBACK_FAILED', name: 'CallbackFailed' },
    });
    expect(detail.attempts[0]!.error!.message).toContain('test.bad-classify');
    expect(detail.attempts[0]!.error!.message).toContain('classify');
    expect(detail.attempts[0]!.error!.details).toMatchObject({
      failure: { message: 'HTTP 502 after the request was sent' },
    });
    // Recorded by its worker, not found later by the reclaimer after a crash.
    expect(detail.attempts[0]!.reason).not.toBe('lease-expired-after-dispatch');
    // The same process goes on working.
    const ok = await rig.q.enqueue(fine, { n: 2 }, { key: 'fine-2' });
    await until(
      'the next job succeeds',
      async () => (await rig.job(ok.id)).job.state === 'SUCCEEDED',
    );
    expect(child.exitInfo).toBeUndefined();
    expect(child.pid).toBeGreaterThan(0);
  });
});

describe('loggers and listeners that throw', () => {
  it('a throwing logger and throwing listeners (sync and async) change nothing; the job journals the listener errors', async (ctx) => {
    const store = tempSqliteStore();
    ctx.onTestFinished(() => store.drop());
    const throwing = (): never => {
      throw new Error('logger bug');
    };
    const logger: Logger = { debug: throwing, info: throwing, warn: throwing, error: throwing };
    const q = await openQueue({ store: store.url, logger });
    ctx.onTestFinished(() => q.close());
    const op = defineOperation({
      name: 'test.logs',
      execute: (input: unknown, c) => {
        c.log.info({ input }, 'about to send');
        return c.dispatch(() => Promise.resolve({ sent: true }));
      },
    });
    const worker = q.worker({ operations: [op], ...FAST });
    const errors: unknown[] = [];
    worker.on('error', (e) => errors.push(e));
    worker.on('succeeded', () => {
      throw new Error('listener bug');
    });
    // An async listener, as users write them: its rejection must not be unhandled.
    // eslint-disable-next-line @typescript-eslint/no-misused-promises
    worker.on('succeeded', () => Promise.reject(new Error('async listener bug')));
    let after = 0;
    worker.on('succeeded', () => after++);
    await worker.start();
    const job = await q.enqueue(op, { n: 1 });
    const detail = await until('both listener errors are journaled', async () => {
      const d = await q.job(job.id);
      return d && d.events.filter((e) => e.kind === 'callback-error').length === 2 ? d : null;
    });
    expect(detail.job.state).toBe('SUCCEEDED');
    // The listener after the throwing one still ran.
    expect(after).toBe(1);
    const details = detail.events
      .filter((e) => e.kind === 'callback-error')
      .map((e) => e.detail as { callback: string; error: { code: string; message: string } });
    expect(details.map((d) => d.callback).sort()).toEqual([
      'listener:succeeded',
      'listener:succeeded',
    ]);
    expect(details.map((d) => d.error.message).join(' ')).toMatch(
      /listener bug.*async listener bug|async listener bug.*listener bug/,
    );
    expect(errors.length).toBe(2);
    // Still working.
    const second = await q.enqueue(op, { n: 2 });
    await until(
      'the second job succeeds',
      async () => (await q.job(second.id))?.job.state === 'SUCCEEDED',
    );
  });
});
