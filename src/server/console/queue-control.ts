/**
 * Flow control as the console uses it: pause and resume a queue. The library's `q.queues`
 * (DESIGN §5) provides it where it exists; until then this finds nothing and the console shows
 * no pause/resume (HOOK: engineer E's `q.queues`; adapt `queueControlOf` to its final shape).
 */
import type { Queue } from '../../runtime/queue.js';

export interface QueueControl {
  pause(queue: string, by: { actor: string }): Promise<unknown>;
  resume(queue: string, by: { actor: string }): Promise<unknown>;
  /** The names of the paused queues. */
  paused(): Promise<Set<string>>;
}

interface QueuesApi {
  pause(name: string, options?: unknown): Promise<unknown>;
  resume(name: string, options?: unknown): Promise<unknown>;
  list?(): Promise<{ name?: string; queue?: string; paused?: boolean }[]>;
}

export function queueControlOf(queue: Queue): QueueControl | null {
  const api = (queue as unknown as { queues?: QueuesApi }).queues;
  if (!api || typeof api.pause !== 'function' || typeof api.resume !== 'function') return null;
  return {
    pause: (name, by) => api.pause(name, { actor: by.actor }),
    resume: (name, by) => api.resume(name, { actor: by.actor }),
    paused: async () => {
      const rows = api.list ? await api.list() : [];
      return new Set(rows.filter((r) => r.paused).map((r) => r.name ?? r.queue ?? ''));
    },
  };
}
