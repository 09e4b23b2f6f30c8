/**
 * WAL checkpoints off the event loop.
 *
 * SQLite's automatic checkpoint runs inside the commit that pushes the WAL past its threshold
 * (1,000 pages by default): that one commit copies every page back into the database file and
 * fsyncs it, a few milliseconds during which better-sqlite3, being synchronous, holds the event
 * loop. It was the slowest claims' time (the p99 of a one-job claim, ~5 ms against ~0.2 ms) and a
 * share of every busy writer's.
 *
 * Here a worker thread with its own connection runs `PRAGMA wal_checkpoint(PASSIVE)` every
 * `intervalMs`: PASSIVE never waits for a lock and never blocks a writer, and a checkpoint is
 * crash-safe by SQLite's design (a kill mid-way leaves the WAL whole; the next checkpoint redoes
 * it). The store's own connection keeps an automatic checkpoint at a much higher threshold
 * (`SAFETY_AUTOCHECKPOINT_PAGES`) as a safety net, back to SQLite's default if the thread dies.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/** How often the thread checkpoints; also the most WAL a busy writer adds between two. */
export const CHECKPOINT_INTERVAL_MS = 250;
/** The store connection's own automatic checkpoint while the thread runs (pages of 4 KiB). */
export const SAFETY_AUTOCHECKPOINT_PAGES = 10_000;
/** SQLite's default, restored if the thread cannot run. */
export const DEFAULT_AUTOCHECKPOINT_PAGES = 1_000;

// The thread's code, evaluated as a CommonJS script: it loads better-sqlite3 from where this
// module resolves it (workerData.driver), so it works from the sources and from the build alike.
const THREAD_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.path, { timeout: 0 });
db.pragma('busy_timeout = 0');
let timer;
function checkpoint() {
  try {
    const [r] = db.pragma('wal_checkpoint(PASSIVE)');
    parentPort.postMessage({ kind: 'checkpointed', busy: r.busy, log: r.log, done: r.checkpointed });
  } catch (err) {
    // Busy or an I/O error: the next tick tries again, and the store's own automatic
    // checkpoint stays as the safety net.
    parentPort.postMessage({ kind: 'error', message: String(err && err.message || err) });
  }
  timer = setTimeout(checkpoint, workerData.intervalMs);
}
timer = setTimeout(checkpoint, workerData.intervalMs);
parentPort.on('message', (m) => {
  if (m !== 'close') return;
  clearTimeout(timer);
  db.close();
  parentPort.close();
});
`;

export interface CheckpointStats {
  /** Checkpoints the thread ran. */
  runs: number;
  /** Those that failed (busy or an error); the next one tries again. */
  failures: number;
  /** The thread is running (false once closed, or after it died). */
  alive: boolean;
  /** The last checkpoint: frames in the WAL, and how many of them are in the database file. */
  walFrames: number;
  backfilled: number;
}

export class Checkpointer {
  readonly stats: CheckpointStats = {
    runs: 0,
    failures: 0,
    alive: true,
    walFrames: 0,
    backfilled: 0,
  };
  private readonly worker: Worker;
  private readonly exited: Promise<void>;

  /**
   * Starts the thread on the database file at `path`. `onDeath` is called once if the thread
   * stops on its own (the store then restores SQLite's own automatic checkpoint).
   */
  constructor(path: string, onDeath: (err: unknown) => void, intervalMs = CHECKPOINT_INTERVAL_MS) {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    this.worker = new Worker(THREAD_SOURCE, {
      eval: true,
      workerData: { path, driver, intervalMs },
      // Small: the thread holds one connection and runs one statement.
      resourceLimits: { maxOldGenerationSizeMb: 16 },
    });
    // A checkpointer never keeps the process alive.
    this.worker.unref();
    let closing = false;
    this.worker.on('message', (m: { kind: string; log?: number; done?: number }) => {
      if (m.kind === 'checkpointed') {
        this.stats.runs++;
        this.stats.walFrames = m.log ?? 0;
        this.stats.backfilled = m.done ?? 0;
      } else this.stats.failures++;
    });
    this.worker.on('error', (err) => {
      this.stats.alive = false;
      if (!closing) onDeath(err);
    });
    this.exited = new Promise<void>((resolve) => {
      this.worker.once('exit', (code) => {
        const wasAlive = this.stats.alive;
        this.stats.alive = false;
        if (!closing && wasAlive) onDeath(new Error(`checkpoint thread exited (${code})`));
        resolve();
      });
    });
    this.close = async () => {
      if (closing) return this.exited;
      closing = true;
      this.worker.postMessage('close');
      // A thread stuck in a checkpoint is stopped: the checkpoint is crash-safe.
      const timer = setTimeout(() => void this.worker.terminate(), 2_000);
      await this.exited;
      clearTimeout(timer);
    };
  }

  /** Stops the thread (after the checkpoint it is running, if any) and closes its connection. */
  close: () => Promise<void>;
}
