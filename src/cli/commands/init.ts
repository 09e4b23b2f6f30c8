/**
 * `reckon init`: creates the store, or migrates it to this version's schema; `--dry-run` shows
 * which migrations would run, without running them.
 */
import type { Command } from 'commander';
import { InvalidInput } from '../../core/errors.js';
import { redactStoreUrl } from '../../store/open.js';
import { pgPendingMigrations } from '../../store/postgres/pending.js';
import { sqlitePendingMigrations, type PendingMigrations } from '../../store/sqlite/pending.js';
import { UsageError } from '../exit.js';
import { printJson, println } from '../output.js';
import {
  addJsonOption,
  addStoreOption,
  sqlitePath,
  storeLabel,
  withQueue,
  type StoreFlags,
} from '../store-option.js';

interface InitFlags extends StoreFlags {
  json?: boolean;
  dryRun?: boolean;
}

async function pending(url: string): Promise<PendingMigrations> {
  const path = sqlitePath(url);
  if (path !== null) return sqlitePendingMigrations(path);
  if (!/^postgres(ql)?:\/\//.test(url))
    throw new UsageError(
      `--dry-run needs a SQLite file or a PostgreSQL URL, got ${redactStoreUrl(url)}`,
    );
  const u = new URL(url);
  const schema = u.searchParams.get('schema') ?? 'reckon';
  u.searchParams.delete('schema');
  if (!/^[a-z_][a-z0-9_]{0,47}$/.test(schema))
    throw new InvalidInput(`schema ${JSON.stringify(schema)} is not a valid name`);
  return pgPendingMigrations({
    connectionString: u.toString(),
    schema,
    location: redactStoreUrl(url),
  });
}

export function registerInit(program: Command): void {
  const cmd = program
    .command('init')
    .summary('create the store, or migrate it to this version')
    .description(
      'Creates the journal (a SQLite file, or tables in a PostgreSQL schema) or migrates an ' +
        'existing one to the schema of this reckon version. Safe to run again: migrations are ' +
        'applied once, in order. Every other command expects the store to exist already. ' +
        'With --dry-run, lists the migrations that would run (version, name, SQL) and changes ' +
        'nothing; docs/operations.md says which are safe while older workers run.',
    )
    .option('--dry-run', 'show the migrations that would run; change nothing')
    .addHelpText(
      'after',
      '\nExamples:\n  $ reckon init --store sqlite:./jobs.db\n  $ reckon init --dry-run --store postgres://reckon@db/prod',
    );
  addStoreOption(cmd);
  addJsonOption(cmd);
  cmd.action(async (flags: InitFlags) => {
    if (flags.dryRun) {
      const p = await pending(flags.store);
      if (flags.json) return printJson({ store: storeLabel(flags.store), dryRun: true, ...p });
      println(
        `${storeLabel(flags.store)}: ${p.exists ? `schema version ${p.current}` : 'no store yet'}; this reckon is at ${p.latest}`,
      );
      if (p.pending.length === 0) return println('nothing to migrate');
      for (const m of p.pending) {
        println(`\n-- migration ${m.version}: ${m.name}`);
        println(m.sql);
      }
      println(`\n${p.pending.length} migration(s) would run; nothing was changed (--dry-run)`);
      return;
    }
    const report = await withQueue(flags.store, { mustExist: false }, async (q) => ({
      store: storeLabel(flags.store),
      kind: q.store.kind,
      schemaVersion: await q.store.schemaVersion(),
    }));
    if (flags.json) return printJson(report);
    println(
      `store ready: ${report.store} (${report.kind}, schema version ${report.schemaVersion})`,
    );
  });
}
