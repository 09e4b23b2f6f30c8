/**
 * Prometheus metrics (DESIGN §8) through prom-client. Counters and histograms come from the
 * runtime of this process (a RuntimeObserver); gauges that describe the store are computed from
 * the store at scrape time, so they are right across many worker processes.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { JOB_STATES } from '../core/states.js';
import type { RuntimeObserver } from '../runtime/observer.js';
import type { ApprovalStats, PauseRecord, Store, StoreStats } from '../store/store.js';

/** Seconds: from a fast loopback call to a day-long backlog. */
const AGE_BUCKETS = [0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 1800, 3600, 21600, 86400];
/** Seconds: a commit, from an fsync on a fast disk to a store that is struggling. */
const COMMIT_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2];
/** Calls that shared one commit. */
const CALLER_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

export interface MetricsOptions {
  /** Also export Node.js process metrics (`reckon_process_*`, `reckon_nodejs_*`). Default true. */
  processMetrics?: boolean;
  /** Store-wide gauges are read from this store at each scrape. */
  store?: Store;
}

export class Metrics {
  readonly registry = new Registry();
  readonly observer: RuntimeObserver;
  private snapshot: StoreStats | null = null;
  private approvals: ApprovalStats | null = null;
  private pauses: PauseRecord[] | null = null;
  private store: Store | undefined;

  constructor(options: MetricsOptions = {}) {
    const r = this.registry;
    this.store = options.store;
    if (options.processMetrics ?? true) {
      collectDefaultMetrics({ register: r, prefix: 'reckon_' });
      // Gauges that prom-client names `_total`, which Prometheus reserves for counters (promtool lint).
      for (const name of [
        'active_handles_total',
        'active_requests_total',
        'active_resources_total',
      ])
        r.removeSingleMetric(`reckon_nodejs_${name}`);
    }

    const { enqueued, attempts, unknown, leaseExpired, dupes } = jobCounters(r);
    const { reconcileLatency, ageAtDispatch, ageAtCompletion } = jobHistograms(r);
    const { commitSeconds, commitCallers, callWaiters } = processMetrics(r);
    const flow = flowMetrics(r);

    this.observer = {
      callWaiters: (delta) => callWaiters.inc(delta),
      enqueued: (e) =>
        e.created
          ? enqueued.inc({ operation: e.operation, queue: e.queue })
          : dupes.inc({ operation: e.operation, kind: 'enqueue_dedup' }),
      dispatched: (e) =>
        ageAtDispatch.observe({ operation: e.operation, queue: e.queue }, e.queueAgeMs / 1000),
      attemptFinished: (e) => attempts.inc({ operation: e.operation, state: e.state }),
      completed: (e) =>
        ageAtCompletion.observe(
          { operation: e.operation, queue: e.queue, state: e.state },
          e.ageMs / 1000,
        ),
      unknown: (e) => unknown.inc({ operation: e.operation, source: e.source }),
      leaseExpired: (e) =>
        leaseExpired.inc({ operation: e.operation, dispatched: String(e.dispatched) }),
      reconciled: (e) =>
        reconcileLatency.observe(
          { operation: e.operation, path: e.path, resolution: e.resolution },
          Math.max(0, e.latencyMs) / 1000,
        ),
      duplicatePrevented: (e) => dupes.inc({ operation: e.operation, kind: e.kind }),
      flowHeld: (e) => flow.held.inc({ operation: e.operation, limit: e.limit }, e.jobs),
      flowClaimed: (e) => flow.wait.observe({ operation: e.operation }, e.waitMs / 1000),
      scheduleSlot: (e) => {
        flow.slots.inc({ schedule: e.schedule, outcome: e.outcome }, e.slots ?? 1);
        if (e.outcome === 'enqueued')
          flow.lag.observe({ schedule: e.schedule }, Math.max(0, e.lagMs) / 1000);
      },
      storeCommit: (e) => {
        const labels = { store: e.store, write: e.write };
        commitSeconds.observe(labels, e.ms / 1000);
        commitCallers.observe(labels, e.callers);
      },
    };

    this.storeGauges();
  }

  /** The gauges read from the store's stats, one snapshot per scrape (see `text`). */
  private storeGauges(): void {
    const r = this.registry;
    // text() reads the store once per scrape; every store gauge's collect() reads that snapshot.
    const stats = { get: () => this.snapshot };
    new Gauge({
      name: 'reckon_jobs',
      help: 'Jobs in the store by queue and state.',
      labelNames: ['queue', 'state'],
      registers: [r],
      collect() {
        const s = stats.get();
        this.reset();
        for (const q of s?.queues ?? [])
          for (const state of JOB_STATES) this.set({ queue: q.queue, state }, q.counts[state]);
      },
    });
    new Gauge({
      name: 'reckon_queued_jobs',
      help: 'QUEUED jobs per queue (due now or later).',
      labelNames: ['queue'],
      registers: [r],
      collect() {
        const s = stats.get();
        this.reset();
        for (const q of s?.queues ?? []) this.set({ queue: q.queue }, q.counts.QUEUED);
      },
    });
    new Gauge({
      name: 'reckon_oldest_queued_age_seconds',
      help: 'Age of the oldest QUEUED job that is due, per queue (0 when none is due).',
      labelNames: ['queue'],
      registers: [r],
      collect() {
        const s = stats.get();
        this.reset();
        for (const q of s?.queues ?? [])
          this.set(
            { queue: q.queue },
            q.oldestDueAt === null ? 0 : Math.max(0, (s!.now - q.oldestDueAt) / 1000),
          );
      },
    });
    new Gauge({
      name: 'reckon_unknown_jobs',
      help: 'Jobs now UNKNOWN (automatic reconciliation pending), by operation.',
      labelNames: ['operation'],
      registers: [r],
      collect() {
        const s = stats.get();
        this.reset();
        for (const o of s?.byOperation ?? []) this.set({ operation: o.operation }, o.unknown);
      },
    });
    new Gauge({
      name: 'reckon_needs_review_jobs',
      help: 'Jobs now NEEDS_REVIEW (a person must decide), by operation.',
      labelNames: ['operation'],
      registers: [r],
      collect() {
        const s = stats.get();
        this.reset();
        for (const o of s?.byOperation ?? []) this.set({ operation: o.operation }, o.needsReview);
      },
    });
    this.approvalGauges();
    this.pauseGauge();
    new Gauge({
      name: 'reckon_expired_leases',
      help: 'Attempts whose lease has expired but that are not yet reclaimed.',
      registers: [r],
      collect() {
        const s = stats.get();
        this.set(s?.expiredLeases ?? 0);
      },
    });
  }

  /** Queues and operations paused now (issue #30), read from the store at each scrape. */
  private pauseGauge(): void {
    const pauses = { get: () => this.pauses };
    new Gauge({
      name: 'reckon_paused',
      help: 'Queues and operations paused now (1 each, kind queue or operation): no worker claims their jobs.',
      labelNames: ['kind', 'name'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const p of pauses.get() ?? []) this.set({ kind: p.kind, name: p.name }, 1);
      },
    });
  }

  /** AWAITING_APPROVAL by operation: how many, and how long the oldest has waited. */
  private approvalGauges(): void {
    const approvals = { get: () => this.approvals };
    new Gauge({
      name: 'reckon_awaiting_approval_jobs',
      help: 'Jobs now AWAITING_APPROVAL (a person must allow them before any worker may run them), by operation.',
      labelNames: ['operation'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const o of approvals.get()?.byOperation ?? [])
          this.set({ operation: o.operation }, o.awaiting);
      },
    });
    new Gauge({
      name: 'reckon_awaiting_approval_oldest_age_seconds',
      help: 'How long the oldest AWAITING_APPROVAL job has waited, by operation.',
      labelNames: ['operation'],
      registers: [this.registry],
      collect() {
        const a = approvals.get();
        this.reset();
        for (const o of a?.byOperation ?? [])
          this.set({ operation: o.operation }, Math.max(0, (a!.now - o.oldestAt) / 1000));
      },
    });
  }

  /** Reads the store-wide gauges from this store from now on. */
  attachStore(store: Store): void {
    this.store = store;
  }

  /** The exposition in Prometheus text format. */
  async text(): Promise<string> {
    [this.snapshot, this.approvals, this.pauses] = this.store
      ? await Promise.all([
          this.store.statsGet(),
          this.store.jobApprovalStats(),
          this.store.pauseList(),
        ])
      : [null, null, null];
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** The counters of what this process's runtime did to jobs. */
function jobCounters(r: Registry) {
  const enqueued = new Counter({
    name: 'reckon_enqueued_total',
    help: 'Jobs accepted by enqueue (deduplicated enqueues not included).',
    labelNames: ['operation', 'queue'],
    registers: [r],
  });
  const attempts = new Counter({
    name: 'reckon_attempts_finished_total',
    help: 'Attempt outcomes recorded by their workers, by attempt state.',
    labelNames: ['operation', 'state'],
    registers: [r],
  });
  const unknown = new Counter({
    name: 'reckon_unknown_outcomes_total',
    help: 'Attempts that became UNKNOWN: the request may have left, the result is not known.',
    labelNames: ['operation', 'source'],
    registers: [r],
  });
  const leaseExpired = new Counter({
    name: 'reckon_lease_expirations_total',
    help: 'Leases that expired and were reclaimed, by whether the attempt had dispatched.',
    labelNames: ['operation', 'dispatched'],
    registers: [r],
  });
  const dupes = new Counter({
    name: 'reckon_duplicates_prevented_total',
    help: 'Duplicate-prevention decisions: enqueue dedup, lookup found the effect, stale worker fenced, same-key retry.',
    labelNames: ['operation', 'kind'],
    registers: [r],
  });
  return { enqueued, attempts, unknown, leaseExpired, dupes };
}

/** The latency histograms of this process's jobs. */
function jobHistograms(r: Registry) {
  const reconcileLatency = new Histogram({
    name: 'reckon_reconciliation_latency_seconds',
    help: 'From an attempt entering UNKNOWN to its proven resolution (or review).',
    labelNames: ['operation', 'path', 'resolution'],
    buckets: AGE_BUCKETS,
    registers: [r],
  });
  const ageAtDispatch = new Histogram({
    name: 'reckon_queue_age_at_dispatch_seconds',
    help: 'From enqueue to the dispatch marker.',
    labelNames: ['operation', 'queue'],
    buckets: AGE_BUCKETS,
    registers: [r],
  });
  const ageAtCompletion = new Histogram({
    name: 'reckon_queue_age_at_completion_seconds',
    help: 'From enqueue to a confirmed SUCCEEDED or FAILED.',
    labelNames: ['operation', 'queue', 'state'],
    buckets: AGE_BUCKETS,
    registers: [r],
  });
  return { reconcileLatency, ageAtDispatch, ageAtCompletion };
}

/** Group commits and outcome waiters of this process. */
function processMetrics(r: Registry) {
  const commitSeconds = new Histogram({
    name: 'reckon_store_commit_seconds',
    help: 'Commits of writes that calls of this process shared (group commit), until durable.',
    labelNames: ['store', 'write'],
    buckets: COMMIT_BUCKETS,
    registers: [r],
  });
  const commitCallers = new Histogram({
    name: 'reckon_store_commit_callers',
    help: 'Calls answered by one shared commit (how much group commit merged).',
    labelNames: ['store', 'write'],
    buckets: CALLER_BUCKETS,
    registers: [r],
  });

  const callWaiters = new Gauge({
    name: 'reckon_call_waiters',
    help: 'Outstanding q.call / q.waitFor waits of this process (callers waiting for an outcome).',
    registers: [r],
  });
  return { commitSeconds, commitCallers, callWaiters };
}

/** Flow control (issue #30): what limits hold back, how long limited jobs wait, schedule slots. */
function flowMetrics(r: Registry) {
  const held = new Counter({
    name: 'reckon_flow_held_total',
    help: 'Due jobs a limited claim of this process passed over because their rate or concurrency limit was reached (counted at each claim that passes one over).',
    labelNames: ['operation', 'limit'],
    registers: [r],
  });
  const wait = new Histogram({
    name: 'reckon_flow_wait_seconds',
    help: 'From a limited job being due to its claim: the time its rate and concurrency limits (and the backlog) held it.',
    labelNames: ['operation'],
    buckets: AGE_BUCKETS,
    registers: [r],
  });
  const slots = new Counter({
    name: 'reckon_schedule_slots_total',
    help: 'Schedule slots this process judged: enqueued, or skipped as missed while no worker ran.',
    labelNames: ['schedule', 'outcome'],
    registers: [r],
  });
  const lag = new Histogram({
    name: 'reckon_schedule_lag_seconds',
    help: 'From a schedule slot to its enqueue.',
    labelNames: ['schedule'],
    buckets: AGE_BUCKETS,
    registers: [r],
  });
  return { held, wait, slots, lag };
}
