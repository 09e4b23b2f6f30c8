/**
 * Runs the `reckon` CLI from source (tsx) as a child process, without RECKON_STORE from the
 * environment, and collects its exit code and output.
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const CLI_MAIN = join(ROOT, 'src', 'cli', 'main.ts');

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function reckon(
  args: string[],
  o: { env?: NodeJS.ProcessEnv; stdin?: string } = {},
): Promise<CliRun> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI_MAIN, ...args], {
      env: { ...process.env, RECKON_STORE: undefined, ...o.env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => done({ code, stdout, stderr }));
    child.stdin.end(o.stdin ?? '');
  });
}
