/**
 * `reckon sim`: the deterministic simulator (src/testkit/sim/) from the command line. Runs
 * seeds of the real runtime on a virtual clock with seeded faults, judges each run, and for a
 * failing seed prints the one command that replays it (shrunk to the fewest jobs and faults
 * that still fail). Exit 2 when a seed fails.
 *
 * The simulator lives in the test kit and is loaded only when asked for.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { EXIT, UsageError } from '../exit.js';
import { printJson } from '../output.js';
import { intOption, listOption } from '../parse.js';
import { addJsonOption } from '../store-option.js';
import { SIM_FAULTS, type SimFault } from '../../testkit/sim/scenario.js';
import type { SimResult } from '../../testkit/sim/run.js';

interface SimFlags {
  seed?: number;
  seeds?: number;
  from?: number;
  jobsMax?: number;
  without?: string[];
  trace?: boolean;
  shrink: boolean;
  keepGoing?: boolean;
  json?: boolean;
}

/** Seeds between two progress lines on stderr. */
const PROGRESS_EVERY = 100;

export function registerSim(program: Command): void {
  const cmd = program
    .command('sim')
    .summary('run the runtime under seeded faults on a virtual clock; replay any failure')
    .description(
      'The deterministic simulator: the real runtime (workers, reclaimer, reconciler, ' +
        'approvals and their expiry, retention, q.call waiters, operators) on one virtual clock ' +
        'and one in-memory SQLite store, several simulated processes, and faults chosen by a ' +
        'seed: crashes at any await, freezes past the lease, lost answers, a slow, down or ' +
        'throttling downstream, failing lookups, clock skew, failing store calls. Each run is ' +
        'judged by the business outcome at the simulated downstream. A seed fixes the whole ' +
        'run: a failing one prints the command that replays it, with --trace for the ' +
        'interleaving. See docs/simulation.md.',
    )
    .option('--seed <n>', 'run this one seed', intOption(0, 2 ** 32 - 1))
    .option('--seeds <n>', 'run this many seeds (default 100)', intOption(1, 1_000_000_000))
    .option('--from <n>', 'the first of --seeds (default 1)', intOption(0, 2 ** 32 - 1))
    .option('--jobs-max <n>', 'at most this many jobs per run (shrinking)', intOption(1, 1_000))
    .option(
      '--without <faults>',
      `fault kinds left out (shrinking), comma-separated: ${simFaultNames().join(', ')}`,
      faultsOption,
    )
    .option('--trace', 'print the interleaving of the run (with --seed)')
    .option('--no-shrink', 'print a failing seed as it is, without shrinking it')
    .option('--keep-going', 'run every seed, not stopping at the first failure')
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  $ reckon sim --seeds 1000\n' +
        '  $ reckon sim --seed 37 --trace\n' +
        '  $ reckon sim --seed 37 --jobs-max 1 --without crash,store --trace\n' +
        '  $ npm run sim -- --seeds 1000000 --keep-going',
    );
  addJsonOption(cmd, 'print the report as one JSON document (progress goes to stderr)');
  cmd.action(runSimCommand);
}

/** Every fault kind's name (scenario.ts is small: loading it does not load the simulator). */
function simFaultNames(): readonly string[] {
  return SIM_FAULTS;
}

function faultsOption(value: string, previous: string[] | undefined): string[] {
  const names = listOption(value, previous);
  for (const n of names)
    if (!simFaultNames().includes(n))
      throw new InvalidArgumentError(
        `unknown fault ${n}; faults are ${simFaultNames().join(', ')}.`,
      );
  return names;
}

async function runSimCommand(flags: SimFlags): Promise<void> {
  if (flags.seed !== undefined && (flags.seeds !== undefined || flags.from !== undefined))
    throw new UsageError('give either --seed (one run) or --seeds/--from (a batch)');
  if (flags.trace && flags.seed === undefined)
    throw new UsageError('--trace prints one run: give it with --seed');
  const limits = {
    ...(flags.jobsMax !== undefined ? { jobsMax: flags.jobsMax } : {}),
    ...(flags.without ? { without: flags.without as SimFault[] } : {}),
  };
  const sim = await import('../../testkit/sim/batch.js');
  if (flags.seed !== undefined) return runOne(flags, flags.seed, limits);
  const log = process.stderr;
  let failed = 0;
  const report = await sim.runSimBatch({
    ...limits,
    from: flags.from ?? 1,
    seeds: flags.seeds ?? 100,
    stopAtFailure: flags.keepGoing !== true,
    onResult: (r, done) => {
      if (!r.ok) failed++;
      if (!r.ok) log.write(`seed ${r.seed}: FAILED (${r.violations.length} violations)\n`);
      else if (done % PROGRESS_EVERY === 0) log.write(`${done} seeds run, ${failed} failed\n`);
    },
  });
  const shrunk =
    flags.shrink && report.failed[0] ? await sim.shrinkSim(report.failed[0].seed, limits) : null;
  const failures = report.failed.map((r) => ({
    seed: r.seed,
    violations: r.violations,
    replay: sim.replayCommand(r.seed, limits),
  }));
  const summary = {
    ok: report.failed.length === 0,
    seeds: report.seeds,
    seedsPerSecond: Number(report.seedsPerSecond.toFixed(2)),
    steps: report.steps,
    failures,
    ...(shrunk
      ? {
          shrunk: {
            seed: shrunk.seed,
            jobsMax: shrunk.limits.jobsMax,
            without: shrunk.limits.without,
            violations: shrunk.result.violations,
            replay: sim.replayCommand(shrunk.seed, shrunk.limits),
          },
        }
      : {}),
  };
  if (flags.json) printJson(summary);
  else {
    const out = process.stdout;
    out.write(
      `reckon sim: ${summary.seeds} seeds, ${summary.seedsPerSecond} seeds/s, ` +
        `${report.failed.length} failed\n`,
    );
    for (const f of failures) {
      out.write(`\nseed ${f.seed}:\n${f.violations.map((v) => `  - ${v}\n`).join('')}`);
      out.write(`  replay: ${f.replay}\n`);
    }
    if (summary.shrunk)
      out.write(
        `\nshrunk to ${summary.shrunk.jobsMax} jobs without [${summary.shrunk.without.join(', ')}]:\n` +
          `${summary.shrunk.violations.map((v) => `  - ${v}\n`).join('')}` +
          `  replay: ${summary.shrunk.replay}\n`,
      );
  }
  if (!summary.ok) process.exitCode = EXIT.unhealthy;
}

async function runOne(
  flags: SimFlags,
  seed: number,
  limits: { jobsMax?: number; without?: SimFault[] },
): Promise<void> {
  const { runSim } = await import('../../testkit/sim/run.js');
  const { replayCommand } = await import('../../testkit/sim/batch.js');
  const r: SimResult = await runSim({ seed, ...limits, trace: flags.trace === true });
  if (flags.json) printJson({ ...r, replay: replayCommand(seed, limits) });
  else {
    const out = process.stdout;
    if (r.trace) out.write(`${r.trace.join('\n')}\n\n`);
    out.write(
      `seed ${seed}: ${r.ok ? 'passed' : 'FAILED'}; ${r.jobs} jobs, faults ` +
        `${r.faults.join(',') || 'none'}; ${r.steps} events over ${r.virtualMs} virtual ms\n`,
    );
    for (const v of r.violations) out.write(`  - ${v}\n`);
    if (!r.ok) out.write(`replay: ${replayCommand(seed, limits)}\n`);
  }
  if (!r.ok) process.exitCode = EXIT.unhealthy;
}
