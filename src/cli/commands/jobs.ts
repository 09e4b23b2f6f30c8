/**
 * `reckon jobs list|show|cancel`: what is in the journal.
 */
import { cliDecisionBy } from '../os-user.js';
import type { Command } from 'commander';
import { JobNotFound } from '../../core/errors.js';
import { JOB_STATES, type JobState } from '../../core/states.js';
import {
  SEARCH_LIMIT_MAX,
  SEARCH_SCAN_ROWS_DEFAULT,
  SEARCH_SCAN_ROWS_MAX,
  type JobSearchQuery,
} from '../../runtime/search.js';
import type {
  AttemptRecord,
  EventRecord,
  JobDetail,
  JobRecord,
  JobSearchPage,
} from '../../store/store.js';
import {
  brief,
  fieldTable,
  formatDuration,
  formatTime,
  printJson,
  println,
  table,
} from '../output.js';
import { intOption, statesOption, timeOption } from '../parse.js';
import { addJsonOption, addStoreOption, withQueue, type StoreFlags } from '../store-option.js';

interface ListFlags extends StoreFlags {
  state?: JobState[];
  queue?: string;
  operation?: string;
  run?: string;
  text?: string;
  from?: number;
  to?: number;
  limit: number;
  before?: string;
  scanRows: number;
  json?: boolean;
}

interface ShowFlags extends StoreFlags {
  json?: boolean;
}

interface CancelFlags extends StoreFlags {
  actor: string;
  reason?: string;
  json?: boolean;
}

export function registerJobs(program: Command): void {
  const jobs = program
    .command('jobs')
    .summary('list, show and cancel jobs')
    .description('Inspect the journal: jobs, their attempts and the events that changed them.');

  registerList(jobs);

  const show = jobs
    .command('show')
    .summary('one job with its attempts and events')
    .description('Shows one job: its state, attempts (with dispatch markers) and events.')
    .argument('<id>', 'the job id');
  addStoreOption(show);
  addJsonOption(show, 'print the job, attempts and events as JSON');
  show.action(async (id: string, flags: ShowFlags) => {
    const detail = await withQueue(flags.store, { mustExist: true }, (q) => q.job(id));
    if (!detail) throw new JobNotFound(id);
    if (flags.json) return printJson(detail);
    printDetail(detail);
  });

  const cancel = jobs
    .command('cancel')
    .summary('cancel a job that has not dispatched its request')
    .description(
      'Cancels a job whose request has not been dispatched: a QUEUED job, or a LEASED one ' +
        'before its dispatch marker. A job that may have caused its side effect cannot be ' +
        'cancelled (JOB_STATE_CONFLICT); use `reckon review` for those.',
    )
    .argument('<id>', 'the job id')
    .option('--actor <name>', 'who cancels, kept in the journal', 'cli')
    .option('--reason <text>', 'why, kept in the journal');
  addStoreOption(cancel);
  addJsonOption(cancel, 'print the cancelled job as JSON');
  cancel.action(async (id: string, flags: CancelFlags) => {
    const job = await withQueue(flags.store, { mustExist: true }, (q) =>
      q.cancel(id, {
        by: cliDecisionBy(flags.actor),
        ...(flags.reason ? { reason: flags.reason } : {}),
      }),
    );
    if (flags.json) return printJson(job);
    println(`job ${job.id} cancelled`);
  });
}

/** `reckon jobs list`. */
function registerList(jobs: Command): void {
  const list = jobs
    .command('list')
    .summary('list jobs, newest first, with filters')
    .description(
      'Lists jobs, newest first. One call reads at most a window of jobs below the cursor ' +
        `(--scan-rows, default ${SEARCH_SCAN_ROWS_DEFAULT.toLocaleString('en-US')}), whatever ` +
        'the filters: a filter matching few jobs says where the window stopped and where to go ' +
        'on (--before), instead of reading the whole journal. The same search as GET /api/jobs.',
    )
    .option(
      '--state <states>',
      `only these states, comma-separated: ${JOB_STATES.join(', ')}`,
      statesOption,
    )
    .option('--queue <name>', 'only this queue')
    .option('--operation <name>', 'only this operation')
    .option('--run <runId>', 'only the steps of this agent run (enqueued with { runId, stepId })')
    .option(
      '--text <text>',
      'a job id or request key, a run id or request fingerprint, or text in the input',
    )
    .option('--from <time>', 'only jobs created at or after this ISO 8601 time', timeOption)
    .option('--to <time>', 'only jobs created before this ISO 8601 time', timeOption)
    .option('--limit <n>', 'at most this many jobs', intOption(1, SEARCH_LIMIT_MAX), 50)
    .option('--before <id>', 'page: only jobs created before this job id (the next-page hint)')
    .option(
      '--scan-rows <n>',
      'the most jobs one call reads past',
      intOption(1, SEARCH_SCAN_ROWS_MAX),
      SEARCH_SCAN_ROWS_DEFAULT,
    )
    .addHelpText(
      'after',
      '\nExamples:\n  $ reckon jobs list --state unknown,needs_review --limit 20\n' +
        '  $ reckon jobs list --text refund:order-1234\n' +
        '  $ reckon jobs list --operation payments.refund --before <id from the previous page>',
    );
  addStoreOption(list);
  addJsonOption(list, 'print { jobs, nextBefore, scanStopped } as JSON, as GET /api/jobs does');
  list.action(async (flags: ListFlags) => {
    const page = await withQueue(flags.store, { mustExist: true }, (q) =>
      q.search(searchQuery(flags)),
    );
    if (flags.json)
      return printJson({
        jobs: page.jobs,
        nextBefore: page.nextBeforeId,
        scanStopped: page.scanStopped,
      });
    printPage(page, flags.scanRows);
  });
}

function searchQuery(flags: ListFlags): JobSearchQuery {
  return {
    ...(flags.state ? { state: flags.state } : {}),
    ...(flags.queue ? { queue: flags.queue } : {}),
    ...(flags.operation ? { operation: flags.operation } : {}),
    ...(flags.run ? { runId: flags.run } : {}),
    ...(flags.text ? { text: flags.text } : {}),
    ...(flags.from !== undefined ? { from: flags.from } : {}),
    ...(flags.to !== undefined ? { to: flags.to } : {}),
    ...(flags.before ? { before: flags.before } : {}),
    limit: flags.limit,
    scanRowsMax: flags.scanRows,
  };
}

function printPage(page: JobSearchPage, scanRows: number): void {
  const rows = page.jobs;
  if (rows.length > 0)
    println(
      table(
        ['id', 'operation', 'queue', 'state', 'attempts', 'request key', 'created'],
        rows.map((j) => [
          j.id,
          j.operation,
          j.queue,
          j.state,
          `${j.attemptCount}/${j.maxAttempts}`,
          brief(j.requestKey, 40),
          formatTime(j.createdAt),
        ]),
      ),
    );
  const next = page.nextBeforeId;
  if (page.scanStopped) {
    const found = rows.length === 0 ? 'no jobs match' : `${rows.length} matched`;
    println(
      `(${found} in the ${scanRows.toLocaleString('en-US')} jobs searched; older jobs were not ` +
        `searched: go on with --before ${next})`,
    );
  } else if (rows.length === 0) println('no jobs match');
  else if (next !== null) println(`(first ${rows.length}; next page: --before ${next})`);
}

function printDetail({ job, attempts, events }: JobDetail): void {
  println(fieldTable(jobFields(job)));
  println();
  println(`attempts (${attempts.length})`);
  if (attempts.length > 0)
    println(
      table(
        ['#', 'state', 'owner', 'leased at', 'dispatched at', 'finished at', 'outcome'],
        attempts.map(attemptRow),
      ),
    );
  println();
  println(`events (${events.length})`);
  if (events.length > 0)
    println(table(['at', '#', 'event', 'from → to', 'actor', 'detail'], events.map(eventRow)));
}

function jobFields(j: JobRecord): [string, string | number][] {
  const fields: [string, string | number][] = [
    ['id', j.id],
    ['operation', j.operation],
    ['state', j.state],
    ['queue', j.queue],
    ['request key', j.requestKey],
    ['fingerprint', j.fingerprint],
    ['priority', j.priority],
    ['attempts', `${j.attemptCount} of ${j.maxAttempts}`],
    ['timeout', formatDuration(j.timeoutMs)],
    ['created', formatTime(j.createdAt)],
    ['run at', formatTime(j.runAt)],
    ['finished', formatTime(j.finishedAt)],
    ['input', brief(j.input, 100)],
    ['result', brief(j.result, 100)],
    ['error', j.error ? brief(`${j.error.name}: ${j.error.message}`, 100) : '-'],
  ];
  if (j.runId !== null) fields.splice(6, 0, ['run / step', `${j.runId} / ${j.stepId ?? '-'}`]);
  if (j.nextCheckAt !== null) fields.push(['next check', formatTime(j.nextCheckAt)]);
  if (j.approvalReason !== null) fields.push(['approval reason', brief(j.approvalReason, 100)]);
  if (j.approvalExpiresAt !== null)
    fields.push(['approval expires', formatTime(j.approvalExpiresAt)]);
  return fields;
}

function attemptRow(a: AttemptRecord): string[] {
  const outcome = [
    a.reason,
    a.error ? `${a.error.name}: ${a.error.message}` : null,
    a.resolution ? `resolved ${a.resolution} by ${a.resolutionSource ?? '?'}` : null,
  ].filter((s): s is string => s !== null);
  return [
    String(a.attemptNo),
    a.state,
    brief(a.ownerId, 30),
    formatTime(a.leasedAt),
    formatTime(a.dispatchedAt),
    formatTime(a.finishedAt),
    brief(outcome.join('; ') || '-', 60),
  ];
}

function eventRow(e: EventRecord): string[] {
  return [
    formatTime(e.at),
    e.attemptNo === null ? '-' : String(e.attemptNo),
    e.kind,
    e.fromState || e.toState ? `${e.fromState ?? '-'} → ${e.toState ?? '-'}` : '-',
    brief(e.actor, 30),
    brief(e.detail, 50),
  ];
}
