/**
 * `reckon status`: the health of the store at a glance, with alert thresholds that make the
 * exit code usable from cron, CI or a container health check.
 */
import type { Command } from 'commander';
import { JOB_STATES } from '../../core/states.js';
import type { ApprovalStats, PauseRecord, StoreStats } from '../../store/store.js';
import { EXIT } from '../exit.js';
import { formatDuration, formatTime, printJson, println, table } from '../output.js';
import { intOption } from '../parse.js';
import {
  addJsonOption,
  addStoreOption,
  storeLabel,
  withQueue,
  type StoreFlags,
} from '../store-option.js';

interface StatusFlags extends StoreFlags {
  maxQueueAge?: number;
  maxUnknown?: number;
  maxReview?: number;
  maxExpiredLeases?: number;
  maxApprovalAge?: number;
  json?: boolean;
}

export interface HealthCheck {
  name: 'queue-age' | 'unknown' | 'review' | 'expired-leases' | 'approval-age';
  limit: number;
  value: number;
  ok: boolean;
  detail: string;
}

const INT_MAX = Number.MAX_SAFE_INTEGER;

export function registerStatus(program: Command): void {
  const cmd = program
    .command('status')
    .summary('health of the store, with alert thresholds')
    .description(
      'Shows, per queue, how many jobs are in each state and how long the oldest due job has ' +
        'waited; UNKNOWN and NEEDS_REVIEW jobs by operation; and leases that expired without ' +
        'being reclaimed yet (a sign that no worker is running recovery); and jobs awaiting ' +
        'approval by operation, with the age of the oldest; and the queues and operations ' +
        'paused now (no worker claims their jobs until `reckon queues resume`), with who ' +
        'paused them, when and why.\n\n' +
        'Each --max-* option adds a check. When a check fails, status lists it and exits with ' +
        'code 2 (1 when the store cannot be read), so that cron, CI or a health check can alert on it.',
    )
    .option(
      '--max-queue-age <ms>',
      'fail when a due job has waited longer than this',
      intOption(0, INT_MAX),
    )
    .option('--max-unknown <n>', 'fail when more jobs than this are UNKNOWN', intOption(0, INT_MAX))
    .option(
      '--max-review <n>',
      'fail when more jobs than this are NEEDS_REVIEW',
      intOption(0, INT_MAX),
    )
    .option(
      '--max-expired-leases <n>',
      'fail when more expired leases than this wait for the reclaimer',
      intOption(0, INT_MAX),
    )
    .option(
      '--max-approval-age <ms>',
      'fail when a job has awaited approval longer than this',
      intOption(0, INT_MAX),
    )
    .addHelpText(
      'after',
      '\nExample:\n  $ reckon status --max-queue-age 60000 --max-unknown 0 --max-review 5 --max-approval-age 3600000 --json',
    );
  addStoreOption(cmd);
  addJsonOption(
    cmd,
    'print { store, now, healthy, checks, queues, byOperation, expiredLeases, approvals, paused }',
  );
  cmd.action(runStatus);
}

async function runStatus(flags: StatusFlags): Promise<void> {
  const { stats, approvals, schemaVersion, paused } = await withQueue(
    flags.store,
    { mustExist: true },
    async (q) => ({
      stats: await q.store.statsGet(),
      approvals: await q.store.jobApprovalStats(),
      schemaVersion: await q.store.schemaVersion(),
      paused: await q.store.pauseList(),
    }),
  );
  const checks = healthChecks(stats, flags, approvals);
  const healthy = checks.every((c) => c.ok);
  if (!healthy) process.exitCode = EXIT.unhealthy;
  const report = {
    store: storeLabel(flags.store),
    schemaVersion,
    now: stats.now,
    healthy,
    checks,
    queues: stats.queues.map((q) => ({
      ...q,
      oldestDueAgeMs: q.oldestDueAt === null ? null : Math.max(0, stats.now - q.oldestDueAt),
    })),
    byOperation: stats.byOperation,
    expiredLeases: stats.expiredLeases,
    approvals: approvals.byOperation.map((o) => ({
      ...o,
      oldestAgeMs: Math.max(0, approvals.now - o.oldestAt),
    })),
    paused,
  };
  if (flags.json) return printJson(report);
  printStatus(report.store, schemaVersion, stats);
  printApprovals(approvals);
  printPaused(paused, stats.now);
  printChecks(checks);
  if (!healthy)
    process.stderr.write(
      `reckon: unhealthy: ${checks
        .filter((c) => !c.ok)
        .map((c) => c.detail)
        .join('; ')}\n`,
    );
}

export function healthChecks(
  stats: StoreStats,
  limits: Pick<
    StatusFlags,
    'maxQueueAge' | 'maxUnknown' | 'maxReview' | 'maxExpiredLeases' | 'maxApprovalAge'
  >,
  approvals?: ApprovalStats,
): HealthCheck[] {
  const checks: HealthCheck[] = [];
  if (limits.maxQueueAge !== undefined) {
    const limit = limits.maxQueueAge;
    let oldest = 0;
    let where = '';
    for (const q of stats.queues) {
      const age = q.oldestDueAt === null ? 0 : Math.max(0, stats.now - q.oldestDueAt);
      if (age > oldest) [oldest, where] = [age, q.queue];
    }
    checks.push({
      name: 'queue-age',
      limit,
      value: oldest,
      ok: oldest <= limit,
      detail:
        oldest === 0
          ? `no due job is waiting (limit ${formatDuration(limit)})`
          : `oldest due job waited ${formatDuration(oldest)} in queue ${where} (limit ${formatDuration(limit)})`,
    });
  }
  const count = (
    limit: number | undefined,
    name: 'unknown' | 'review',
    value: number,
    what: string,
  ) => {
    if (limit !== undefined)
      checks.push({
        name,
        limit,
        value,
        ok: value <= limit,
        detail: `${value} ${what} (limit ${limit})`,
      });
  };
  const sum = (f: (o: StoreStats['byOperation'][number]) => number) =>
    stats.byOperation.reduce((n, o) => n + f(o), 0);
  count(
    limits.maxUnknown,
    'unknown',
    sum((o) => o.unknown),
    'UNKNOWN job(s)',
  );
  count(
    limits.maxReview,
    'review',
    sum((o) => o.needsReview),
    'NEEDS_REVIEW job(s)',
  );
  if (limits.maxExpiredLeases !== undefined) {
    const limit = limits.maxExpiredLeases;
    checks.push({
      name: 'expired-leases',
      limit,
      value: stats.expiredLeases,
      ok: stats.expiredLeases <= limit,
      detail: `${stats.expiredLeases} expired lease(s) not yet reclaimed (limit ${limit})`,
    });
  }
  if (limits.maxApprovalAge !== undefined && approvals)
    checks.push(approvalAgeCheck(approvals, limits.maxApprovalAge));
  return checks;
}

function approvalAgeCheck(approvals: ApprovalStats, limit: number): HealthCheck {
  let oldest = 0;
  let where = '';
  for (const o of approvals.byOperation) {
    const age = Math.max(0, approvals.now - o.oldestAt);
    if (age > oldest || where === '') [oldest, where] = [age, o.operation];
  }
  return {
    name: 'approval-age',
    limit,
    value: oldest,
    ok: oldest <= limit,
    detail:
      where === ''
        ? `no job awaits approval (limit ${formatDuration(limit)})`
        : `oldest job awaiting approval waited ${formatDuration(oldest)} (operation ${where}, limit ${formatDuration(limit)})`,
  };
}

function printApprovals(approvals: ApprovalStats): void {
  if (approvals.byOperation.length === 0) return;
  println();
  println('awaiting approval, by operation:');
  println(
    table(
      ['operation', 'AWAITING_APPROVAL', 'oldest'],
      approvals.byOperation.map((o) => [
        o.operation,
        o.awaiting,
        formatDuration(Math.max(0, approvals.now - o.oldestAt)),
      ]),
    ),
  );
}

function printPaused(paused: PauseRecord[], now: number): void {
  if (paused.length === 0) return;
  println();
  println('paused (no worker claims their jobs until resumed):');
  println(
    table(
      ['kind', 'name', 'for', 'by', 'reason'],
      paused.map((p) => [
        p.kind,
        p.name,
        formatDuration(Math.max(0, now - p.pausedAt)),
        p.actor,
        p.reason ?? '-',
      ]),
    ),
  );
}

function printChecks(checks: HealthCheck[]): void {
  if (checks.length === 0) return;
  println();
  for (const c of checks) println(`${c.ok ? 'ok  ' : 'FAIL'}  ${c.name}: ${c.detail}`);
  const failed = checks.filter((c) => !c.ok).length;
  println(failed === 0 ? 'healthy' : `UNHEALTHY: ${failed} of ${checks.length} check(s) failed`);
}

function printStatus(store: string, schemaVersion: number, stats: StoreStats): void {
  println(`store ${store} (schema ${schemaVersion}), store clock ${formatTime(stats.now)}`);
  println();
  if (stats.queues.length === 0) println('no jobs yet');
  else
    println(
      table(
        ['queue', ...JOB_STATES, 'oldest due'],
        stats.queues.map((q) => [
          q.queue,
          ...JOB_STATES.map((s) => q.counts[s]),
          q.oldestDueAt === null ? '-' : formatDuration(Math.max(0, stats.now - q.oldestDueAt)),
        ]),
      ),
    );
  if (stats.byOperation.length > 0) {
    println();
    println('waiting on reconciliation or a person, by operation:');
    println(
      table(
        ['operation', 'UNKNOWN', 'NEEDS_REVIEW'],
        stats.byOperation.map((o) => [o.operation, o.unknown, o.needsReview]),
      ),
    );
  }
  println();
  println(`expired leases not yet reclaimed: ${stats.expiredLeases}`);
}
