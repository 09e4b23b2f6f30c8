/**
 * `reckon prune`: deletes the whole histories (job, attempts, events) of terminal jobs that
 * finished long enough ago, in small batches, optionally archived first (invariant 8).
 */
import { resolve } from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { InvalidInput } from '../../core/errors.js';
import {
  JsonlArchive,
  PRUNABLE_STATES,
  parseAge,
  pruneAll,
  type PruneTotals,
} from '../../runtime/retention.js';
import { SqliteStore } from '../../store/sqlite/sqlite-store.js';
import type { PrunableState } from '../../store/store.js';
import { UsageError } from '../exit.js';
import { formatDuration, printJson, println, table } from '../output.js';
import { intOption } from '../parse.js';
import {
  addJsonOption,
  addStoreOption,
  storeLabel,
  withQueue,
  type StoreFlags,
} from '../store-option.js';

interface PruneFlags extends StoreFlags {
  olderThan: number;
  state?: PrunableState[];
  archive?: string;
  dryRun?: boolean;
  batchSize: number;
  vacuum?: boolean;
  json?: boolean;
}

function ageOption(value: string): number {
  try {
    const age = parseAge(value, '--older-than');
    if (age === 'off') throw new InvalidInput('--older-than needs a duration, not off');
    return age;
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

function prunableStatesOption(
  value: string,
  previous: PrunableState[] | undefined,
): PrunableState[] {
  const states = value
    .split(',')
    .map((s) => s.trim().toUpperCase())
    .filter((s) => s !== '');
  for (const s of states)
    if (!PRUNABLE_STATES.includes(s as PrunableState))
      throw new InvalidArgumentError(
        `${s} cannot be pruned: only terminal states (${PRUNABLE_STATES.join(', ')}); ` +
          'UNKNOWN, NEEDS_REVIEW, waiting and live jobs are never deleted.',
      );
  return [...(previous ?? []), ...(states as PrunableState[])];
}

export function registerPrune(program: Command): void {
  const cmd = program
    .command('prune')
    .summary('delete old terminal job histories (optionally archived first)')
    .description(
      'Deletes the whole history (job, attempts, events) of each SUCCEEDED, FAILED or CANCELLED ' +
        'job that finished at least --older-than ago, in batches of --batch-size jobs (one ' +
        'transaction each), so workers keep running. Never touches UNKNOWN, NEEDS_REVIEW, ' +
        'waiting or live jobs. With --archive, each batch is appended to a JSON Lines file (one ' +
        'job with its attempts and events per line) and synced to disk before its rows are ' +
        "deleted. A pruned job's request key may be used again afterwards. Workers prune on " +
        'their own too (the retention setting); see docs/operations.md.',
    )
    .requiredOption(
      '--older-than <age>',
      'finished at least this long ago: 7d, 12h, 30m',
      ageOption,
    )
    .option(
      '--state <states>',
      `only these terminal states, comma-separated (default: ${PRUNABLE_STATES.join(',')})`,
      prunableStatesOption,
    )
    .option('--archive <file>', "append each job's history to this JSON Lines file first")
    .option('--dry-run', 'count what would be deleted; delete nothing')
    .option('--batch-size <n>', 'jobs per transaction', intOption(1, 10_000), 500)
    .option('--vacuum', 'SQLite: shrink the file afterwards (VACUUM; blocks writers while it runs)')
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  $ reckon prune --older-than 7d --dry-run\n' +
        '  $ reckon prune --older-than 30d --state SUCCEEDED --archive ./jobs-2026-11.jsonl\n' +
        '  $ reckon prune --older-than 7d --vacuum --store sqlite:./reckon.db',
    );
  addStoreOption(cmd);
  addJsonOption(cmd);
  cmd.action(runPrune);
}

/** Prunes (or counts), then prints what went. */
async function runPrune(flags: PruneFlags): Promise<void> {
  if (flags.dryRun && flags.archive)
    throw new UsageError('--dry-run deletes nothing, so it archives nothing: drop --archive');
  const states = [...new Set(flags.state ?? PRUNABLE_STATES)];
  const archive = flags.archive ? new JsonlArchive(resolve(flags.archive)) : undefined;
  const started = performance.now();
  const report = await withQueue(flags.store, { mustExist: true }, async (q) => {
    if (flags.vacuum && !(q.store instanceof SqliteStore))
      throw new UsageError(
        '--vacuum is for SQLite stores; PostgreSQL reclaims space by (auto)vacuum',
      );
    let totals: PruneTotals;
    try {
      totals = await pruneAll({
        store: q.store,
        states,
        olderThanMs: flags.olderThan,
        batchSize: flags.batchSize,
        pauseMs: 20,
        dryRun: flags.dryRun === true,
        ...(archive ? { archive } : {}),
      });
    } finally {
      await archive?.close();
    }
    const vacuum =
      flags.vacuum && !flags.dryRun && q.store instanceof SqliteStore ? q.store.vacuum() : null;
    return { totals, vacuum };
  });
  const { totals, vacuum } = report;
  const jobs = PRUNABLE_STATES.reduce((n, s) => n + totals.jobs[s], 0);
  const out = {
    store: storeLabel(flags.store),
    dryRun: flags.dryRun === true,
    olderThanMs: flags.olderThan,
    states,
    jobs,
    byState: totals.jobs,
    attempts: totals.attempts,
    events: totals.events,
    batches: totals.batches,
    archive: archive ? { path: archive.path, lines: archive.lines } : null,
    vacuum,
    ms: Math.round(performance.now() - started),
  };
  if (flags.json) return printJson(out);
  println(
    table(
      ['state', flags.dryRun ? 'would delete' : 'deleted'],
      [
        ...states.map((s) => [s, totals.jobs[s]]),
        ['attempts', totals.attempts],
        ['events', totals.events],
      ],
    ),
  );
  const verb = flags.dryRun ? 'would delete' : 'deleted';
  println(
    `${verb} ${jobs} job histories finished over ${formatDuration(flags.olderThan)} ago` +
      (flags.dryRun ? '' : ` in ${totals.batches} batch(es), ${formatDuration(out.ms)}`),
  );
  if (archive)
    println(`archived ${archive.lines} job(s) to ${archive.path} (synced before delete)`);
  if (vacuum)
    println(`file: ${vacuum.bytesBefore} bytes -> ${vacuum.bytesAfter} bytes after VACUUM`);
}
