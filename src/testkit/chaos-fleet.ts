/**
 * The worker processes of a chaos run, in fixed slots: chaos kills one at a time with SIGKILL,
 * a fault point may kill one from inside, the downstream may have one killed as its request
 * arrives; whatever died is restarted, with or without fault points, until the calm phase.
 */
import type { FaultAction, FaultPoint } from '../runtime/faults.js';
import type { ChildConfigInput, ChildEnqueue } from './child-config.js';
import { startWorkerChild, type ChildEnqueued, type WorkerChild } from './fleet.js';

export interface ChaosKills {
  /** SIGKILLs sent by the harness at random moments. */
  sigkill: number;
  /** Workers that died at a fault point armed through RECKON_FAULTS. */
  atFaultPoints: number;
  /** Workers killed when their request reached the downstream (the request had left). */
  onReceipt: number;
}

/** Restarting a dead worker at once would hide the gap a real crash leaves; a short wait keeps it. */
const RESTART_DELAY_MS = 100;

export class ChaosFleet {
  private readonly slots: (WorkerChild | undefined)[];
  private readonly killedByUs = new WeakSet<WorkerChild>();
  private readonly receiptKilled = new WeakSet<WorkerChild>();
  private running = true;
  private generation = 0;
  readonly kills: ChaosKills = { sigkill: 0, atFaultPoints: 0, onReceipt: 0 };
  /** Workers that exited by themselves other than by SIGKILL (a crash: a bug, or bad settings). */
  readonly crashes: string[] = [];
  /** Fault points that fired in the children, by `point:action`. */
  readonly faultsFired: Record<string, number> = {};
  /** The jobs the children enqueued themselves, by request key (the latest answer for each). */
  readonly enqueued = new Map<string, ChildEnqueued>();
  /** Of those enqueues, the ones that created a job and were answered LEASED: hand-offs. */
  handOffs = 0;

  constructor(
    size: number,
    private readonly config: ChildConfigInput,
    private readonly seed: number,
    private readonly env: Record<string, string> = {},
    /** The jobs each slot's worker enqueues itself, at every (re)start. */
    private readonly enqueues: (slot: number) => ChildEnqueue[] = () => [],
  ) {
    this.slots = new Array<WorkerChild | undefined>(size).fill(undefined);
  }

  startAll(faults: () => string): void {
    for (let i = 0; i < this.slots.length; i++) this.start(i, faults());
  }

  /** Live children, for kill-on-receipt: only a process of this fleet is ever killed. */
  owns(pid: number): WorkerChild | undefined {
    return this.slots.find((c) => c?.alive && c.pid === pid);
  }

  /** SIGKILL at a seeded random moment: one live worker, restarted with `faults()`. */
  async killOne(rand: () => number, faults: () => string): Promise<void> {
    const live = this.slots.map((c, i) => [c, i] as const).filter(([c]) => c?.alive);
    if (live.length === 0) return;
    const [child, slot] = live[Math.floor(rand() * live.length)]!;
    this.killedByUs.add(child!);
    this.kills.sigkill++;
    await child!.kill();
    if (this.running) this.start(slot, faults());
  }

  /** Kills the worker that sent a request the downstream just received; it restarts by itself. */
  killOnReceipt(pid: number): boolean {
    const child = this.owns(pid);
    if (!child) return false;
    // Synchronous, so the process is gone (or going) before the downstream acts on its request.
    this.receiptKilled.add(child);
    child.process.kill('SIGKILL');
    this.kills.onReceipt++;
    return true;
  }

  /** Replaces every worker by one without fault points: the run's last stretch, to settle. */
  async calm(): Promise<void> {
    for (let i = 0; i < this.slots.length; i++) {
      const child = this.slots[i];
      if (child) {
        this.killedByUs.add(child);
        if (child.alive) this.kills.sigkill++;
        await child.kill();
      }
      this.start(i, '');
    }
  }

  /** Graceful: SIGTERM, each worker finishes what it holds. */
  stopAll(): Promise<unknown> {
    return this.each((c) => c.stop());
  }

  killAll(): Promise<unknown> {
    return this.each((c) => c.kill());
  }

  /** What the children wrote on stderr lately, for a failed run's message. */
  stderrTails(): string {
    return this.slots
      .filter((c): c is WorkerChild => c !== undefined)
      .map((c) => `--- worker ${c.pid} ${JSON.stringify(c.exitInfo ?? 'alive')}\n${c.stderr}`)
      .join('\n');
  }

  private start(slot: number, faults: string): void {
    const generation = ++this.generation;
    const enqueue = this.enqueues(slot);
    const child = startWorkerChild(
      {
        ...this.config,
        ownerId: `chaos-${slot}-${generation}`,
        faults,
        // Each child draws its own probabilistic faults, reproducibly from the run's seed.
        faultsSeed: (this.seed + generation) >>> 0 || 1,
        ...(enqueue.length > 0 ? { enqueue } : {}),
      },
      {
        env: this.env,
        onFault: (point, action) => this.faultFired(point, action),
        onEnqueued: (e) => {
          this.enqueued.set(e.key, e);
          if (e.created && e.state === 'LEASED') this.handOffs++;
        },
      },
    );
    this.slots[slot] = child;
    void child.exited.then(() => {
      if (this.killedByUs.has(child)) return;
      // Died by itself: a fault point fired (kill), or kill-on-receipt, or it crashed.
      if (child.exitInfo?.signal === 'SIGKILL') {
        if (!this.receiptKilled.has(child)) this.kills.atFaultPoints++;
      } else this.crashes.push(`${JSON.stringify(child.exitInfo)}: ${child.stderr.slice(-2_000)}`);
      setTimeout(() => {
        if (this.running && this.slots[slot] === child) this.start(slot, '');
      }, RESTART_DELAY_MS);
    });
  }

  private faultFired(point: FaultPoint, action: FaultAction): void {
    const key = `${point}:${action}`;
    this.faultsFired[key] = (this.faultsFired[key] ?? 0) + 1;
  }

  private each(end: (c: WorkerChild) => Promise<unknown>): Promise<unknown> {
    this.running = false;
    const live = this.slots.filter((c): c is WorkerChild => c !== undefined);
    for (const c of live) this.killedByUs.add(c);
    return Promise.all(live.map(end));
  }
}
