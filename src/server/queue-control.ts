/**
 * Pause and resume a queue or an operation over HTTP (the console's buttons and the JSON API),
 * through the library's `q.queues` (flow control, DESIGN §5). The pause records the principal the
 * server authenticated (`operator:<name>`, as a decision's actor), never a name from the request.
 */
import type { PauseOptions, QueueInfo } from '../runtime/flow.js';
import type { Queue } from '../runtime/queue.js';
import type { PauseRecord } from '../store/store.js';
import type { Principal } from './principal.js';

export interface QueueControl {
  /** True if the queue (or operation) was not paused already. */
  pause(name: string, by: Principal, o?: FlowOptions): Promise<boolean>;
  /** True if it was paused. */
  resume(name: string, by: Principal, o?: FlowOptions): Promise<boolean>;
  /** The paused queues by name. */
  paused(): Promise<Map<string, PauseRecord>>;
  /** Every queue with its counts and pause, and every pause in force (operations included). */
  list(): Promise<{ queues: QueueInfo[]; pauses: PauseRecord[] }>;
}

export interface FlowOptions {
  /** Pause an operation (its jobs in every queue) rather than a queue. */
  operation?: boolean;
  reason?: string;
}

/** The actor a pause records for an HTTP principal. */
export function pauseActor(p: Principal): string {
  return `operator:${p.name}`;
}

function optionsOf(p: Principal, o: FlowOptions = {}): PauseOptions {
  return {
    actor: pauseActor(p),
    ...(o.operation ? { operation: true } : {}),
    ...(o.reason !== undefined && o.reason !== '' ? { reason: o.reason } : {}),
  };
}

export function queueControlOf(queue: Queue): QueueControl {
  const api = queue.queues;
  return {
    pause: (name, by, o) => api.pause(name, optionsOf(by, o)),
    resume: (name, by, o) => api.resume(name, optionsOf(by, o)),
    paused: async () => {
      const rows = await api.paused();
      return new Map(rows.filter((r) => r.kind === 'queue').map((r) => [r.name, r]));
    },
    list: async () => {
      const [queues, pauses] = await Promise.all([api.list(), api.paused()]);
      return { queues, pauses };
    },
  };
}
