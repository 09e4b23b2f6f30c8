/**
 * `reckon enqueue <operation> [input-json]`: durably accepts one job.
 */
import { open } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { Option, type Command } from 'commander';
import { InvalidInput, errorMessage } from '../../core/errors.js';
import type { EnqueueOptions } from '../../runtime/queue.js';
import { LIMITS } from '../../runtime/settings.js';
import { UsageError } from '../exit.js';
import { OPERATIONS_HELP, loadOperations } from '../operations-module.js';
import { formatTime, printJson, println } from '../output.js';
import { intOption, timeOption } from '../parse.js';
import { addJsonOption, addStoreOption, withQueue, type StoreFlags } from '../store-option.js';

export interface EnqueueFlags extends StoreFlags {
  operations: string;
  inputFile?: string;
  key?: string;
  runId?: string;
  stepId?: string;
  queue?: string;
  priority?: number;
  delayMs?: number;
  runAt?: number;
  json?: boolean;
}

export function registerEnqueue(program: Command): void {
  const cmd = program
    .command('enqueue')
    .summary('add a job: one side effect to cause, once')
    .description(
      'Adds a job for <operation> with its input. When the command returns, the job is durable.\n\n' +
        'The request key names the side effect: enqueueing the same key with the same input again ' +
        'returns the existing job ("deduplicated"); with a different input it fails with ' +
        'REQUEST_KEY_CONFLICT and changes nothing. Without --key (or --run-id/--step-id) every ' +
        'enqueue is a new side effect.\n\n' +
        'The input is JSON: the [input-json] argument, "-" to read it from stdin, or --input-file.',
    )
    .argument('<operation>', 'the operation name, e.g. payments.charge')
    .argument('[input-json]', 'the input as JSON, or - to read it from stdin')
    .requiredOption('--operations <module>', OPERATIONS_HELP)
    .option('--input-file <path>', 'read the input JSON from this file')
    .option('--key <key>', 'request key: the same key means the same side effect')
    .option('--run-id <id>', 'agent run id; with --step-id the key is <run-id>:<step-id>')
    .option('--step-id <id>', 'step of the agent run (see --run-id)')
    .option('--queue <name>', 'queue to put the job on', 'default')
    .option('--priority <n>', 'higher runs first, -1000 to 1000', intOption(-1000, 1000), 0)
    .addOption(
      new Option('--delay-ms <ms>', 'run no earlier than this many ms from now')
        .argParser(intOption(0, 10 * 365 * 86_400_000))
        .conflicts('runAt'),
    )
    .addOption(
      new Option('--run-at <iso>', 'run no earlier than this time (ISO 8601)').argParser(
        timeOption,
      ),
    )
    .addHelpText(
      'after',
      '\nExamples:\n' +
        `  $ reckon enqueue payments.charge '{"customer":"c1","amountCents":500}' \\\n` +
        '      --operations ./ops.js --key order-42\n' +
        '  $ echo \'{"to":"a@b.c"}\' | reckon enqueue mail.send - --operations ./ops.js --run-id r1 --step-id s3',
    );
  addStoreOption(cmd);
  addJsonOption(cmd);
  cmd.action(async (operation: string, inputText: string | undefined, flags: EnqueueFlags) => {
    const input = parseInput(await readInputText(inputText, flags.inputFile));
    const options = enqueueOptions(flags);
    const operations = await loadOperations(flags.operations);
    const job = await withQueue(flags.store, { mustExist: true, operations }, (q) =>
      q.enqueue(operation, input, options),
    );
    if (flags.json) {
      return printJson({
        id: job.id,
        deduplicated: job.deduplicated,
        state: job.state,
        operation: job.operation,
        queue: job.queue,
        requestKey: job.requestKey,
        fingerprint: job.fingerprint,
        runAt: job.runAt,
      });
    }
    println(job.id);
    process.stderr.write(
      job.deduplicated
        ? `deduplicated: request key ${JSON.stringify(job.requestKey)} already belongs to this job (state ${job.state})\n`
        : job.state === 'AWAITING_APPROVAL'
          ? `enqueued ${job.operation}, key ${JSON.stringify(job.requestKey)}: it awaits approval (reckon approvals approve|deny ${job.id} --actor <you>)\n`
          : `enqueued ${job.operation} on queue ${job.queue}, key ${JSON.stringify(job.requestKey)}, runs at ${formatTime(job.runAt)}\n`,
    );
  });
}

export async function readInputText(
  arg: string | undefined,
  file: string | undefined,
): Promise<string> {
  if (arg !== undefined && file !== undefined)
    throw new UsageError('give the input either as an argument or with --input-file, not both');
  if (file !== undefined) {
    let stream;
    try {
      const handle = await open(file, 'r');
      // `end` is inclusive: at most limit + 1 bytes are read, enough to tell "over the limit".
      stream = handle.createReadStream({ start: 0, end: INPUT_BYTES_MAX });
    } catch (err) {
      throw new UsageError(`cannot read --input-file ${file}: ${errorMessage(err)}`, 'INPUT_FILE');
    }
    return readBounded(stream, `--input-file ${file}`);
  }
  if (arg === '-') {
    if (process.stdin.isTTY)
      process.stderr.write('reading the input JSON from stdin (end with Ctrl-D)\n');
    return readBounded(process.stdin, 'the input on stdin');
  }
  if (arg === undefined)
    throw new UsageError(
      'no input: give it as JSON after the operation name, "-" for stdin, or --input-file <path>',
    );
  return arg;
}

/** The input text may be at most the payload limit (its JSON can only be as long). */
const INPUT_BYTES_MAX = LIMITS.payloadBytesMax;

/** Reads a stream to its end, or stops (and destroys it) once it has passed INPUT_BYTES_MAX. */
async function readBounded(stream: Readable, what: string): Promise<string> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  try {
    for await (const chunk of stream) {
      const buf = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
      bytes += buf.length;
      if (bytes > INPUT_BYTES_MAX) {
        stream.destroy();
        throw new UsageError(
          `${what} is over ${INPUT_BYTES_MAX} bytes, the payload limit; a job's input is at most that as JSON`,
          'INPUT_TOO_LARGE',
        );
      }
      chunks.push(buf);
    }
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`cannot read ${what}: ${errorMessage(err)}`, 'INPUT_FILE');
  }
  return Buffer.concat(chunks).toString('utf8');
}

export function parseInput(text: string): unknown {
  if (text.trim() === '') throw new InvalidInput('the input is empty; give a JSON value, e.g. {}');
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new InvalidInput(`the input is not valid JSON: ${errorMessage(err)}`);
  }
}

export function enqueueOptions(flags: EnqueueFlags): EnqueueOptions {
  const hasRun = flags.runId !== undefined || flags.stepId !== undefined;
  if (hasRun && (flags.runId === undefined || flags.stepId === undefined))
    throw new UsageError('--run-id and --step-id go together: the key is <run-id>:<step-id>');
  if (hasRun && flags.key !== undefined)
    throw new UsageError('give either --key or --run-id/--step-id, not both');
  return {
    ...(flags.key !== undefined ? { key: flags.key } : {}),
    ...(hasRun ? { runId: flags.runId, stepId: flags.stepId } : {}),
    ...(flags.queue !== undefined ? { queue: flags.queue } : {}),
    ...(flags.priority !== undefined ? { priority: flags.priority } : {}),
    ...(flags.delayMs !== undefined ? { delayMs: flags.delayMs } : {}),
    ...(flags.runAt !== undefined ? { runAt: flags.runAt } : {}),
  };
}
