/**
 * The copy of a SQLite store, run on a worker thread so that the calling thread can show progress
 * (the copy's size as it grows) while it runs: `VACUUM INTO` is one synchronous call. Plain
 * CommonJS source, run with `eval: true`, so that it needs no build step (tests run TypeScript).
 *
 * workerData: { driver (better-sqlite3's resolved path), source, target, method, busyTimeoutMs }.
 * Posts { progress: [done, total], restarts } (online) and finally { done: true } or { error }.
 */
export const BACKUP_THREAD_SOURCE = String.raw`
const { parentPort, workerData: job } = require('node:worker_threads');
const Database = require(job.driver);
async function run() {
  const db = new Database(job.source, { timeout: job.busyTimeoutMs, fileMustExist: true });
  try {
    if (job.method === 'vacuum-into') {
      // One read transaction: a consistent snapshot, whatever other processes write meanwhile.
      db.prepare('VACUUM INTO ?').run(job.target);
    } else {
      // SQLite's online backup, 100 pages a step; a write by another connection restarts it.
      let lastRemaining = Infinity;
      let restarts = 0;
      await db.backup(job.target, {
        progress({ totalPages, remainingPages }) {
          if (remainingPages > lastRemaining) restarts++;
          lastRemaining = remainingPages;
          parentPort.postMessage({ progress: [totalPages - remainingPages, totalPages], restarts });
          return 100;
        },
      });
    }
    parentPort.postMessage({ done: true });
  } finally {
    db.close();
  }
}
run().catch((err) => {
  parentPort.postMessage({ error: { message: err && err.message ? err.message : String(err) } });
});
`;
