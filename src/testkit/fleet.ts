/**
 * Worker child processes for crash tests and the demo: start them, wait until they are ready,
 * kill them with SIGKILL (or stop them with SIGTERM) and see how they ended.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { childEnv, type ChildConfigInput } from './child-config.js';
import type { FaultAction, FaultPoint } from '../runtime/faults.js';

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface WorkerChildOptions {
  echoStderr?: boolean;
  /** More environment for the child (e.g. settings of the user's operations module). */
  env?: Record<string, string>;
  /** Called when the child reports that a fault point fired (`fault <point> <action>` on stdout). */
  onFault?: (point: FaultPoint, action: FaultAction) => void;
  /** Called for each job the child enqueued itself (`enqueue` in its config). */
  onEnqueued?: (e: ChildEnqueued) => void;
}

/** A job a child enqueued itself: `created` false when its key was already there. */
export interface ChildEnqueued {
  id: string;
  state: string;
  created: boolean;
  key: string;
}

/** How to run worker-child: from dist as plain JS, or from src through tsx (tests). */
export function workerChildCommand(): { command: string; args: string[] } {
  const fromSource = import.meta.url.endsWith('.ts');
  const script = fileURLToPath(
    new URL(fromSource ? './worker-child.ts' : './worker-child.js', import.meta.url),
  );
  if (!existsSync(script))
    throw new Error(`worker child script not found at ${script}; run npm run build`);
  return { command: process.execPath, args: fromSource ? ['--import', 'tsx', script] : [script] };
}

const STDERR_KEEP_BYTES = 16 * 1024;

export class WorkerChild {
  readonly process: ChildProcess;
  /** Resolves true once the child printed `ready`, false if it exited first. */
  readonly ready: Promise<boolean>;
  readonly exited: Promise<ChildExit>;
  private exit: ChildExit | undefined;
  private stderrTail = '';
  /** What the child's own enqueues answered (`enqueue` in its config), in order. */
  readonly enqueued: ChildEnqueued[] = [];

  constructor(config: ChildConfigInput, options: WorkerChildOptions = {}) {
    const { command, args } = workerChildCommand();
    this.process = spawn(command, args, {
      env: { ...process.env, ...(options.env ?? {}), ...childEnv(config) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.exited = new Promise((resolve) => {
      this.process.once('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      });
    });
    this.ready = new Promise((resolve) => {
      let out = '';
      this.process.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const lines = out.split('\n');
        out = lines.pop() ?? '';
        for (const line of lines) {
          if (line === 'ready') resolve(true);
          const enqueued = /^enqueued (\S+) ([A-Z_]+) (created|existing) (\S+)$/.exec(line);
          if (enqueued) {
            const e = {
              id: enqueued[1]!,
              state: enqueued[2]!,
              created: enqueued[3] === 'created',
              key: enqueued[4]!,
            };
            this.enqueued.push(e);
            options.onEnqueued?.(e);
          }
          const fault = /^fault ([a-z-]+) (throw|kill|pause)$/.exec(line);
          if (fault) options.onFault?.(fault[1] as FaultPoint, fault[2] as FaultAction);
        }
      });
      void this.exited.then(() => resolve(false));
    });
    this.process.stderr!.on('data', (chunk: Buffer) => {
      if (options.echoStderr) process.stderr.write(chunk);
      this.stderrTail = (this.stderrTail + chunk.toString()).slice(-STDERR_KEEP_BYTES);
    });
  }

  get pid(): number | undefined {
    return this.process.pid;
  }

  get alive(): boolean {
    return this.exit === undefined;
  }

  get exitInfo(): ChildExit | undefined {
    return this.exit;
  }

  /** What the child wrote on stderr lately, for failure messages. */
  get stderr(): string {
    return this.stderrTail;
  }

  /** kill -9, and wait until it is gone. */
  async kill(): Promise<ChildExit> {
    if (this.alive) this.process.kill('SIGKILL');
    return this.exited;
  }

  /** Graceful stop (SIGTERM): the worker finishes or releases what it holds. */
  async stop(): Promise<ChildExit> {
    if (this.alive) this.process.kill('SIGTERM');
    return this.exited;
  }
}

export function startWorkerChild(
  config: ChildConfigInput,
  options: WorkerChildOptions = {},
): WorkerChild {
  return new WorkerChild(config, options);
}
