/**
 * Retention (invariant 8): deleting the whole histories of terminal jobs that finished long
 * enough ago, in small batches, optionally archived first. Used by `reckon prune` and by the
 * worker's own retention loop. Never a job in UNKNOWN, NEEDS_REVIEW, a waiting or a live state:
 * the store deletes terminal jobs only.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { systemClock, type Clock } from '../core/clock.js';
import { InvalidInput } from '../core/errors.js';
import type { Logger } from '../core/operation.js';
import type { JobDetail, JobPruneResult, PrunableState, Store } from '../store/store.js';

export const PRUNABLE_STATES: readonly PrunableState[] = ['SUCCEEDED', 'FAILED', 'CANCELLED'];

const DAY_MS = 86_400_000;

/** Per terminal state: how long a finished job's history is kept, in ms, or 'off' (forever). */
export type RetentionAges = Record<PrunableState, number | 'off'>;

export interface RetentionSettings {
  ages: RetentionAges;
  /** How often the worker looks for histories to delete. */
  intervalMs: number;
  /** Jobs per transaction. */
  batchSize: number;
  /** Pause between two batches, so that other writers get the store. */
  pauseMs: number;
}

/**
 * Production defaults: a succeeded or cancelled job's history for 7 days (pg-boss keeps 7 days;
 * River keeps completed jobs 24 h, cancelled ones 7 days), a failed one's for 30 days, since
 * failures are what people come back to read.
 */
export const DEFAULT_RETENTION: RetentionSettings = {
  ages: { SUCCEEDED: 7 * DAY_MS, FAILED: 30 * DAY_MS, CANCELLED: 7 * DAY_MS },
  intervalMs: 5 * 60_000,
  batchSize: 500,
  pauseMs: 50,
};

/** What a worker accepts: 'off', or any of the settings, ages as ms or text ('7d', '12h', 'off'). */
export type RetentionOptions =
  | 'off'
  | {
      ages?: Partial<Record<PrunableState, number | string>>;
      intervalMs?: number;
      batchSize?: number;
      pauseMs?: number;
    };

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: DAY_MS };

/** `7d`, `12h`, `30m`, `45s`, `500ms` (or a number of ms) as ms; `off` as 'off'. */
export function parseAge(value: string | number, what = 'age'): number | 'off' {
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || value < 0)
      throw new InvalidInput(`${what} must be a whole number of ms of at least 0, got ${value}`);
    return value;
  }
  const text = value.trim().toLowerCase();
  if (text === 'off') return 'off';
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(text);
  if (!m)
    throw new InvalidInput(
      `${what} must be a duration such as 7d, 12h, 30m, 45s or 500ms, or off; got ${JSON.stringify(value)}`,
    );
  return Number(m[1]) * UNIT_MS[m[2]!]!;
}

/** Validated settings; null when retention is off altogether. */
export function retentionSettings(o: RetentionOptions | undefined): RetentionSettings | null {
  if (o === 'off') return null;
  const d = DEFAULT_RETENTION;
  const ages = { ...d.ages };
  for (const [state, age] of Object.entries(o?.ages ?? {})) {
    if (!PRUNABLE_STATES.includes(state as PrunableState))
      throw new InvalidInput(
        `retention ages are per terminal state (${PRUNABLE_STATES.join(', ')}); got ${state}`,
      );
    if (age !== undefined) ages[state as PrunableState] = parseAge(age, `retention of ${state}`);
  }
  const s: RetentionSettings = {
    ages,
    intervalMs: o?.intervalMs ?? d.intervalMs,
    batchSize: o?.batchSize ?? d.batchSize,
    pauseMs: o?.pauseMs ?? d.pauseMs,
  };
  const int = (name: 'intervalMs' | 'batchSize' | 'pauseMs', min: number, max: number) => {
    const v = s[name];
    if (!Number.isInteger(v) || v < min || v > max)
      throw new InvalidInput(
        `retention ${name} must be an integer from ${min} to ${max}, got ${v}`,
      );
  };
  int('intervalMs', 10, 24 * 3_600_000);
  int('batchSize', 1, 10_000);
  int('pauseMs', 0, 60_000);
  return PRUNABLE_STATES.every((st) => ages[st] === 'off') ? null : s;
}

/**
 * A JSON Lines archive: one line per job (`{ job, attempts, events }`), appended and synced to
 * disk before the caller deletes the rows. A new file's directory entry is synced too.
 */
export class JsonlArchive {
  private handle: FileHandle | undefined;
  lines = 0;

  constructor(readonly path: string) {}

  async append(histories: JobDetail[]): Promise<void> {
    if (histories.length === 0) return;
    if (!this.handle) {
      this.handle = await open(this.path, 'a');
      const dir = await open(dirname(this.path), 'r');
      try {
        await dir.sync();
      } finally {
        await dir.close();
      }
    }
    const text = histories.map((h) => JSON.stringify(h)).join('\n') + '\n';
    await this.handle.appendFile(text, 'utf8');
    await this.handle.sync();
    this.lines += histories.length;
  }

  async close(): Promise<void> {
    await this.handle?.close();
    this.handle = undefined;
  }
}

export interface PruneTotals {
  jobs: Record<PrunableState, number>;
  attempts: number;
  events: number;
  batches: number;
}

function addTo(t: PruneTotals, r: JobPruneResult): void {
  for (const s of PRUNABLE_STATES) t.jobs[s] += r.jobs[s];
  t.attempts += r.attempts;
  t.events += r.events;
}

export function emptyTotals(): PruneTotals {
  return { jobs: { SUCCEEDED: 0, FAILED: 0, CANCELLED: 0 }, attempts: 0, events: 0, batches: 0 };
}

/**
 * Deletes every matching history, a batch (one transaction) at a time with a pause between, or
 * counts them (`dryRun`). Each batch is archived first when `archive` is given.
 */
export async function pruneAll(p: {
  store: Store;
  states: PrunableState[];
  olderThanMs: number;
  batchSize: number;
  pauseMs: number;
  dryRun?: boolean;
  archive?: JsonlArchive;
  onBatch?: (totals: PruneTotals) => void;
  signal?: AbortSignal;
  /** Whose timer the pauses take. Default the real clock. */
  clock?: Clock;
}): Promise<PruneTotals> {
  const totals = emptyTotals();
  const base = { states: p.states, olderThanMs: p.olderThanMs, limit: p.batchSize };
  if (p.dryRun) {
    addTo(totals, await p.store.jobPruneMany({ ...base, dryRun: true }));
    return totals;
  }
  const archive = p.archive;
  for (;;) {
    if (p.signal?.aborted) break;
    const r = await p.store.jobPruneMany({
      ...base,
      ...(archive ? { archive: (h: JobDetail[]) => archive.append(h) } : {}),
    });
    addTo(totals, r);
    totals.batches++;
    p.onBatch?.(totals);
    if (!r.more) break;
    if (p.pauseMs > 0) await (p.clock ?? systemClock).sleep(p.pauseMs);
  }
  return totals;
}

/** The worker's retention loop: one pass per state and age; the worker schedules it. */
export class Retention {
  /** What this loop deleted since it was made (for tests and logs). */
  readonly totals = emptyTotals();

  constructor(
    private readonly host: { readonly store: Store; readonly log: Logger; readonly clock: Clock },
    readonly settings: RetentionSettings,
  ) {}

  /** Deletes everything due now, batch by batch with pauses; `signal` ends it between batches. */
  async runOnce(signal?: AbortSignal): Promise<false> {
    for (const state of PRUNABLE_STATES) {
      const age = this.settings.ages[state];
      if (age === 'off') continue;
      const t = await pruneAll({
        store: this.host.store,
        states: [state],
        olderThanMs: age,
        batchSize: this.settings.batchSize,
        pauseMs: this.settings.pauseMs,
        clock: this.host.clock,
        ...(signal ? { signal } : {}),
      });
      addTo(this.totals, { ...t, more: false });
      this.totals.batches += t.batches;
      if (t.jobs[state] > 0)
        this.host.log.info(
          { state, olderThanMs: age, jobs: t.jobs[state], attempts: t.attempts, events: t.events },
          'retention: deleted terminal job histories',
        );
    }
    return false;
  }
}

/** `off`, or `STATE=age` pairs such as `SUCCEEDED=3d,FAILED=off` (the CLI's `--retention`). */
export function parseRetentionSpec(text: string): RetentionOptions {
  if (text.trim().toLowerCase() === 'off') return 'off';
  const ages: Partial<Record<PrunableState, string>> = {};
  for (const pair of text.split(',').map((s) => s.trim())) {
    const [state, age, extra] = pair.split('=').map((s) => s.trim());
    const s = (state ?? '').toUpperCase() as PrunableState;
    if (!PRUNABLE_STATES.includes(s) || !age || extra !== undefined)
      throw new InvalidInput(
        `retention must be off, or STATE=age pairs such as SUCCEEDED=7d,FAILED=off (states: ${PRUNABLE_STATES.join(', ')}); got ${JSON.stringify(pair)}`,
      );
    ages[s] = age;
  }
  retentionSettings({ ages });
  return { ages };
}
