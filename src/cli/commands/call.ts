/**
 * `reckon call <operation> [input-json] --key K --wait 30s`: enqueue or attach, and wait for the
 * outcome (q.call). `reckon call --job <id>`: wait for a known job (q.waitFor). The exit code
 * says how it ended, so that scripts and agents can branch on it.
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { OutcomePending } from '../../core/errors.js';
import { WAIT_MS_MAX, type CallOutcome } from '../../runtime/outcomes.js';
import { EXIT, UsageError, reportError } from '../exit.js';
import { OPERATIONS_HELP, loadOperations } from '../operations-module.js';
import { printJson, println } from '../output.js';
import { intOption } from '../parse.js';
import { addJsonOption, addStoreOption, withQueue } from '../store-option.js';
import { enqueueOptions, parseInput, readInputText, type EnqueueFlags } from './enqueue.js';

interface CallFlags extends Omit<EnqueueFlags, 'operations'> {
  operations?: string;
  job?: string;
  wait: number;
}

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** `500ms`, `30s`, `2m`, `1h`; a bare number is seconds. */
export function durationOption(value: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(value.trim());
  const ms = m ? Math.round(Number(m[1]) * UNITS[m[2] ?? 's']!) : NaN;
  if (!Number.isFinite(ms) || ms > WAIT_MS_MAX)
    throw new InvalidArgumentError('expected a duration such as 500ms, 30s, 2m or 1h.');
  return ms;
}

const CALL_EXIT_HELP = `
Exit codes of call:
  0    SUCCEEDED: the result is printed on stdout (JSON)
  3    FAILED: the downstream refused definitively (the error is printed)
  4    CANCELLED: cancelled, or its approval was denied or expired
  5    no outcome yet (OUTCOME_PENDING): the wait ended while the job was QUEUED, LEASED,
       UNKNOWN, NEEDS_REVIEW or AWAITING_APPROVAL. Do not retry with another key: call
       again with the same key (or --job <id>) to keep waiting
  1    reckon refused the request (e.g. REQUEST_KEY_CONFLICT); 64 usage error`;

export function registerCall(program: Command): void {
  const cmd = program
    .command('call')
    .summary('enqueue or attach, and wait for the outcome')
    .description(
      'Enqueues a job for <operation> with its input, or attaches to the job its request key ' +
        'already names (same input; another input is REQUEST_KEY_CONFLICT), and waits up to ' +
        '--wait for its outcome, seen from any process. Run it again with the same key after a ' +
        'crash: it answers with the same job, never a second side effect.\n\n' +
        'With --job <id>, waits for that job instead.\n\n' +
        'Ctrl-C ends the wait (exit 5); the job goes on.',
    )
    .argument('[operation]', 'the operation name, e.g. mail.send')
    .argument('[input-json]', 'the input as JSON, or - to read it from stdin')
    .option('--operations <module>', OPERATIONS_HELP)
    .option('--job <id>', 'wait for this existing job instead of enqueueing')
    .option('--input-file <path>', 'read the input JSON from this file')
    .option('--key <key>', 'request key: the same key means the same side effect')
    .option('--run-id <id>', 'agent run id; with --step-id the key is <run-id>:<step-id>')
    .option('--step-id <id>', 'step of the agent run (see --run-id)')
    .option('--queue <name>', 'queue to put the job on', 'default')
    .option('--priority <n>', 'higher runs first, -1000 to 1000', intOption(-1000, 1000), 0)
    .addOption(
      new Option('--wait <duration>', 'how long to wait for the outcome: 500ms, 30s, 2m, 1h')
        .argParser(durationOption)
        .default(30_000, '30s'),
    )
    .addHelpText(
      'after',
      '\nExamples:\n' +
        `  $ reckon call mail.send '{"to":"a@b.c"}' --operations ./ops.js --key order-42:email --wait 1m\n` +
        '  $ reckon call --job 01936f0e-… --wait 10s --json\n' +
        CALL_EXIT_HELP,
    );
  addStoreOption(cmd);
  addJsonOption(cmd, 'print the outcome as JSON on stdout');
  cmd.action(
    async (operation: string | undefined, inputText: string | undefined, flags: CallFlags) => {
      const ac = new AbortController();
      const onSigint = () => ac.abort(new Error('interrupted (SIGINT)'));
      process.once('SIGINT', onSigint);
      try {
        const outcome = await run(operation, inputText, flags, ac.signal);
        process.exitCode = printOutcome(outcome, flags.json === true);
      } catch (err) {
        if (!(err instanceof OutcomePending)) throw err;
        reportError(err, flags.json === true);
        process.exitCode = EXIT.callPending;
      } finally {
        process.off('SIGINT', onSigint);
      }
    },
  );
}

async function run(
  operation: string | undefined,
  inputText: string | undefined,
  flags: CallFlags,
  signal: AbortSignal,
): Promise<CallOutcome<unknown>> {
  const wait = { timeoutMs: flags.wait, signal };
  if (flags.job !== undefined) {
    if (operation !== undefined)
      throw new UsageError('give either an operation and its input, or --job <id>, not both');
    const id = flags.job;
    return withQueue(flags.store, { mustExist: true }, (q) => q.waitFor(id, wait));
  }
  if (operation === undefined)
    throw new UsageError('missing the operation name (or --job <id> to wait for a known job)');
  if (flags.operations === undefined)
    throw new UsageError("required option '--operations <module>' not specified");
  const input = parseInput(await readInputText(inputText, flags.inputFile));
  const options = enqueueOptions({ ...flags, operations: flags.operations });
  const operations = await loadOperations(flags.operations);
  return withQueue(flags.store, { mustExist: true, operations }, (q) =>
    q.call(operation, input, { ...options, ...wait }),
  );
}

/** Prints the outcome; returns the exit code. */
function printOutcome(o: CallOutcome<unknown>, json: boolean): number {
  if (json) printJson(o);
  if (o.state === 'SUCCEEDED') {
    if (!json) println(JSON.stringify(o.result, null, 2));
    process.stderr.write(`SUCCEEDED: job ${o.jobId}\n`);
    return EXIT.ok;
  }
  process.stderr.write(`${o.state}: job ${o.jobId}: ${o.error.message}\n`);
  return o.state === 'FAILED' ? EXIT.callFailed : EXIT.callCancelled;
}
