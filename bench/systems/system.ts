/**
 * What the bench needs from each system under test. Every system gets a fresh database
 * (or Redis db) in open() and drops it in close().
 */
export interface Payload {
  seq: number;
  /** hostMs() when the producer called enqueue. */
  sentAt: number;
  /**
   * How long the job's handler waits before it returns, like an agent's HTTP call (the agent
   * workload); absent: a no-op.
   */
  waitMs?: number;
}

export interface Running {
  stop(): Promise<void>;
}

export interface WorkOptions {
  concurrency: number;
  /** Called when a job's handler starts (the no-op job itself). */
  onStart: (p: Payload) => void;
  /** Called when a job's handler returns (before its completion is recorded). */
  onEnd?: (p: Payload) => void;
  /** Called when a job's completion is durable, where the system can tell us. */
  onDone?: (p: Payload) => void;
  /**
   * A short lease (or lock) for jobs that wait, so that each one is renewed while it runs; each
   * system maps it to its own setting, or has none (its adapter says so).
   */
  leaseMs?: number;
  /** reckon only: work the operation limited to one attempt per key (process-c50-keyed). */
  keyed?: boolean;
}

/** Takes one waiting job the way the system's own workers do, and nothing else. */
export interface Claimer {
  /** Claims (fetches, locks, leases: the system's word) one job; returns how many it got. */
  claimOne(): Promise<number>;
  close(): Promise<void>;
}

export interface BenchSystem {
  readonly name: string;
  /** Which peers it is compared with: reckon-PG with PostgreSQL peers, SQLite with all. */
  readonly family: 'reckon' | 'peer';
  readonly backend: 'postgres' | 'sqlite' | 'redis';
  /**
   * Why bulkLoad() and claimer() are missing, where they are: the workloads that need them
   * (claim-*, memory-1m) skip this system.
   */
  readonly noBulkLoad?: string;
  open(): Promise<void>;
  /**
   * Connects to what another process's open() created (a database, a SQLite file, a queue name:
   * `target`), without creating or dropping anything: for a worker in a child process.
   */
  attach(target: string): Promise<void>;
  /** What attach() takes, once open. */
  readonly target: string;
  /** The PostgreSQL database it runs on, once open (for the store's write counters). */
  readonly database?: string;
  close(): Promise<void>;
  enqueue(p: Payload): Promise<void>;
  enqueueMany(ps: Payload[]): Promise<void>;
  /**
   * Leaves `n` jobs waiting, loaded as fast as the system allows: one job through the normal
   * enqueue, then its rows copied in bulk (SQL) with only the id, key, payload and the values
   * derived from them changed, so every row is what a normal enqueue writes. BullMQ: addBulk.
   * PostgreSQL systems ANALYZE their tables after the load (autovacuum would, in production).
   */
  bulkLoad(n: number): Promise<void>;
  claimer(): Promise<Claimer>;
  work(o: WorkOptions): Promise<Running>;
  /** Jobs not yet durably completed (used to time processing runs). */
  pending(): Promise<number>;
  /**
   * The store's cumulative write counters, where the server keeps them (PostgreSQL: commits and
   * rows written in its database; Redis: commands processed), for writes per second.
   */
  writeCounters?(): Promise<Record<string, number>>;
}
