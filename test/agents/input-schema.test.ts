/**
 * Operations that declare their input as a zod 4 schema: enqueue checks it (a typed
 * InvalidInput naming the field, nothing written) and tools get its JSON Schema.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineOperation, InvalidInput, openQueue, type Queue } from '../../src/index.js';
import { inputJsonSchema } from '../../src/agents/outcome.js';

const send = defineOperation({
  name: 'test.send',
  description: 'send a note',
  input: z.object({ to: z.email(), count: z.number().int().min(1).default(1) }),
  execute: (input) => Promise.resolve(input.count),
});

let q: Queue | undefined;
afterEach(async () => {
  await q?.close();
  q = undefined;
});

describe('operation input schema', () => {
  it('rejects a bad field by name and writes nothing', async () => {
    q = await openQueue({ store: 'sqlite::memory:' });
    const err = await q.enqueue(send, { to: 'not-an-address' } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInput);
    expect((err as InvalidInput).path).toBe('$.to');
    expect((err as InvalidInput).message).toMatch(/input rejected by test\.send: to: /);
    expect(await q.jobs()).toHaveLength(0);
  });

  it('stores the parsed input (defaults applied)', async () => {
    q = await openQueue({ store: 'sqlite::memory:' });
    const job = await q.enqueue(send, { to: 'a@example.com' } as never);
    expect(job.input).toEqual({ to: 'a@example.com', count: 1 });
  });

  it('gives tools a JSON Schema of the input', () => {
    const schema = inputJsonSchema(send);
    expect(schema).toMatchObject({
      type: 'object',
      properties: { to: { type: 'string', format: 'email' }, count: { type: 'integer' } },
      required: ['to'],
    });
  });

  it('refuses an input that is not a schema', () => {
    expect(() =>
      defineOperation({ name: 'x', input: {} as never, execute: () => Promise.resolve(1) }),
    ).toThrow(/input must be a zod schema/);
  });
});
