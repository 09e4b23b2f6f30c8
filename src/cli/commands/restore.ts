/**
 * `reckon restore <backup> --store sqlite:<new path>`: a checked backup into a new location,
 * never over a store; jobs that may have been sent after the backup go to reconciliation first.
 */
import { resolve } from 'node:path';
import { Option, type Command } from 'commander';
import { redactStoreUrl } from '../../store/open.js';
import { restorePg } from '../../store/postgres/restore.js';
import { restoreSqlite, type RestoreReconcile } from '../../store/sqlite/backup.js';
import { UsageError } from '../exit.js';
import { fieldTable, formatTime, printJson, println } from '../output.js';
import { sqlitePath } from '../store-option.js';

interface RestoreFlags {
  store?: string;
  reconcile: RestoreReconcile;
  json?: boolean;
}

export function registerRestore(program: Command): void {
  const cmd = program
    .command('restore')
    .summary('restore a backup into a new store (SQLite file, or a pg_dump into a new schema)')
    .description(
      'Checks the backup (integrity_check, schema version, jobs by state) and copies it to the ' +
        'new store path given by --store, which must not exist: a restore never writes over a ' +
        'store. The backup holds nothing written after it was taken, so by default every job ' +
        'that may have been sent since (LEASED without a dispatch marker, or QUEUED and due) is ' +
        "marked UNKNOWN before any worker sees it: the operation's lookup, a same-key retry or " +
        'a person decides what happened, and nothing is blindly sent again. A job awaiting ' +
        'approval may have been decided on the old host: it goes to review (reckon review list). ' +
        'PostgreSQL: give a ' +
        '`pg_dump --format=custom --schema=<schema>` file and a --store URL whose database does ' +
        'not have that schema yet; pg_restore and psql (on PATH) restore it and mark the jobs ' +
        'in one transaction (the password goes to psql in PGPASSWORD, never on its command ' +
        'line). See docs/operations.md.',
    )
    .argument(
      '<backup>',
      'a file made by `reckon backup` (SQLite) or by pg_dump --format=custom (PostgreSQL)',
    )
    .addOption(
      new Option(
        '--store <url>',
        'the new store: sqlite:<path that does not exist yet>',
      ).makeOptionMandatory(),
    )
    .addOption(
      new Option(
        '--reconcile <which>',
        'which jobs to mark UNKNOWN (may have been sent after the backup)',
      )
        .choices(['unfinished', 'leased', 'none'])
        .default('unfinished'),
    )
    .option('--json', 'print JSON on stdout instead of tables')
    .addHelpText(
      'after',
      '\n--reconcile:\n' +
        '  unfinished  LEASED jobs without a marker and due QUEUED jobs (default: the backup was\n' +
        '              taken while workers ran, and the old host ran on after it); jobs\n' +
        '              AWAITING_APPROVAL go to review\n' +
        '  leased      only LEASED jobs without a marker (no worker claimed after the backup);\n' +
        '              jobs AWAITING_APPROVAL go to review\n' +
        '  none        nothing: the backup was taken with every worker stopped\n' +
        '\nPauses are kept; rate-limit windows and holds are cleared; schedules skip the slots\n' +
        'between the backup and the restore (the old host may have run them), except with none.\n' +
        '\nExample:\n  $ reckon restore ./reckon-2026-12-06.db --store sqlite:/srv/new/reckon.db',
    );
  cmd.action(runRestore);
}

async function runRestore(backup: string, flags: RestoreFlags): Promise<void> {
  const url = flags.store!;
  const target = sqlitePath(url);
  if (target === null) {
    if (!/^postgres(ql)?:\/\//.test(url))
      throw new UsageError(
        `--store must be sqlite:<new path> or postgres://…, got ${redactStoreUrl(url)}`,
      );
    return restorePostgres(backup, url, flags);
  }
  const r = restoreSqlite({ backup, target, reconcile: flags.reconcile });
  const out = {
    store: `sqlite:${resolve(target)}`,
    backup: resolve(backup),
    reconcile: flags.reconcile,
    ...r,
  };
  if (flags.json) return printJson(out);
  println(
    fieldTable([
      ['restored to', out.store],
      ['from', out.backup],
      ['schema version', r.check.schemaVersion],
      ['jobs', r.check.totalJobs],
      ...Object.entries(r.check.jobs)
        .filter(([, n]) => n > 0)
        .map(([s, n]): [string, number] => [`  ${s}`, n]),
      ['backup last event', formatTime(r.check.lastEventAt)],
      ['marked UNKNOWN (LEASED, no marker)', r.reconciled.leased],
      ['marked UNKNOWN (QUEUED, due)', r.reconciled.queued],
      ['to review (AWAITING_APPROVAL: decided on the old host?)', r.reconciled.approvals],
      ['LEASED with a marker (UNKNOWN at lease expiry)', r.leasedWithMarker],
    ]),
  );
  println(
    `restored. Start workers with --store ${out.store}; jobs marked UNKNOWN are looked up, ` +
      'retried with their key, or sent to review (reckon review list) before anything is sent again.',
  );
}

/** A pg_dump of the schema into a database where the schema does not exist yet, then marked. */
async function restorePostgres(dump: string, url: string, flags: RestoreFlags): Promise<void> {
  const u = new URL(url);
  const schema = u.searchParams.get('schema') ?? 'reckon';
  u.searchParams.delete('schema');
  if (!/^[a-z_][a-z0-9_]{0,47}$/.test(schema))
    throw new UsageError(`schema ${JSON.stringify(schema)} is not a valid name`);
  const r = await restorePg({
    dump: resolve(dump),
    connectionString: u.toString(),
    schema,
    location: redactStoreUrl(url),
    reconcile: flags.reconcile,
  });
  const out = {
    store: redactStoreUrl(url),
    backup: resolve(dump),
    reconcile: flags.reconcile,
    ...r,
  };
  if (flags.json) return printJson(out);
  println(
    fieldTable([
      ['restored to', `${out.store} (schema ${schema})`],
      ['from', out.backup],
      ['schema version', r.schemaVersion],
      ['marked UNKNOWN (LEASED, no marker)', r.reconciled.leased],
      ['marked UNKNOWN (QUEUED, due)', r.reconciled.queued],
      ['to review (AWAITING_APPROVAL: decided on the old host?)', r.reconciled.approvals],
      ['LEASED with a marker (UNKNOWN at lease expiry)', r.leasedWithMarker],
    ]),
  );
  println('restored. Jobs marked UNKNOWN are reconciled before anything is sent again.');
}
