/**
 * One simulated process's connection to the shared store. Every call is two events of that
 * process: the statement runs (against the real SQLite store, reading this process's clock),
 * then its answer arrives. A crashed process's calls never run and never answer; a frozen
 * one's wait. The seed may fail a call before it runs (busy, full: nothing written) or lose
 * its answer after it committed, as a connection lost at the commit would.
 *
 * Subscriptions are left out: workers then poll and wake on their own queue's enqueues, and
 * `q.call` waiters poll, all on the virtual clock.
 */
import { StoreFull, StoreUnavailable } from '../../core/errors.js';
import type { JobDetail, JobPruneParams, Store } from '../../store/store.js';
import type { SimProcess, World } from './world.js';

export interface StoreFaultRates {
  /** Share of calls refused before they run (nothing written). */
  failBefore: number;
  /** Share of calls whose answer is lost after they committed. */
  failAfter: number;
  /** Latency of each leg (to the store, back), ms. */
  latencyMsMax: number;
}

/** Members a simulated process does not get: the runtime falls back to polling. */
const WITHHELD = new Set<PropertyKey>(['workSubscribe', 'jobChangeSubscribe', 'onCommit']);

/** Histories deleted by retention, kept so that the verdict still judges them. */
export type PrunedSink = (histories: JobDetail[]) => void;

export function processStore(p: {
  world: World;
  /** The store (a restore replaces it). */
  real: () => Store;
  proc: SimProcess;
  faults: () => StoreFaultRates;
  onPrune: PrunedSink;
  /** Told of each call as the process makes it: true stalls the process before this call. */
  beforeCall?: (name: string, args: unknown[]) => boolean;
  /** Told of each call that ran and committed (its answer may still be lost). */
  afterCall?: (name: string, args: unknown[], value: unknown) => void;
}): Store {
  const { world, proc } = p;
  const call = (name: string, args: unknown[]): Promise<unknown> =>
    new Promise((resolve, reject) => {
      const stalled = p.beforeCall?.(name, args) === true;
      const f = p.faults();
      const lat = () => world.int(0, f.latencyMsMax);
      world.schedule(lat(), proc, `${stalled ? 'stalled' : 'store'}.${name}`, async () => {
        // Errors are what the real store threw: passed on as they are.
        let out: { ok: true; value: unknown } | { ok: false; err: Error };
        if (world.chance(f.failBefore)) {
          out = { ok: false, err: injected(name, 'before') };
        } else {
          world.caller = proc;
          try {
            const real = p.real();
            const fn = (real as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[
              name
            ]!;
            out = { ok: true, value: await fn.apply(real, withArchive(name, args, p.onPrune)) };
            p.afterCall?.(name, args, out.value);
          } catch (err) {
            out = { ok: false, err: err as Error };
          } finally {
            world.caller = null;
          }
          if (out.ok && world.chance(f.failAfter))
            out = { ok: false, err: injected(name, 'after') };
        }
        if (world.trace)
          world.log(
            proc,
            `${name}${keysOf(args, out)} ${out.ok ? 'ok' : `failed: ${errName(out.err)}`}`,
          );
        world.schedule(lat(), proc, `reply.${name}`, () =>
          out.ok ? resolve(out.value) : reject(out.err),
        );
      });
    });
  return new Proxy(p.real(), {
    get(_target, prop) {
      if (WITHHELD.has(prop)) return undefined;
      if (prop === 'close' || prop === 'init') return () => Promise.resolve();
      const real = p.real();
      const value: unknown = Reflect.get(real, prop, real);
      if (typeof value !== 'function' || typeof prop !== 'string') return value;
      return (...args: unknown[]) => call(prop, args);
    },
  });
}

function injected(name: string, when: 'before' | 'after'): Error {
  if (when === 'before')
    return name.startsWith('job') && name.endsWith('Many')
      ? new StoreFull('sim', new Error(`${name}: disk full (simulated)`))
      : new StoreUnavailable(`${name}: database is locked (simulated busy)`);
  return new StoreUnavailable(`${name}: connection lost after commit (simulated)`);
}

function errName(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/** A prune keeps what it deletes: the judge still sees those histories. */
function withArchive(name: string, args: unknown[], sink: PrunedSink): unknown[] {
  if (name !== 'jobPruneMany') return args;
  const params = args[0] as JobPruneParams;
  if (params.dryRun) return args;
  const theirs = params.archive;
  return [
    {
      ...params,
      archive: async (h: JobDetail[]) => {
        if (theirs) await theirs(h);
        sink(h);
      },
    },
  ];
}

/** The request keys (or job ids) a call was about, for the trace. */
function keysOf(args: unknown[], out: { ok: boolean; value?: unknown }): string {
  const p = (args[0] ?? {}) as Record<string, unknown>;
  const ids = new Set<string>();
  const add = (v: unknown) => {
    if (typeof v === 'string') ids.add(v.length > 12 ? `…${v.slice(-6)}` : v);
  };
  for (const j of (p.jobs as { requestKey?: string }[] | undefined) ?? []) add(j.requestKey);
  for (const l of (p.leases as { jobId?: string; attemptNo?: number }[] | undefined) ?? [])
    add(`${l.jobId?.slice(-6)}#${l.attemptNo}`);
  for (const f of (p.finishes as { lease: { jobId: string }; state: string }[] | undefined) ?? [])
    add(`…${f.lease.jobId.slice(-6)} ${f.state}`);
  if (typeof p.jobId === 'string') add(`${p.jobId} ${String(p.from)}->${String(p.to)}`);
  if (out.ok && Array.isArray(out.value))
    for (const r of out.value as { job?: { id?: string; requestKey?: string } }[])
      if (r?.job?.id) add(`${r.job.requestKey}=…${r.job.id.slice(-6)}`);
  return ids.size > 0 ? ` [${[...ids].join(' ')}]` : '';
}
