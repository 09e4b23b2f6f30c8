/**
 * What the end-to-end examples share: real worker processes (`reckon work`, the built CLI) that
 * a fault point can SIGKILL, and a verdict printed for people with an exit code for CI.
 */
/* global console */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import process from 'node:process';
import { clearTimeout, setTimeout } from 'node:timers';
import { URL, fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

/**
 * Starts `reckon work` for an operations module. `faults` arms a fault point in that process
 * (`RECKON_FAULTS`, e.g. `after-response-before-commit=kill`): the worker dies there, as a
 * process killed by the OOM killer or a power cut would.
 * @param {{ store: string; operations: string; env?: Record<string, string>; faults?: string;
 *   args?: string[] }} p
 */
export function startWorker({ store, operations, env = {}, faults, args = [] }) {
  const proc = spawn(
    process.execPath,
    [CLI, 'work', '--operations', operations, '--store', store, '--lease-ms', '1000'].concat([
      '--log-level',
      'warn',
      ...args,
    ]),
    {
      env: {
        ...process.env,
        ...env,
        ...(faults ? { RECKON_FAULTS: faults } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  proc.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
  proc.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
  const exited = once(proc, 'exit').then(([code, signal]) => ({ code, signal }));
  return {
    proc,
    exited,
    stdout: () => stdout,
    stderr: () => stderr,
    /** Stops it gracefully (SIGTERM) unless it is already gone. */
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
}

/**
 * Waits for a worker armed with a `kill` fault to die of it; throws if it did not.
 * @param {ReturnType<typeof startWorker>} worker
 * @param {number} [timeoutMs]
 */
export async function diedOfSigkill(worker, timeoutMs = 30_000) {
  let timer;
  const late = new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs, 'timeout')));
  const end = await Promise.race([worker.exited, late]);
  clearTimeout(timer);
  if (end === 'timeout') {
    worker.proc.kill('SIGKILL');
    throw new Error(`the worker did not reach its fault point in ${timeoutMs} ms`);
  }
  if (end.signal !== 'SIGKILL')
    throw new Error(
      `the worker exited (${JSON.stringify(end)}), not SIGKILLed:\n${worker.stderr()}`,
    );
}

/**
 * Prints each check and sets the exit code: 0 when every one holds, 1 otherwise.
 * @param {string} title
 * @param {Array<[string, boolean]>} checks
 */
export function verdict(title, checks) {
  console.log(`\n${title}`);
  for (const [what, ok] of checks) console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${what}`);
  const ok = checks.every(([, holds]) => holds);
  console.log(ok ? 'verdict: ok' : 'verdict: WRONG');
  if (!ok) process.exitCode = 1;
  return ok;
}
