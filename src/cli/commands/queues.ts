/**
 * `reckon queues list|pause|resume` and `reckon schedules`: flow control from the shell
 * (issue #30). A pause is durable and held in the store: every worker of every process stops
 * claiming the queue (or operation) once it commits; attempts in flight finish.
 */
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import type { QueueInfo, ScheduleInfo } from '../../runtime/flow.js';
import { formatDuration, formatTime, printJson, println, table } from '../output.js';
import { addJsonOption, addStoreOption, withQueue, type StoreFlags } from '../store-option.js';

interface ListFlags extends StoreFlags {
  json?: boolean;
}

interface PauseFlags extends StoreFlags {
  operation?: boolean;
  reason?: string;
  json?: boolean;
}

/** The CLI holds the store's credentials: the actor is the OS user, said to come from the CLI. */
function cliActor(): string {
  try {
    return `cli:${userInfo().username}`;
  } catch {
    return 'cli:unknown';
  }
}

export function registerQueues(program: Command): void {
  const queues = program
    .command('queues')
    .summary('list queues; pause and resume a queue or an operation')
    .description(
      'A paused queue (or operation, with --operation) is skipped by every claim once the pause ' +
        'commits, in every worker process; attempts already leased finish under their leases. ' +
        'The pause is durable (it survives restarts) until resumed.',
    );

  const list = queues.command('list').summary('queues with their job counts and pauses');
  addStoreOption(list);
  addJsonOption(list, 'print { queues: [{ name, paused, counts, oldestDueAt }], paused: [...] }');
  list.action(async (flags: ListFlags) => {
    const { items, paused } = await withQueue(flags.store, { mustExist: true }, async (q) => ({
      items: await q.queues.list(),
      paused: await q.queues.paused(),
    }));
    if (flags.json) return printJson({ queues: items, paused });
    if (items.length === 0) println('no queues yet');
    else println(table(['queue', 'state', 'queued', 'leased', 'oldest due'], items.map(row)));
    const ops = paused.filter((p) => p.kind === 'operation');
    for (const p of ops)
      println(
        `operation ${p.name} paused by ${p.actor} at ${formatTime(p.pausedAt)}${p.reason ? `: ${p.reason}` : ''}`,
      );
  });

  for (const pause of [true, false]) {
    const verb = pause ? 'pause' : 'resume';
    const cmd = queues
      .command(verb)
      .summary(pause ? 'stop every worker claiming it' : 'let workers claim it again')
      .argument('<name>', 'the queue (or, with --operation, the operation)')
      .option('--operation', 'name an operation, in every queue, not a queue')
      .addHelpText(
        'after',
        `\nExample:\n  $ reckon queues ${verb} emails${pause ? ' --reason "provider outage"' : ''}`,
      );
    if (pause) cmd.option('--reason <text>', 'why, kept with the pause');
    addStoreOption(cmd);
    addJsonOption(cmd, `print { ${verb}d: name, kind, changed }`);
    cmd.action(async (name: string, flags: PauseFlags) => {
      const options = {
        actor: cliActor(),
        ...(flags.operation ? { operation: true } : {}),
        ...(flags.reason !== undefined ? { reason: flags.reason } : {}),
      };
      const changed = await withQueue(flags.store, { mustExist: true }, (q) =>
        pause ? q.queues.pause(name, options) : q.queues.resume(name, options),
      );
      const kind = flags.operation ? 'operation' : 'queue';
      if (flags.json) return printJson({ [`${verb}d`]: name, kind, changed });
      println(
        changed
          ? `${kind} ${name} ${verb}d`
          : `${kind} ${name} was already ${pause ? 'paused' : 'running'}: nothing changed`,
      );
    });
  }

  registerSchedules(program);
}

function registerSchedules(program: Command): void {
  const schedules = program
    .command('schedules')
    .summary('schedules the workers tick, with their next run')
    .description(
      'Schedules are defined in an operations module (defineSchedule) and ticked by every worker ' +
        'that serves it (reckon work --operations); each slot is enqueued once, whoever ticks.',
    );
  addStoreOption(schedules);
  addJsonOption(
    schedules,
    'print [{ name, cron, timezone, operation, lastSlotAt, nextRunAt, lagMs }]',
  );
  schedules.action(async (flags: ListFlags) => {
    const items = await withQueue(flags.store, { mustExist: true }, (q) => q.schedules.list());
    if (flags.json) return printJson(items);
    if (items.length === 0)
      return println('no schedules yet (a worker registers them when it starts)');
    println(
      table(
        ['schedule', 'cron', 'timezone', 'operation', 'next run', 'lag'],
        items.map(scheduleRow),
      ),
    );
  });
}

function row(q: QueueInfo): (string | number)[] {
  return [
    q.name,
    q.paused ? `paused by ${q.paused.actor}` : 'running',
    q.counts?.QUEUED ?? 0,
    q.counts?.LEASED ?? 0,
    q.oldestDueAt === null ? '-' : formatTime(q.oldestDueAt),
  ];
}

function scheduleRow(s: ScheduleInfo): (string | number)[] {
  return [
    s.name,
    s.cron,
    s.timezone ?? 'UTC',
    s.operation,
    s.nextRunAt === null ? '-' : formatTime(s.nextRunAt),
    s.lagMs > 0 ? formatDuration(s.lagMs) : '-',
  ];
}
