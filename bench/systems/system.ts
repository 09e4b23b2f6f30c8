/**
 * What the bench needs from each system under test. Every system gets a fresh database
 * (or Redis db) in open() and drops it in close().
 */
export interface Payload {
  seq: number;
  /** wallMs() when the producer called enqueue. */
  sentAt: number;
}

export interface Running {
  stop(): Promise<void>;
}

export interface WorkOptions {
  concurrency: number;
  /** Called when a job's handler starts (the no-op job itself). */
  onStart: (p: Payload) => void;
  /** Called when a job's completion is durable, where the system can tell us. */
  onDone?: (p: Payload) => void;
}

export interface BenchSystem {
  readonly name: string;
  /** Which peers it is compared with: reckon-PG with PostgreSQL peers, SQLite with all. */
  readonly family: 'reckon' | 'peer';
  readonly backend: 'postgres' | 'sqlite' | 'redis';
  open(): Promise<void>;
  close(): Promise<void>;
  enqueue(p: Payload): Promise<void>;
  enqueueMany(ps: Payload[]): Promise<void>;
  work(o: WorkOptions): Promise<Running>;
  /** Jobs not yet durably completed (used to time processing runs). */
  pending(): Promise<number>;
}
