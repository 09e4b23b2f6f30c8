/**
 * `reckon backup <file>`: a consistent, checked copy of a SQLite store, taken while workers go on.
 * A PostgreSQL store is backed up with pg_dump: the command says how, exactly, and exits 1.
 */
import { resolve } from 'node:path';
import cliProgress from 'cli-progress';
import { InvalidArgumentError, type Command } from 'commander';
import { BackupUnsupported } from '../../core/errors.js';
import { redactStoreUrl } from '../../store/open.js';
import { backupSqlite, type BackupMethod } from '../../store/sqlite/backup.js';
import { UsageError } from '../exit.js';
import { fieldTable, formatDuration, formatTime, printJson, println } from '../output.js';
import { addJsonOption, addStoreOption, sqlitePath, type StoreFlags } from '../store-option.js';

interface BackupFlags extends StoreFlags {
  method: BackupMethod;
  json?: boolean;
}

/** The URL without reckon's `?schema=` (pg_dump does not know it), and the schema. */
export function pgTarget(url: string): { url: string; schema: string } {
  const u = new URL(url);
  const schema = u.searchParams.get('schema') ?? 'reckon';
  u.searchParams.delete('schema');
  return { url: redactStoreUrl(u.toString()), schema };
}

function quote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** pg_dump and pg_restore commands for the store at `url`. */
export function pgBackupCommands(url: string, file: string): { dump: string; restore: string } {
  const t = pgTarget(url);
  const u = new URL(t.url);
  u.pathname = '/<new database>';
  if (t.schema !== 'reckon') u.searchParams.set('schema', t.schema);
  const newDb = decodeURI(u.toString());
  return {
    dump: `pg_dump --format=custom --schema=${t.schema} --file=${quote(file)} ${quote(t.url)}`,
    restore: `createdb <new database> && reckon restore ${quote(file)} --store ${quote(newDb)}`,
  };
}

function methodOption(value: string): BackupMethod {
  if (value !== 'vacuum-into' && value !== 'online')
    throw new InvalidArgumentError('expected vacuum-into or online.');
  return value;
}

export function registerBackup(program: Command): void {
  const cmd = program
    .command('backup')
    .summary('a consistent, checked copy of a SQLite store, while workers run')
    .description(
      'Copies a SQLite store into a new file while workers in other processes keep writing: one ' +
        'consistent snapshot (VACUUM INTO), checked before it is reported done (integrity_check, ' +
        'the same schema version as the store, its jobs by state). Never writes over a file. ' +
        'For a PostgreSQL store it prints the pg_dump command to use instead and exits 1. ' +
        'Restore with `reckon restore`; see docs/operations.md for what a backup means for ' +
        'jobs sent after it.',
    )
    .argument('<file>', 'the new backup file (must not exist)')
    .option(
      '--method <method>',
      'vacuum-into (one snapshot), or online (SQLite backup API: restarts on every write)',
      methodOption,
      'vacuum-into',
    )
    .addHelpText(
      'after',
      '\nExample:\n  $ reckon backup ./reckon-2026-12-06.db --store sqlite:./reckon.db',
    );
  addStoreOption(cmd);
  addJsonOption(cmd);
  cmd.action(runBackup);
}

async function runBackup(file: string, flags: BackupFlags): Promise<void> {
  const source = sqlitePath(flags.store);
  if (source === null) {
    if (!/^postgres(ql)?:\/\//.test(flags.store))
      throw new UsageError(`cannot back up ${redactStoreUrl(flags.store)}: not a SQLite file`);
    const c = pgBackupCommands(flags.store, file);
    throw new BackupUnsupported(
      `reckon does not copy a PostgreSQL store itself: back up its schema with pg_dump:\n  ${c.dump}\n` +
        `and restore it into a new database with:\n  ${c.restore}\n(see docs/operations.md)`,
      c.dump,
      c.restore,
    );
  }
  const showBar = !flags.json && process.stderr.isTTY === true;
  const bar = showBar
    ? new cliProgress.SingleBar(
        {
          stream: process.stderr,
          format: 'backup {bar} {percentage}% | {value}/{total} {unit}',
          barsize: 30,
          hideCursor: true,
        },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  let started = false;
  const unit = flags.method === 'online' ? 'pages' : 'bytes';
  let result;
  try {
    result = await backupSqlite({
      source,
      target: file,
      method: flags.method,
      ...(bar
        ? {
            onProgress: (done: number, total: number) => {
              if (!started) bar.start(total, done, { unit });
              started = true;
              bar.setTotal(total);
              bar.update(done, { unit });
            },
          }
        : {}),
    });
  } finally {
    bar?.stop();
  }
  const out = { store: `sqlite:${resolve(source)}`, ...result };
  if (flags.json) return printJson(out);
  println(
    fieldTable([
      ['backup', result.path],
      ['method', result.method],
      ['took', formatDuration(result.ms)],
      ['bytes', result.check.bytes],
      ['schema version', result.check.schemaVersion],
      ['jobs', result.check.totalJobs],
      ...Object.entries(result.check.jobs)
        .filter(([, n]) => n > 0)
        .map(([s, n]): [string, number] => [`  ${s}`, n]),
      ['last event', formatTime(result.check.lastEventAt)],
      ['integrity_check', 'ok'],
    ]),
  );
  println(`backup done and checked: ${result.path}`);
}
