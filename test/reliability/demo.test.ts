/**
 * The demo is a reliability run too: worker processes killed at random moments and at fault
 * points; it must report zero duplicates at the downstream and nothing lost.
 */
import { PassThrough } from 'node:stream';
import { expect, it } from 'vitest';
import { runDemo, type DemoReport } from '../../src/testkit/demo.js';

it('runDemo with small numbers: kills happen, zero duplicates, nothing lost', async () => {
  const out = new PassThrough();
  let text = '';
  out.on('data', (c: Buffer) => (text += c.toString()));
  const report = await runDemo({ jobs: 60, workers: 2, seed: 4242, json: true, out });
  expect(JSON.parse(text)).toEqual(report);
  expect(report).toMatchObject<Partial<DemoReport>>({
    delivered: 60,
    duplicates: 0,
    lost: 0,
    violations: [],
    ok: true,
  });
  expect(report.succeeded + report.failed + report.inReview).toBe(60);
  expect(report.kills.sigkill + report.kills.atFaultPoints).toBeGreaterThan(0);
  expect(report.effects).toBeLessThanOrEqual(60);
});

it('runDemo prints a progress line and the closing table', async () => {
  const out = new PassThrough();
  let text = '';
  out.on('data', (c: Buffer) => (text += c.toString()));
  const report = await runDemo({ jobs: 12, workers: 1, seed: 1, out });
  expect(report.ok).toBe(true);
  expect(text).toContain('seed 1');
  expect(text).toMatch(/settled .* \d+\/12/);
  expect(text).toMatch(/duplicates at the downstream \(must be 0\)\s*│\s*0 │/);
  expect(text).toContain('every effect happened at most once');
});
