/**
 * `reckon demo`: a crash-and-recover run against a fake downstream, ending in a verdict on the
 * business outcome (each effect once, nothing lost). The demo lives in the testkit and is
 * loaded only when asked for, so the CLI runs without it.
 */
import type { Command } from 'commander';
import { ReckonError, errorMessage } from '../../core/errors.js';
import { EXIT } from '../exit.js';
import { printJson } from '../output.js';
import { intOption } from '../parse.js';
import { addJsonOption } from '../store-option.js';

interface DemoFlags {
  store?: string;
  jobs?: number;
  workers?: number;
  seed?: number;
  json?: boolean;
}

/** What the CLI relies on from `src/testkit/demo.ts`. */
interface DemoReport {
  duplicates: number;
  lost: number;
  ok?: boolean;
  violations?: string[];
}
type RunDemo = (options: {
  storeUrl?: string;
  jobs?: number;
  workers?: number;
  seed?: number;
  json?: boolean;
  out?: NodeJS.WritableStream;
}) => Promise<DemoReport>;

// A variable, so that the CLI compiles before the demo module exists.
const DEMO_MODULE = '../../testkit/demo.js';

export function registerDemo(program: Command): void {
  const cmd = program
    .command('demo')
    .summary('watch reckon keep every side effect exactly once through crashes')
    .description(
      'Enqueues jobs against a fake downstream service, runs workers that crash at random ' +
        'points of the dispatch, recovers, and checks the business outcome: every effect ' +
        'happened once, or its job waits for review; none was lost. Exit code 2 if any effect ' +
        'was duplicated or lost.\n\n' +
        'The demo uses a temporary store unless --store is given (RECKON_STORE is not read, ' +
        'so the demo never writes into your real journal by accident).',
    )
    .option('--store <url>', 'run the demo in this store instead of a temporary one')
    .option('--jobs <n>', 'how many jobs', intOption(1, 1_000_000))
    .option('--workers <n>', 'how many worker processes', intOption(1, 256))
    .option(
      '--seed <n>',
      'random seed: the same seed replays the same run',
      intOption(0, 2 ** 31 - 1),
    )
    .addHelpText('after', '\nExample:\n  $ reckon demo --jobs 200 --workers 4 --seed 7');
  addJsonOption(cmd, 'print the report as JSON');
  cmd.action(async (flags: DemoFlags) => {
    const runDemo = await loadDemo();
    const report = await runDemo({
      ...(flags.store !== undefined ? { storeUrl: flags.store } : {}),
      ...(flags.jobs !== undefined ? { jobs: flags.jobs } : {}),
      ...(flags.workers !== undefined ? { workers: flags.workers } : {}),
      ...(flags.seed !== undefined ? { seed: flags.seed } : {}),
      json: flags.json === true,
      // With --json, stdout holds only the report (printed below); progress goes to stderr.
      out: flags.json ? process.stderr : process.stdout,
    });
    if (flags.json) printJson(report);
    if (report.ok === false || report.duplicates > 0 || report.lost > 0) {
      process.exitCode = EXIT.unhealthy;
      process.stderr.write(
        `reckon: demo failed: ${report.duplicates} duplicated effect(s), ${report.lost} lost job(s)` +
          (report.violations?.length ? `; ${report.violations.join('; ')}` : '') +
          '\n',
      );
    }
  });
}

async function loadDemo(): Promise<RunDemo> {
  let mod: { runDemo?: unknown };
  try {
    mod = (await import(DEMO_MODULE)) as { runDemo?: unknown };
  } catch (err) {
    throw new ReckonError(
      'DEMO_UNAVAILABLE',
      `the demo is not available in this build: ${errorMessage(err)}`,
    );
  }
  if (typeof mod.runDemo !== 'function')
    throw new ReckonError('DEMO_UNAVAILABLE', 'the demo module does not export runDemo');
  const run = mod.runDemo as RunDemo;
  return async (options) => {
    const report = await run(options);
    if (typeof report?.duplicates !== 'number' || typeof report.lost !== 'number')
      throw new ReckonError('DEMO_FAILED', 'the demo returned no verdict (duplicates, lost)');
    return report;
  };
}
