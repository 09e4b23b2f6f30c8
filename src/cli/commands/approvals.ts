/**
 * `reckon approvals list|approve|deny`: jobs waiting for a person to allow their side effect.
 */
import type { Command } from 'commander';
import type { ApprovalRequest } from '../../runtime/approvals.js';
import { cliDecisionBy } from '../os-user.js';
import { brief, formatDuration, printJson, println, table } from '../output.js';
import { intOption } from '../parse.js';
import { addJsonOption, addStoreOption, withQueue, type StoreFlags } from '../store-option.js';

interface ListFlags extends StoreFlags {
  operation?: string;
  limit: number;
  json?: boolean;
}

interface DecideFlags extends StoreFlags {
  actor: string;
  note?: string;
  json?: boolean;
}

export function registerApprovals(program: Command): void {
  const approvals = program
    .command('approvals')
    .summary('jobs waiting for a person to allow their side effect')
    .description(
      'A job of an operation defined with `approval` waits AWAITING_APPROVAL: no worker claims ' +
        'it until someone approves it (it is then QUEUED and runs as any job). Denied, or not ' +
        'decided before its approval timeout, it ends CANCELLED with no attempt. Each decision ' +
        'is kept in the journal with who made it and why.',
    );

  const list = approvals
    .command('list')
    .summary('jobs awaiting approval, oldest first, with their input and reason')
    .option('--operation <name>', 'only this operation')
    .option('--limit <n>', 'at most this many jobs', intOption(1, 10_000), 100);
  addStoreOption(list);
  addJsonOption(
    list,
    'print [{ id, operation, input, approvalReason, ageMs, expiresInMs, … }] as JSON',
  );
  list.action(async (flags: ListFlags) => {
    const items = await withQueue(flags.store, { mustExist: true }, (q) =>
      q.approvals.list({
        limit: flags.limit,
        ...(flags.operation ? { operation: flags.operation } : {}),
      }),
    );
    if (flags.json) return printJson(items);
    if (items.length === 0) return println('nothing awaits approval');
    println(
      table(
        ['id', 'operation', 'input', 'reason', 'waiting', 'expires in'],
        items.map((j) => row(j)),
      ),
    );
    println(
      `${items.length} job(s) await approval. Decide with: reckon approvals approve|deny <id> --actor <you> [--note <why>]`,
    );
  });

  for (const approve of [true, false]) {
    const verb = approve ? 'approve' : 'deny';
    const cmd = approvals
      .command(verb)
      .summary(
        approve
          ? 'allow the job: it is QUEUED and runs'
          : 'refuse the job: it ends CANCELLED, never run',
      )
      .argument('<id>', 'the job id')
      .requiredOption('--actor <name>', 'who decided (kept as operator:<name>)')
      .option('--note <text>', 'why')
      .addHelpText(
        'after',
        `\nExample:\n  $ reckon approvals ${verb} 0190… --actor alice --note "${approve ? 'refund agreed with the customer' : 'amount looks wrong'}"\n\n` +
          'A job that is not (or no longer) awaiting approval fails with JOB_STATE_CONFLICT (exit 1).',
      );
    addStoreOption(cmd);
    addJsonOption(cmd, 'print the job after the decision as JSON');
    cmd.action(async (id: string, flags: DecideFlags) => {
      const job = await withQueue(flags.store, { mustExist: true }, (q) =>
        q.approvals.decide(id, {
          approve,
          by: cliDecisionBy(flags.actor),
          ...(flags.note !== undefined ? { note: flags.note } : {}),
        }),
      );
      if (flags.json) return printJson(job);
      println(
        `job ${job.id} ${approve ? 'approved' : 'denied'} by operator:${flags.actor.trim()}; now ${job.state}`,
      );
    });
  }
}

function row(j: ApprovalRequest): string[] {
  return [
    j.id,
    j.operation,
    brief(j.input, 40),
    j.approvalReason === null ? '-' : brief(j.approvalReason, 50),
    formatDuration(j.ageMs),
    j.expiresInMs === null ? 'never' : formatDuration(j.expiresInMs),
  ];
}
