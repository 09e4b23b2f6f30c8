/**
 * Stalls (the `stall` fault): a process paused right before it writes a dispatch marker or an
 * attempt's outcome, for as long as it takes another process to take that job over (a later
 * attempt of the job dispatched, or the job settled), or a cap. A freeze of a fixed length
 * rarely outlives the lease at exactly these moments; a stall waits for the takeover itself,
 * which is when a worker that lost its lease must be stopped by the fences.
 *
 * A stall of any length keeps the promise reckon makes: before the marker nothing has left,
 * and before the outcome write the request has been answered. What the stalled process had
 * already handed to the network still goes (its store statements run, its requests leave; the
 * answers wait), but its markers: the window between the marker and the send is a limit the
 * README states, which the freezes' cap keeps within the lookup horizon, and an enqueue held
 * past retention would rightly be a new request.
 */
import type { DispatchMarkResult, LeaseRef, Store } from '../../store/store.js';
import type { SimScenario } from './scenario.js';
import type { SimProcess, World } from './world.js';

/** The store calls a stall strikes before: the fenced writes of a worker that held a lease. */
const STALLED_CALLS = new Set(['attemptDispatchMany', 'attemptFinishMany']);
/** The chance that one of those calls stalls (while the seed has stalls left). */
const STALL_CHANCE = 0.1;
/** How often a stall looks whether its job settled meanwhile (virtual ms). */
const STALL_CHECK_MS = 500;
const SETTLED = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW']);

interface Stall {
  proc: SimProcess;
  lease: LeaseRef;
  until: number;
}

export class SimStalls {
  private left: number;
  private readonly active: Stall[] = [];
  /** No stall begins once the faults end. */
  calm = false;

  constructor(
    private readonly world: World,
    private readonly real: () => Store,
    private readonly s: SimScenario,
  ) {
    this.left = s.faults.has('stall') ? world.int(1, 3) : 0;
  }

  /** Called as `proc` makes a store call, before it leaves. True: it stalls before this call. */
  maybeStall(proc: SimProcess, name: string, args: unknown[]): boolean {
    if (this.left <= 0 || this.calm || proc.stalled || proc.name === 'operator') return false;
    if (!STALLED_CALLS.has(name)) return false;
    const lease = leaseOf(args);
    if (!lease || !this.world.chance(STALL_CHANCE)) return false;
    this.left--;
    const { world } = this;
    world.stall(proc);
    world.log(proc, `STALL before ${name} […${lease.jobId.slice(-6)}#${lease.attemptNo}]`);
    const stall: Stall = { proc, lease, until: world.now + this.capMs() };
    this.active.push(stall);
    const check = async (): Promise<void> => {
      if (!proc.stalled) return;
      if (world.now < stall.until && !(await this.settled(lease.jobId)))
        return void world.schedule(STALL_CHECK_MS, null, 'stall-check', check);
      this.end(stall);
    };
    world.schedule(STALL_CHECK_MS, null, 'stall-check', check);
    return true;
  }

  /**
   * Told of every store call that ran: a dispatch marker committed for a later attempt of a
   * stalled job is the takeover its stall waits for.
   */
  observe(name: string, args: unknown[], value: unknown): void {
    if (name !== 'attemptDispatchMany' || this.active.length === 0) return;
    const leases = (args[0] as { leases: LeaseRef[] }).leases;
    const marks = value as DispatchMarkResult[];
    leases.forEach((l, i) => {
      if (!marks[i]?.ok) return;
      for (const stall of [...this.active])
        if (stall.lease.jobId === l.jobId && l.attemptNo > stall.lease.attemptNo) this.end(stall);
    });
  }

  private end(stall: Stall): void {
    this.active.splice(this.active.indexOf(stall), 1);
    this.world.log(stall.proc, 'stall ends');
    this.world.unstall(stall.proc);
  }

  /** Long enough for a reclaim, the lookup horizon, a lookup and a retry's dispatch. */
  private capMs(): number {
    const { op, worker } = this.s;
    return 2 * (op.timeoutMs + op.graceMs) + 3 * worker.leaseMs;
  }

  private async settled(jobId: string): Promise<boolean> {
    const d = await this.real().jobGet({ id: jobId });
    return !d || SETTLED.has(d.job.state);
  }
}

/** The (first) lease a marker or outcome write is about. */
function leaseOf(args: unknown[]): LeaseRef | undefined {
  const p = (args[0] ?? {}) as { leases?: LeaseRef[]; finishes?: { lease: LeaseRef }[] };
  return p.leases?.[0] ?? p.finishes?.[0]?.lease;
}
