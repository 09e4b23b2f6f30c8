/**
 * The settings of a worker child process, carried in its environment so that a test, the demo
 * or a shell can start one: `RECKON_STORE=sqlite:/tmp/r.db DOWNSTREAM_URL=… node worker-child.js`.
 * With `WORKER_OPERATIONS_MODULE=/abs/path/ops.js` the child serves the operations that module
 * exports (the user's own) instead of the test kit's downstream operations.
 */
import { isFlavour, FLAVOURS, type Flavour } from './operations.js';

export interface WorkerChildConfig {
  storeUrl: string;
  /** The test kit's downstream; required unless `operationsModule` is given. */
  downstreamUrl?: string;
  /** Absolute path of a module exporting the operations to serve (the user's own). */
  operationsModule?: string;
  flavours: Flavour[];
  concurrency: number;
  leaseMs: number;
  clockSkewToleranceMs: number;
  reclaimIntervalMs: number;
  reconcileIntervalMs: number;
  pollIntervalMs: number;
  /** Operation timeout and reconciliation grace. */
  timeoutMs: number;
  graceMs: number;
  maxAttempts: number;
  /** Queues to claim from; a queue nobody uses makes a recovery-only process. */
  queues: string[];
  ownerId?: string;
  /** Fault points, `RECKON_FAULTS` syntax. */
  faults?: string;
  faultsSeed?: number;
  /**
   * After `ready`, the child enqueues these jobs itself, in order, each once its worker is idle
   * again (input `{ n }`), as an agent's follow-up work would come: its own idle worker may be
   * handed them (PostgreSQL). It prints `enqueued <id> <state> <created|existing> <key>` for each.
   * A restarted child walks its list again: a job its predecessor enqueued is found by its key
   * (invariant 9) and the next follows at once.
   */
  enqueue?: ChildEnqueue[];
  /** pino level for logs on stderr; default silent. */
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
}

/** A job a worker child enqueues itself. Keys: letters, digits and `. _ / -`. */
export interface ChildEnqueue {
  flavour: Flavour;
  n: number;
  key: string;
}

const ENQUEUE_ITEM = /^([a-z-]+):(\d+):([\w./-]+)$/;

export const CHILD_DEFAULTS: Omit<
  WorkerChildConfig,
  'storeUrl' | 'downstreamUrl' | 'operationsModule'
> = {
  flavours: [...FLAVOURS],
  concurrency: 4,
  leaseMs: 600,
  clockSkewToleranceMs: 100,
  reclaimIntervalMs: 80,
  reconcileIntervalMs: 80,
  pollIntervalMs: 25,
  timeoutMs: 1_000,
  graceMs: 200,
  maxAttempts: 6,
  queues: ['default'],
};

export type ChildConfigInput = Partial<WorkerChildConfig> & Pick<WorkerChildConfig, 'storeUrl'>;

export function childEnv(config: ChildConfigInput): Record<string, string> {
  const c = { ...CHILD_DEFAULTS, ...config };
  if (!c.downstreamUrl && !c.operationsModule)
    throw new Error('a worker child needs downstreamUrl or operationsModule');
  return {
    RECKON_STORE: c.storeUrl,
    DOWNSTREAM_URL: c.downstreamUrl ?? '',
    WORKER_OPERATIONS_MODULE: c.operationsModule ?? '',
    WORKER_FLAVOURS: c.flavours.join(','),
    WORKER_CONCURRENCY: String(c.concurrency),
    WORKER_LEASE_MS: String(c.leaseMs),
    WORKER_SKEW_MS: String(c.clockSkewToleranceMs),
    WORKER_RECLAIM_MS: String(c.reclaimIntervalMs),
    WORKER_RECONCILE_MS: String(c.reconcileIntervalMs),
    WORKER_POLL_MS: String(c.pollIntervalMs),
    OP_TIMEOUT_MS: String(c.timeoutMs),
    OP_GRACE_MS: String(c.graceMs),
    OP_MAX_ATTEMPTS: String(c.maxAttempts),
    WORKER_QUEUES: c.queues.join(','),
    RECKON_FAULTS: c.faults ?? '',
    RECKON_FAULTS_SEED: String(c.faultsSeed ?? 1),
    ...(c.ownerId ? { WORKER_ID: c.ownerId } : {}),
    ...(c.enqueue
      ? { WORKER_ENQUEUE: c.enqueue.map((e) => `${e.flavour}:${e.n}:${e.key}`).join(',') }
      : {}),
    ...(c.logLevel ? { WORKER_LOG: c.logLevel } : {}),
  };
}

export function childConfigFromEnv(env: NodeJS.ProcessEnv): WorkerChildConfig {
  const need = (name: string): string => {
    const v = env[name];
    if (!v) throw new Error(`worker-child: ${name} is required`);
    return v;
  };
  const int = (name: string, fallback: number): number => {
    const v = env[name];
    if (v === undefined || v === '') return fallback;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0)
      throw new Error(`worker-child: ${name} must be an integer >= 0, got ${v}`);
    return n;
  };
  const list = (name: string, fallback: string[]): string[] =>
    env[name]
      ? env[name]
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean)
      : fallback;
  const flavours = list('WORKER_FLAVOURS', [...FLAVOURS]);
  for (const f of flavours)
    if (!isFlavour(f))
      throw new Error(`worker-child: unknown flavour ${f}; known: ${FLAVOURS.join(', ')}`);
  const level = env.WORKER_LOG;
  const d = CHILD_DEFAULTS;
  const operationsModule = env.WORKER_OPERATIONS_MODULE || undefined;
  let enqueue: WorkerChildConfig['enqueue'];
  if (env.WORKER_ENQUEUE) {
    enqueue = env.WORKER_ENQUEUE.split(',').map((item) => {
      const m = ENQUEUE_ITEM.exec(item);
      if (!m || !isFlavour(m[1]!))
        throw new Error(
          `worker-child: WORKER_ENQUEUE must list flavour:n:key items, got ${JSON.stringify(item)}`,
        );
      return { flavour: m[1], n: Number(m[2]), key: m[3]! };
    });
  }
  return {
    storeUrl: need('RECKON_STORE'),
    ...(operationsModule ? { operationsModule } : { downstreamUrl: need('DOWNSTREAM_URL') }),
    flavours: flavours as Flavour[],
    concurrency: int('WORKER_CONCURRENCY', d.concurrency),
    leaseMs: int('WORKER_LEASE_MS', d.leaseMs),
    clockSkewToleranceMs: int('WORKER_SKEW_MS', d.clockSkewToleranceMs),
    reclaimIntervalMs: int('WORKER_RECLAIM_MS', d.reclaimIntervalMs),
    reconcileIntervalMs: int('WORKER_RECONCILE_MS', d.reconcileIntervalMs),
    pollIntervalMs: int('WORKER_POLL_MS', d.pollIntervalMs),
    timeoutMs: int('OP_TIMEOUT_MS', d.timeoutMs),
    graceMs: int('OP_GRACE_MS', d.graceMs),
    maxAttempts: int('OP_MAX_ATTEMPTS', d.maxAttempts),
    queues: list('WORKER_QUEUES', d.queues),
    ...(env.WORKER_ID ? { ownerId: env.WORKER_ID } : {}),
    ...(enqueue ? { enqueue } : {}),
    ...(env.RECKON_FAULTS ? { faults: env.RECKON_FAULTS } : {}),
    ...(level === 'debug' || level === 'info' || level === 'warn' || level === 'error'
      ? { logLevel: level }
      : {}),
  };
}
