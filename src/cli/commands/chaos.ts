/**
 * `reckon chaos`: the chaos harness (src/testkit/chaos.ts) from the command line. Worker
 * processes are killed with SIGKILL at random moments and at fault points, paused past their
 * leases, and the downstream drops responses; when the queue has settled, every job's business
 * outcome is checked. Exit 2 on any violation, with the seed that replays the run.
 *
 * The harness lives in the test kit and is loaded only when asked for.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Option, type Command } from 'commander';
import { errorMessage } from '../../core/errors.js';
import type {
  ChaosLedger,
  ChaosOptions,
  ChaosReport,
  ChaosScenario,
  ChaosWorkload,
} from '../../testkit/chaos.js';
import type { RandomPolicyWeights } from '../../testkit/downstream.js';
import { EXIT, UsageError } from '../exit.js';
import { printJson } from '../output.js';
import { intOption, shareOption, weightsOption } from '../parse.js';
import { addJsonOption } from '../store-option.js';

const DOWNSTREAM_NAMES = ['ok', 'fail', 'error', 'reset', 'drop', 'delay'] as const;
type DownstreamFlag = Partial<Record<(typeof DOWNSTREAM_NAMES)[number], number>>;

interface ChaosFlags {
  store?: string;
  jobs?: number;
  followUps?: number;
  workers?: number;
  seed?: number;
  scenario: ChaosScenario;
  killEveryMs?: number;
  faultShare?: number;
  killOnReceipt?: number;
  downstream?: DownstreamFlag;
  chaosMs?: number;
  deadlineMs?: number;
  operations?: string;
  ledger?: string;
  json?: boolean;
}

export function registerChaos(program: Command): void {
  const cmd = program
    .command('chaos')
    .summary('kill workers at random and at every fault point, then check every job')
    .description(
      'Runs a workload with several worker processes and hurts them: SIGKILL at seeded random ' +
        'moments, kills and pauses at the fault points, kills as a request reaches the ' +
        'downstream; the downstream drops responses, resets connections and answers 5xx. ' +
        'Whatever dies is restarted. When the queue has settled, the business outcome of every ' +
        'job is checked: each effect at most once, exactly once for SUCCEEDED jobs, none for ' +
        'jobs that failed or never dispatched, the rest in NEEDS_REVIEW with evidence, nothing ' +
        'lost. Exit code 2 on any violation; the seed printed replays the run.\n\n' +
        'The store is a fresh temporary SQLite file unless --store is given (RECKON_STORE is ' +
        'not read, so chaos never writes into your real journal by accident).\n\n' +
        'Your own operations: --operations <module> (loaded by every worker process) with ' +
        '--ledger <module>, which exports effectsOf(requestKey) => number (or a Promise of ' +
        'one), counted at your downstream, and workload({ jobs, seed, random, runTag }) => ' +
        '[{ operation, input, key }]. See docs/chaos.md.',
    )
    .option(
      '--store <url>',
      'run in this store (sqlite:<file> or postgres://…) instead of a temporary one',
    )
    .option('--jobs <n>', 'how many jobs (default 300)', intOption(1, 100_000))
    .option(
      '--follow-ups <n>',
      'of the jobs, how many the workers enqueue themselves, one whenever idle, as agents ' +
        'enqueue follow-up work (on PostgreSQL, handed to the idle worker at enqueue; default 0)',
      intOption(0, 100_000),
    )
    .option('--workers <n>', 'how many worker processes (default 3)', intOption(1, 64))
    .option('--seed <n>', 'random seed: the same seed replays the run', intOption(0, 2 ** 31 - 1))
    .addOption(
      new Option('--scenario <name>', 'recovery path of the built-in operations')
        .choices(['lookup', 'idempotent', 'none', 'mixed'])
        .default('mixed'),
    );
  addHurtOptions(cmd);
  cmd
    .option('--operations <module>', 'your operations module (needs --ledger)')
    .option('--ledger <module>', 'module exporting effectsOf(requestKey) and workload(ctx)')
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  $ reckon chaos --jobs 300 --workers 3 --seed 7\n' +
        '  $ reckon chaos --store postgres://localhost/chaos --scenario none --json\n' +
        '  $ reckon chaos --store postgres://localhost/chaos --jobs 90 --follow-ups 90\n' +
        '  $ reckon chaos --kill-every-ms 0 --fault-share 0 --downstream drop=20,reset=0\n' +
        '  $ reckon chaos --operations ./ops.js --ledger ./ledger.js --jobs 100',
    );
  addJsonOption(cmd, 'print the report as JSON (progress goes to stderr)');
  cmd.action(runChaosCommand);
}

/** The options that say how chaos hurts the workers and the downstream, and for how long. */
function addHurtOptions(cmd: Command): void {
  cmd
    .option(
      '--kill-every-ms <ms>',
      'mean time between random SIGKILLs, 0 for none (default 1000)',
      intOption(0, 3_600_000),
    )
    .option(
      '--fault-share <share>',
      'share of the (re)started workers armed with one fault point, 0 to 1 (default 0.5)',
      shareOption,
    )
    .option(
      '--kill-on-receipt <p>',
      "probability that a request's sender is killed as it reaches the built-in downstream " +
        '(default 0.02)',
      shareOption,
    )
    .option(
      '--downstream <weights>',
      'how the built-in downstream answers, as weights over its requests: ok, fail (a refusal), ' +
        'error (5xx), reset (connection reset), drop (effect committed, answer lost), and delay ' +
        '(the latest answer in ms, 0 for none); names left out keep their defaults ' +
        '(ok=88,fail=2,error=3,reset=3,drop=4,delay=600)',
      weightsOption(DOWNSTREAM_NAMES),
    )
    .option(
      '--chaos-ms <ms>',
      'chaos stops after this long, or at 85% settled (default 20000)',
      intOption(0, 86_400_000),
    )
    .option(
      '--deadline-ms <ms>',
      'the whole run; jobs unsettled by then count as lost (default 120000)',
      intOption(1_000, 86_400_000),
    );
}

async function runChaosCommand(flags: ChaosFlags): Promise<void> {
  if ((flags.operations === undefined) !== (flags.ledger === undefined))
    throw new UsageError('--operations and --ledger go together: your operations need your ledger');
  if (flags.operations !== undefined && flags.followUps)
    throw new UsageError('--follow-ups are jobs of the built-in workload, not of yours');
  if ((flags.followUps ?? 0) > (flags.jobs ?? 300))
    throw new UsageError(
      `--follow-ups ${flags.followUps} is more than the run's ${flags.jobs ?? 300} jobs: they are a part of them`,
    );
  if (flags.operations !== undefined && flags.downstream)
    throw new UsageError(
      '--downstream sets the built-in downstream; with --operations it is yours',
    );
  if (flags.operations !== undefined && flags.killOnReceipt !== undefined)
    throw new UsageError(
      '--kill-on-receipt is done by the built-in downstream; with --operations it is yours',
    );
  const user = flags.ledger ? await loadLedger(flags.ledger) : undefined;
  const { runChaos } = await import('../../testkit/chaos.js');
  const kills = {
    ...(flags.killEveryMs !== undefined ? { everyMs: flags.killEveryMs } : {}),
    ...(flags.faultShare !== undefined ? { faultShare: flags.faultShare } : {}),
    ...(flags.killOnReceipt !== undefined ? { onReceipt: flags.killOnReceipt } : {}),
  };
  const { progressBar, renderChaosReport } = await import('../../testkit/chaos-output.js');
  const out = flags.json ? process.stderr : process.stdout;
  let bar: ReturnType<typeof progressBar> | undefined;
  const options: ChaosOptions = {
    ...(flags.store !== undefined ? { storeUrl: flags.store } : {}),
    ...(flags.jobs !== undefined ? { jobs: flags.jobs } : {}),
    ...(flags.followUps !== undefined ? { followUps: flags.followUps } : {}),
    ...(flags.workers !== undefined ? { workers: flags.workers } : {}),
    ...(flags.seed !== undefined ? { seed: flags.seed } : {}),
    ...(Object.keys(kills).length > 0 ? { kills } : {}),
    ...(flags.downstream ? { downstream: await downstreamWeights(flags.downstream) } : {}),
    ...(flags.chaosMs !== undefined ? { chaosMs: flags.chaosMs } : {}),
    ...(flags.deadlineMs !== undefined ? { deadlineMs: flags.deadlineMs } : {}),
    ...(user
      ? { operationsModule: resolve(flags.operations!), ...user }
      : { scenario: flags.scenario }),
    onStart: (s) => {
      out.write(
        `reckon chaos: ${s.jobs} jobs, ${s.workers} worker processes, scenario ${s.scenario}, ` +
          `seed ${s.seed}, store ${s.storeUrl}\n`,
      );
      bar = progressBar(out, s.jobs);
    },
    onProgress: (p) => bar?.update(p),
  };
  let report: ChaosReport;
  try {
    report = await runChaos(options);
  } finally {
    bar?.stop();
  }
  if (flags.json) printJson(report);
  else process.stdout.write(renderChaosReport(report, process.stdout.isTTY === true));
  if (!report.ok) {
    process.exitCode = EXIT.unhealthy;
    process.stderr.write(
      `reckon: chaos found ${report.violations.length} violation(s): ${report.duplicates} ` +
        `duplicated effect(s), ${report.lost} lost job(s); replay with --seed ${report.seed}\n`,
    );
  }
}

/** `--downstream`: the given weights over the defaults; `delay` is the latest answer in ms. */
async function downstreamWeights(flag: DownstreamFlag): Promise<RandomPolicyWeights> {
  const { DEFAULT_DOWNSTREAM_WEIGHTS } = await import('../../testkit/chaos.js');
  const { weightsProblem } = await import('../../testkit/downstream.js');
  const { delay, ...actions } = flag;
  const weights = { ...DEFAULT_DOWNSTREAM_WEIGHTS, ...actions };
  if (delay !== undefined)
    Object.assign(weights, { delayProbability: delay > 0 ? 1 : 0, delayMsMax: delay });
  const problem = weightsProblem(weights);
  if (problem) throw new UsageError(`--downstream: ${problem}`);
  return weights;
}

/** `--ledger <module>`: effectsOf and workload, from the user's module. */
async function loadLedger(spec: string): Promise<{ ledger: ChaosLedger; workload: ChaosWorkload }> {
  const path = resolve(process.cwd(), spec);
  if (!existsSync(path))
    throw new UsageError(`ledger module not found: ${path}`, 'LEDGER_MODULE_NOT_FOUND');
  let mod: { effectsOf?: unknown; workload?: unknown; default?: unknown };
  try {
    mod = (await import(pathToFileURL(path).href)) as typeof mod;
  } catch (err) {
    throw new UsageError(
      `cannot load ledger module ${path}: ${errorMessage(err)}`,
      'LEDGER_MODULE_FAILED',
    );
  }
  const source = (mod.effectsOf ? mod : (mod.default ?? {})) as typeof mod;
  if (typeof source.effectsOf !== 'function' || typeof source.workload !== 'function')
    throw new UsageError(
      `${path} must export effectsOf(requestKey) and workload({ jobs, seed, random, runTag })`,
      'LEDGER_MODULE_INVALID',
    );
  return {
    ledger: source.effectsOf as ChaosLedger,
    workload: source.workload as ChaosWorkload,
  };
}
