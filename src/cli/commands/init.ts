/**
 * `reckon init`: creates the store, or migrates it to this version's schema.
 */
import type { Command } from 'commander';
import { printJson, println } from '../output.js';
import {
  addJsonOption,
  addStoreOption,
  storeLabel,
  withQueue,
  type StoreFlags,
} from '../store-option.js';

interface InitFlags extends StoreFlags {
  json?: boolean;
}

export function registerInit(program: Command): void {
  const cmd = program
    .command('init')
    .summary('create the store, or migrate it to this version')
    .description(
      'Creates the journal (a SQLite file, or tables in a PostgreSQL schema) or migrates an ' +
        'existing one to the schema of this reckon version. Safe to run again: migrations are ' +
        'applied once, in order. Every other command expects the store to exist already.',
    )
    .addHelpText('after', '\nExample:\n  $ reckon init --store sqlite:./jobs.db');
  addStoreOption(cmd);
  addJsonOption(cmd);
  cmd.action(async (flags: InitFlags) => {
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
