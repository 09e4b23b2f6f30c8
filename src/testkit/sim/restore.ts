/**
 * A restore from a backup in the middle of a run (the `restore` fault): a backup of the store at
 * a random moment, later the host lost (every process stops), the backup restored by the real
 * `reckon restore` code (`restoreSqlite`, default marking) and new processes on the copy.
 *
 * What the copy cannot hold is a limit the operations guide states, not a promise broken: jobs
 * enqueued after the backup are gone (their callers were told "accepted"; an agent enqueuing the
 * same key again makes a new job, sent again unless the downstream deduplicates), and a q.call
 * answer given before the restore was true of the journal the restore replaced. The verdict
 * leaves those keys and answers out; every job the backup holds is judged as any other.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { restoreSqlite } from '../../store/sqlite/backup.js';
import { SqliteStore } from '../../store/sqlite/store.js';
import type { JobDetail } from '../../store/store.js';
import type { EffectLedger } from '../verdict.js';
import type { SimRecords } from './sim-verdict.js';

export class SimRestore {
  private image: Buffer | null = null;
  /** Request keys whose jobs the restore lost (enqueued after the backup). */
  private readonly forgotten = new Set<string>();
  /** Stores replaced by a restore, closed at the end of the run. */
  readonly retired: SqliteStore[] = [];
  restoredAt: number | null = null;

  /** A key whose job the restore lost (enqueued after the backup). */
  forgot(key: string): boolean {
    return this.forgotten.has(key);
  }

  get taken(): boolean {
    return this.image !== null;
  }

  backup(store: SqliteStore): void {
    this.image = store.serialize();
  }

  /**
   * The store the backup becomes after `reckon restore` at `now` (true time), opened on the
   * world's clock. Returns it and how many jobs it holds.
   */
  async restore(old: SqliteStore, now: number, clock: () => number): Promise<SqliteStore> {
    const image = restoredImage(this.image!, now);
    const store = new SqliteStore({ path: ':memory:', image, clock });
    await store.init();
    const kept = new Set((await store.jobList({ limit: 10_000 })).map((j) => j.id));
    for (const j of await old.jobList({ limit: 10_000 }))
      if (!kept.has(j.id)) this.forgotten.add(j.requestKey);
    this.retired.push(old);
    this.restoredAt = now;
    return store;
  }

  /** What the verdict judges: the run without what the restore forgot (see the header). */
  judged(
    details: JobDetail[],
    ledger: EffectLedger & { effectKeys(): Iterable<string> },
    records: SimRecords,
  ): { details: JobDetail[]; ledger: EffectLedger; records: SimRecords } {
    if (this.restoredAt === null) return { details, ledger, records };
    const kept = (key: string) => !this.forgotten.has(key);
    const ids = new Set(details.filter((d) => !kept(d.job.requestKey)).map((d) => d.job.id));
    return {
      details: details.filter((d) => kept(d.job.requestKey)),
      ledger: {
        effectsOf: (key) => ledger.effectsOf(key),
        effectKeys: () => [...ledger.effectKeys()].filter(kept),
      },
      records: {
        ...records,
        acks: records.acks.filter((a) => kept(a.key)),
        answers: records.answers.filter((a) => !ids.has(a.jobId) && a.at >= this.restoredAt!),
      },
    };
  }
}

/** `reckon restore` of a backup image into a temporary folder; the restored store's image. */
function restoredImage(backupImage: Buffer, now: number): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'reckon-sim-restore-'));
  try {
    const backup = join(dir, 'backup.db');
    const target = join(dir, 'restored.db');
    writeFileSync(backup, backupImage);
    restoreSqlite({ backup, target, reconcile: 'unfinished', now: () => now });
    const image = readFileSync(target);
    // The restore leaves the file in WAL mode; an image opened in memory must not be.
    image[18] = 1;
    image[19] = 1;
    return image;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
