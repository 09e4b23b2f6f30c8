/**
 * What the agent tests share: the example's modules (plain JS) with types, and real child
 * processes: a worker (`reckon work`, the built CLI) and an agent (one of the example agents).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { Queue } from '../../src/index.js';

const EXAMPLES = new URL('../../examples/agent/', import.meta.url);
export const OPERATIONS_MODULE = 'examples/agent/email.js';
export const CLI = 'dist/cli/main.js';

export interface Received {
  key: string | null;
  messageId: string | null;
  to: string[];
  subject: string;
}

export interface Mailbox {
  smtpPort: number;
  url: string;
  env: Record<string, string>;
  messages(): Received[];
  withKey(key: string): Received[];
  close(): Promise<void>;
}

export interface ToolAnswer {
  status: string;
  jobId: string;
  requestKey: string;
  result?: { messageId: string };
  reason?: string;
}

interface AgentOut {
  text: string | null;
  toolAnswer: ToolAnswer | string | null;
  waitingForApproval?: unknown;
}

export interface EmailModule {
  sendEmail: import('../../src/index.js').Operation<unknown, { messageId: string }>;
  sendEmailWithApproval: import('../../src/index.js').Operation<unknown, { messageId: string }>;
  startMailbox(options?: { onMessage?: (m: Received) => void }): Promise<Mailbox>;
}

export interface AgentModule {
  runAgent(p: {
    q: Queue;
    runId: string;
    approval?: boolean;
    waitMs?: number;
    approvalWaitMs?: number;
  }): Promise<AgentOut>;
}

async function load<T>(file: string): Promise<T> {
  return (await import(new URL(file, EXAMPLES).href)) as T;
}

export interface McpClientModule {
  connectReckon(
    this: void,
    p: {
      store: string;
      args?: string[];
      env?: Record<string, string>;
    },
  ): Promise<import('@modelcontextprotocol/sdk/client/index.js').Client>;
  sendOneEmail(
    this: void,
    client: import('@modelcontextprotocol/sdk/client/index.js').Client,
    meta?: Record<string, unknown>,
  ): Promise<{ isError: boolean; answer: ToolAnswer; meta: Record<string, unknown> }>;
}

export const email = await load<EmailModule>('email.js');
export const mcpClient = await load<McpClientModule>('mcp-client.js');
export const aiSdkAgent = await load<AgentModule>('ai-sdk.js');
export const openaiAgent = await load<AgentModule>('openai-agents.js');

/** Short timeouts, so an UNKNOWN attempt is looked up within seconds. */
export const FAST_RECOVERY_ENV = { EMAIL_TIMEOUT_MS: '1500', EMAIL_GRACE_MS: '100' };

export interface Child {
  proc: ChildProcess;
  stdout: string[];
  stderr: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export function startChild(args: string[], env: Record<string, string>): Child {
  const proc = spawn(process.execPath, args, {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const stdout: string[] = [];
  const stderr: string[] = [];
  proc.stdout.on('data', (d: Buffer) => stdout.push(...d.toString().split('\n').filter(Boolean)));
  proc.stderr.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = once(proc, 'exit').then(([code, signal]) => ({
    code: code as number | null,
    signal: signal as NodeJS.Signals | null,
  }));
  return { proc, stdout, stderr, exited };
}

export function startWorker(store: string, env: Record<string, string>): Child {
  return startChild(
    [
      CLI,
      'work',
      '--operations',
      OPERATIONS_MODULE,
      '--store',
      store,
      '--lease-ms',
      '1000',
      '--log-level',
      'warn',
    ],
    env,
  );
}

/** The one JSON line an example agent prints when its run ends. */
export async function agentResult(child: Child): Promise<AgentOut> {
  const { code, signal } = await child.exited;
  if (code !== 0) throw new Error(`agent exited ${code ?? signal}: ${child.stderr.join('')}`);
  return JSON.parse(child.stdout.at(-1)!) as AgentOut;
}

/** Resolves when `check` is true, looking every 50 ms (a wait for the thing itself, no sleep). */
export async function until(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function stop(child: Child | undefined): Promise<void> {
  if (!child || child.proc.exitCode !== null || child.proc.signalCode !== null) return;
  child.proc.kill('SIGKILL');
  await child.exited;
}
