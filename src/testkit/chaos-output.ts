/**
 * What a chaos run shows people: a progress bar while it runs (plain lines every two seconds
 * when the stream is not a terminal) and the closing table with the verdict.
 */
import cliProgress from 'cli-progress';
import Table from 'cli-table3';
import type { ChaosProgress, ChaosReport } from './chaos.js';

export interface ProgressView {
  update(p: ChaosProgress): void;
  stop(): void;
}

export function progressBar(out: NodeJS.WritableStream, total: number): ProgressView {
  const bar = new cliProgress.SingleBar(
    {
      stream: out,
      format:
        'settled {bar} {value}/{total} | {phase} | effects {effects} | kills {kills} | duplicates {dups}',
      barsize: 30,
      hideCursor: true,
      noTTYOutput: true,
      notTTYSchedule: 2_000,
    },
    cliProgress.Presets.shades_classic,
  );
  bar.start(total, 0, { phase: 'chaos', effects: '-', kills: 0, dups: '-' });
  return {
    update: (p) =>
      bar.update(p.settled, {
        phase: p.phase,
        effects: p.effects ?? '-',
        kills: p.kills,
        dups: p.duplicates ?? '-',
      }),
    stop: () => bar.stop(),
  };
}

const VIOLATIONS_SHOWN_MAX = 20;

export function renderChaosReport(r: ChaosReport, colour: boolean): string {
  const table = new Table({
    head: ['', 'jobs'],
    colAligns: ['left', 'right'],
    style: { compact: true, ...(colour ? {} : { head: [], border: [] }) },
  });
  const faults = Object.entries(r.faultsFired)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([point, n]) => [`  ${point}`, n] as [string, number]);
  table.push(
    ['delivered (enqueued)', r.delivered],
    ...(r.followUps > 0
      ? [
          ['  enqueued by the workers (follow-ups)', r.followUps] as [string, number],
          ['    handed to the idle worker at enqueue', r.handOffs] as [string, number],
        ]
      : []),
    ['succeeded', r.succeeded],
    ['  reconciled by lookup', r.reconciledByLookup],
    ['  reconciled by the late worker', r.reconciledByLateWorker],
    ['  retried with the same key', r.retriedWithSameKey],
    ['  retried, provably not sent', r.retriedNotSent],
    ['in review (NEEDS_REVIEW)', r.inReview],
    ['failed (definitive answer)', r.failed],
    ['lost', r.lost],
    ['duplicates at the downstream (must be 0)', r.duplicates],
    [
      'kills: SIGKILL / at fault points / on receipt',
      `${r.kills.sigkill} / ${r.kills.atFaultPoints} / ${r.kills.onReceipt}`,
    ],
    ...(faults.length ? [['fault points fired', ''] as [string, string], ...faults] : []),
  );
  return `${table.toString()}\n${verdictLine(r)}\n`;
}

function verdictLine(r: ChaosReport): string {
  const seconds = (r.durationMs / 1000).toFixed(1);
  if (r.ok)
    return `every effect happened at most once; every job settled (${seconds} s, seed ${r.seed})`;
  const shown = r.violations
    .slice(0, VIOLATIONS_SHOWN_MAX)
    .map(
      (v) => `  ${v.kind}: job ${v.jobId} key ${v.requestKey || '-'} (${v.state}): ${v.message}`,
    );
  const more = r.violations.length - shown.length;
  return [
    `BROKEN PROMISE: ${r.duplicates} duplicates, ${r.lost} lost, ${r.violations.length} violations (seed ${r.seed}; replay with this seed)`,
    ...shown,
    ...(more > 0 ? [`  … and ${more} more`] : []),
  ].join('\n');
}
