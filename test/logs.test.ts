/**
 * Structured logs: every line about a job carries its ids and state; payloads and secrets never appear.
 */
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger, defineOperation, openQueue } from '../src/index.js';
import { tempSqliteStore } from './helpers/stores.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

describe('logs', () => {
  it('never contain a password or an API key from the payload, even when an operation logs them', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    const logger = createLogger({ level: 'debug', destination: sink });
    const store = tempSqliteStore();
    const q = await openQueue({ store: store.url, logger });
    cleanups.push(async () => {
      await q.close();
      await store.drop();
    });
    const PASSWORD = 'hunter2-correct-horse';
    const API_KEY = 'sk_live_51HxQy2eZvKYlo2C';
    const login = defineOperation({
      name: 'portal.login',
      execute: (input: { user: string; password: string; apiKey: string }, ctx) => {
        // A careless operation logs its credentials; the logger must redact them.
        ctx.log.info(
          { credentials: { user: input.user, password: input.password, apiKey: input.apiKey } },
          'logging in',
        );
        return ctx.dispatch(() => Promise.resolve({ session: 'ok', token: `tok-${input.apiKey}` }));
      },
    });
    const job = await q.enqueue(login, { user: 'ann', password: PASSWORD, apiKey: API_KEY });
    const w = q.worker({ operations: [login], pollIntervalMs: 10 });
    const done = new Promise((r) => w.once('succeeded', r));
    await w.start();
    await done;
    await w.stop();
    // The logger writes asynchronously: wait for the last line, not a guessed time.
    for (const deadline = Date.now() + 5_000; !lines.some((l) => l.includes('"worker stopped"'));) {
      if (Date.now() > deadline) throw new Error('the log never said "worker stopped"');
      await new Promise((r) => setTimeout(r, 5));
    }
    const all = lines.join('\n');
    expect(lines.length).toBeGreaterThan(3);
    expect(all).not.toContain(PASSWORD);
    expect(all).not.toContain(API_KEY);
    expect(all).toContain('[redacted]');
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const aboutJob = parsed.filter((l) => l.jobId === job.id);
    expect(aboutJob.length).toBeGreaterThanOrEqual(3);
    for (const l of aboutJob) {
      expect(l).toMatchObject({
        jobId: job.id,
        fingerprint: job.fingerprint,
        operation: 'portal.login',
      });
      expect(typeof l.attemptNo).toBe('number');
      expect(typeof l.state).toBe('string');
    }
  });
});
