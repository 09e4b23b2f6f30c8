/**
 * One simulated run from one seed: the real runtime (workers with their reclaimer, reconciler,
 * approval expiry and retention; `q.call` waiters; operators) on one real SQLite store, several
 * simulated processes, the seed's faults, then a calm phase until everything settled, then the
 * verdict (sim-verdict.ts). Nothing here copies runtime logic: it only drives `Queue` and
 * `Worker` through their public API, on the world's clock.
 */
import {
  ApprovalExpired,
  JobNotFound,
  JobStateConflict,
  OutcomePending,
  RequestKeyConflict,
  StoreError,
} from '../../core/errors.js';
import type { AnyOperation } from '../../core/operation.js';
import { Faults } from '../../runtime/faults.js';
import type { CallOutcome } from '../../runtime/outcomes.js';
import { Queue } from '../../runtime/queue.js';
import type { Worker } from '../../runtime/worker.js';
import { SqliteStore } from '../../store/sqlite/store.js';
import type { JobDetail, Store } from '../../store/store.js';
import { chooseScenario, type SimJob, type SimLimits, type SimScenario } from './scenario.js';
import {
  HEALTHY,
  SIM_FLAVOURS,
  SimDownstream,
  simOperation,
  simOperationName,
  type SimFlavour,
} from './sim-downstream.js';
import { processStore, type StoreFaultRates } from './sim-store.js';
import { SimRestore } from './restore.js';
import { SimStalls } from './stalls.js';
import { judgeSim, type SimRecords } from './sim-verdict.js';
import { World, type SimProcess } from './world.js';

export interface SimRunOptions extends SimLimits {
  seed: number;
  /** Keep the readable interleaving (`result.trace`). */
  trace?: boolean;
}

export interface SimResult {
  seed: number;
  ok: boolean;
  violations: string[];
  /** Events the world ran, and the virtual time the run took (ms). */
  steps: number;
  virtualMs: number;
  jobs: number;
  faults: string[];
  trace?: string[];
}

/** Virtual time allowed for the calm phase to settle everything. */
const CALM_MS_MAX = 600_000;
/** Events one run may take: a runaway loop ends the run (and fails it) instead of hanging. */
const STEPS_MAX = 400_000;
/** The chance that a crash or freeze (while the seed has some left) strikes before a step. */
const STEP_FAULT_CHANCE = 0.01;
/** How often the calm phase checks whether everything settled (virtual ms). */
const SETTLE_CHECK_MS = 500;

interface Incarnation {
  proc: SimProcess;
  queue: Queue;
  worker: Worker;
}

export async function runSim(o: SimRunOptions): Promise<SimResult> {
  const world = new World(o.seed, o.trace === true);
  const s = chooseScenario(o.seed, o);
  const real = new SqliteStore({
    path: ':memory:',
    image: await migratedImage(),
    clock: () => world.storeNow(),
  });
  await real.init();
  const run = new SimRun(world, s, real);
  try {
    await run.go();
    const details = await run.details();
    const judged = run.restores.judged(details, run.downstream, run.records);
    const violations = judgeSim(judged.details, judged.ledger, judged.records);
    if (world.trace) for (const d of details) world.log('journal', journalLine(d, run.downstream));
    return {
      seed: o.seed,
      ok: violations.length === 0,
      violations,
      steps: world.steps,
      virtualMs: world.now - run.startedAt,
      jobs: s.jobs.length,
      faults: [...s.faults],
      ...(world.trace ? { trace: world.trace } : {}),
    };
  } finally {
    await run.real.close();
    for (const old of run.restores.retired) await old.close();
  }
}

class SimRun {
  readonly downstream: SimDownstream;
  readonly records: SimRecords = {
    acks: [],
    answers: [],
    internalErrors: [],
    lateApprovals: [],
    conflictsAccepted: [],
    pruned: new Map(),
  };
  readonly startedAt: number;
  private readonly slots: Incarnation[] = [];
  private readonly generation: number[] = [];
  private calm = false;
  /** Client operations (enqueues, calls) not answered yet. */
  private pending = 0;
  private settled = false;
  private storeFaults: StoreFaultRates;
  private operator: Queue | undefined;
  private readonly served = new Map<SimProcess, Set<string>>();
  private readonly stalls: SimStalls;
  readonly restores = new SimRestore();
  /** Between the host's loss and the restore: no process starts. */
  private restoring = false;

  constructor(
    readonly world: World,
    readonly s: SimScenario,
    public real: SqliteStore,
  ) {
    this.downstream = new SimDownstream(world);
    this.stalls = new SimStalls(world, () => this.real, s);
    this.startedAt = world.now;
    this.storeFaults = {
      failBefore: s.faults.has('store') ? 0.03 : 0,
      failAfter: s.faults.has('store') ? 0.01 : 0,
      latencyMsMax: s.storeLatencyMsMax,
    };
  }

  async go(): Promise<void> {
    const { world, s } = this;
    this.downstream.rates = this.chaosRates();
    world.log(null, `scenario: ${this.describe()}`);
    s.processes.forEach((_, i) => this.start(i));
    if (s.faults.has('operators')) this.startOperator();
    for (const job of s.jobs) world.schedule(job.atMs, null, 'client', () => this.submit(job, 1));
    this.scheduleFaults();
    if (s.restore) {
      world.schedule(s.restore.backupAtMs, null, 'backup', () => this.backup());
      world.schedule(s.restore.lostAtMs, null, 'host-lost', () => this.hostLost());
    }
    world.schedule(s.chaosMs, null, 'calm', () => this.beginCalm());
    await world.run(world.now + s.chaosMs + CALM_MS_MAX, () => this.settled, STEPS_MAX);
  }

  private describe(): string {
    const { s } = this;
    return [
      `fleets ${s.fleets.map((f) => f.join('+')).join(' | ')}`,
      `processes ${s.processes.length}`,
      `jobs ${s.jobs.length}`,
      `lease ${s.worker.leaseMs} ms, timeout ${s.op.timeoutMs} ms, grace ${s.op.graceMs} ms`,
      `faults ${[...s.faults].join(',') || 'none'}`,
    ].join('; ');
  }

  private chaosRates() {
    const { s } = this;
    const f = s.faults;
    const slowBudget = s.freezeMsMax - (f.has('freeze') ? this.freezeMsMax() : 0);
    const slowShare = f.has('versions') ? 0.3 : 0.2;
    return {
      ...HEALTHY,
      drop: f.has('drop') ? 0.1 : 0,
      error: f.has('drop') ? 0.05 : 0,
      refuse: f.has('refuse') ? 0.05 : 0,
      // An older fleet's UNKNOWN is checked at once: requests still in flight then are the test.
      // With `versions`, more requests are slow, and half the slow ones (where the horizon leaves
      // room) arrive after their attempt timed out: in flight when the older fleet's worker marks
      // it UNKNOWN and checks at once. Other seeds keep their runs (no extra draw).
      slow: (f.has('slow') || f.has('versions')) && slowBudget > 100 ? slowShare : 0,
      slowMsMax: Math.max(0, slowBudget),
      late: f.has('versions') && slowBudget > s.op.timeoutMs ? 0.5 : 0,
      lateMsMin: s.op.timeoutMs,
      lookupFail: f.has('lookup') ? 0.3 : 0,
      lookupLagMsMax: f.has('lookup') ? Math.floor(s.op.graceMs / 2) : 0,
    };
  }

  /** A freeze outlasts the lease, within what the horizon allows (see scenario.ts). */
  private freezeMsMax(): number {
    return Math.min(this.s.freezeMsMax, Math.ceil(this.s.worker.leaseMs * 1.6));
  }

  /** A process (re)starts in its slot: a new incarnation with its own clock view and store handle. */
  private start(slot: number): void {
    const { world, s } = this;
    if (this.restoring) return; // the restore starts every slot
    const gen = (this.generation[slot] = (this.generation[slot] ?? 0) + 1);
    const tol = s.worker.clockSkewToleranceMs;
    // The first incarnation has the scenario's skew; a restarted one, a fresh one.
    const skewMs = gen === 1 ? s.processes[slot]!.skewMs : world.int(-tol / 2, tol / 2);
    const proc: SimProcess = {
      name: `p${slot}${gen > 1 ? `.${gen}` : ''}`,
      skewMs: s.faults.has('skew') ? skewMs : 0,
      crashed: false,
      frozenUntil: 0,
    };
    const fleet = s.processes[slot]!.fleet;
    const queue = this.queueFor(proc, s.fleets[fleet]!, fleet === s.oldFleet);
    const served = this.served.get(proc)!;
    const worker = queue.worker({
      operations: queue.knownOperations().filter((op) => served.has(op.name)),
      ownerId: proc.name,
      ...s.worker,
      retention:
        s.retentionMs === null
          ? 'off'
          : {
              ages: { SUCCEEDED: s.retentionMs, FAILED: s.retentionMs, CANCELLED: s.retentionMs },
              intervalMs: 2_000,
              pauseMs: 10,
            },
    });
    this.slots[slot] = { proc, queue, worker };
    world.log(proc, `start (skew ${proc.skewMs} ms)`);
    void worker.start();
  }

  private queueFor(proc: SimProcess, flavours: readonly SimFlavour[], old = false): Queue {
    const store = processStore({
      world: this.world,
      real: () => this.real,
      proc,
      faults: () => this.storeFaults,
      onPrune: (h) => {
        for (const d of h) this.records.pruned.set(d.job.id, d);
      },
      beforeCall: (name, args) => this.stalls.maybeStall(proc, name, args),
      afterCall: (name, args, value) => this.stalls.observe(name, args, value),
    });
    // Every process knows every operation (clients enqueue any); its worker serves its fleet's.
    const operations: AnyOperation[] = SIM_FLAVOURS.map((f) =>
      simOperation(f, this.s.op, this.downstream, proc, old),
    );
    this.served.set(proc, new Set(flavours.map(simOperationName)));
    return new Queue(store, {
      operations,
      clock: this.world.clockOf(proc),
      faults: new Faults(),
      outcomePollMs: 500,
    });
  }

  private live(): Incarnation[] {
    return this.slots.filter((i) => !i.proc.crashed);
  }

  // ---------------------------------------------------------------- faults

  private scheduleFaults(): void {
    const { world, s } = this;
    const at = () => world.int(0, s.chaosMs);
    let crashes = s.faults.has('crash') ? world.int(1, 4) : 0;
    let freezes =
      s.faults.has('freeze') && this.freezeMsMax() > s.worker.leaseMs ? world.int(1, 3) : 0;
    // Crashes and freezes strike a process between two of its steps (at any await), each step
    // with the same small chance: busy moments (a marker write, an outcome) are hit as often
    // as they occur.
    world.beforeStep = (p) => {
      if (this.calm || p.name === 'operator') return;
      if (crashes > 0 && world.chance(STEP_FAULT_CHANCE)) {
        crashes--;
        this.crash(p);
      } else if (freezes > 0 && world.chance(STEP_FAULT_CHANCE)) {
        freezes--;
        this.freeze(p);
      }
    };
    const windows = (what: 'downUntil' | 'throttledUntil') =>
      world.schedule(at(), null, what, () => {
        if (this.calm) return;
        this.downstream.rates = {
          ...this.downstream.rates,
          [what]: world.now + world.int(300, 5_000),
        };
        world.log('downstream', what === 'downUntil' ? 'down' : 'throttling (429)');
      });
    if (s.faults.has('down')) windows('downUntil');
    if (s.faults.has('throttle')) windows('throttledUntil');
  }

  private crash(proc: SimProcess): void {
    const victim = this.slots.find((i) => i.proc === proc);
    if (!victim) return;
    victim.proc.crashed = true;
    this.world.log(victim.proc, 'CRASH');
    const slot = this.slots.indexOf(victim);
    this.world.schedule(this.world.int(100, 3_000), null, 'restart', () => this.start(slot));
  }

  private freeze(proc: SimProcess): void {
    const ms = this.world.int(this.s.worker.leaseMs + 1, this.freezeMsMax());
    proc.frozenUntil = this.world.now + ms;
    this.world.log(proc, `FREEZE ${ms} ms`);
  }

  private backup(): void {
    this.restores.backup(this.real);
    this.world.log(null, 'BACKUP taken');
  }

  /** The host is lost: every process stops; the backup is restored a little later. */
  private hostLost(): void {
    if (!this.restores.taken) return;
    const { world } = this;
    this.restoring = true;
    for (const inc of this.slots) inc.proc.crashed = true;
    world.log(null, 'HOST LOST: every process stops');
    // The restore runs after the old host's clocks, however skewed, have passed its last moment.
    const tol = this.s.worker.clockSkewToleranceMs;
    world.schedule(world.int(tol + 50, 2_000), null, 'restore', async () => {
      this.real = await this.restores.restore(this.real, world.now, () => world.storeNow());
      world.log(null, 'RESTORED from the backup (reckon restore, --reconcile unfinished)');
      this.restoring = false;
      this.slots.forEach((_, slot) => this.start(slot));
    });
  }

  private beginCalm(): void {
    this.calm = true;
    this.stalls.calm = true;
    this.downstream.rates = HEALTHY;
    this.storeFaults = { ...this.storeFaults, failBefore: 0, failAfter: 0 };
    this.world.log(null, 'calm: faults end; crashed processes restart');
    this.slots.forEach((inc, slot) => {
      if (inc.proc.crashed) this.start(slot);
    });
    const check = async () => {
      if (this.pending === 0 && (await settledNow(this.real))) this.settled = true;
      else this.world.schedule(SETTLE_CHECK_MS, null, 'settle-check', check);
    };
    this.world.schedule(SETTLE_CHECK_MS, null, 'settle-check', check);
  }

  // ---------------------------------------------------------------- clients

  /**
   * An agent's request: enqueue (or call) from a live process. An error, or no answer within
   * the agent's patience (its process crashed), and it tries again with the same key.
   */
  private submit(job: SimJob, tryNo: number, firstAt = this.world.now): void {
    const { world, s } = this;
    // Under retention, an agent stops asking long before the key may be forgotten (its job's
    // history deleted): a later enqueue under that key would rightly be a new request.
    if (s.retentionMs !== null && world.now - firstAt > s.retentionMs / 2) {
      world.log(null, `client gives up on ${job.key}`);
      return;
    }
    const live = this.live();
    if (live.length === 0) {
      world.schedule(500, null, 'client-retry', () => this.submit(job, tryNo, firstAt));
      return;
    }
    const inc = live[world.int(0, live.length - 1)]!;
    const op = simOperationName(job.flavour);
    let answered = false;
    this.pending++;
    const again = (ms: number) =>
      world.schedule(ms, null, 'client-retry', () => {
        this.pending--;
        this.submit(job, tryNo + 1, firstAt);
      });
    world.log(
      inc.proc,
      `${job.callMs !== null ? 'call' : 'enqueue'} ${job.key} (${op}, try ${tryNo})`,
    );
    const patience = world.schedule((job.callMs ?? 0) + 2_000, null, 'client-patience', () => {
      if (answered) return;
      // Given up: a late answer to this try is not heard (the next try gets its own).
      answered = true;
      again(0);
    });
    const done = (): boolean => {
      if (answered || inc.proc.crashed) return false;
      answered = true;
      patience.cancelled = true;
      return true;
    };
    const callMs =
      job.callMs !== null && s.retentionMs !== null
        ? Math.min(job.callMs, Math.floor(s.retentionMs / 4))
        : job.callMs;
    const request =
      callMs !== null
        ? inc.queue.call(op, { n: job.n }, { key: job.key, timeoutMs: callMs })
        : inc.queue.enqueue(op, { n: job.n }, { key: job.key });
    request.then(
      (r) => {
        if (!done()) return;
        this.pending--;
        const jobId = 'jobId' in r ? r.jobId : r.id;
        this.records.acks.push({ key: job.key, operation: op, jobId });
        if ('jobId' in r) this.records.answers.push({ ...(r as CallOutcome), at: world.now });
        this.afterAck(job);
      },
      (err: unknown) => {
        if (!done()) return;
        if (err instanceof OutcomePending) {
          this.pending--;
          this.records.acks.push({ key: job.key, operation: op, jobId: err.jobId });
          return this.afterAck(job);
        }
        if (err instanceof StoreError) return void again(world.int(50, 1_000));
        this.pending--;
        if (this.forgotten(err)) return world.log(inc.proc, `${job.key}: its job was pruned`);
        this.internal(`${op} ${job.key}`, err, job.key);
      },
    );
  }

  /** After the acknowledgement: the agent's repeat, and another operation's try at the same key. */
  private afterAck(job: SimJob): void {
    // With retention on, a repeat may legitimately find the key forgotten: not judged then.
    if (this.s.retentionMs !== null) return;
    if (job.repeat)
      this.world.schedule(this.world.int(0, 5_000), null, 'client-repeat', () =>
        this.submit({ ...job, repeat: false, conflict: null, callMs: null }, 1),
      );
    const other = job.conflict;
    if (other && other !== job.flavour)
      this.world.schedule(this.world.int(0, 5_000), null, 'client-conflict', () =>
        this.conflict(job, other),
      );
  }

  /** The same key under another operation: RequestKeyConflict is the only right answer. */
  private conflict(job: SimJob, other: SimFlavour): void {
    const inc = this.live()[0];
    if (!inc) return;
    const op = simOperationName(other);
    this.world.log(inc.proc, `enqueue ${job.key} under ${op} (must conflict)`);
    inc.queue.enqueue(op, { n: job.n }, { key: job.key }).then(
      (r) => {
        if (r.operation !== op && !this.restores.forgot(job.key))
          this.records.conflictsAccepted.push(
            `enqueue of ${job.key} under ${op} was answered with job ${r.id} of ${r.operation}: the caller's request is lost`,
          );
      },
      (err: unknown) => {
        if (!(err instanceof RequestKeyConflict) && !(err instanceof StoreError))
          this.internal(`conflicting enqueue ${job.key}`, err, job.key);
      },
    );
  }

  /**
   * A waiter told that its job is gone, after retention deleted the job's history: the
   * retention limit (the process waiting was stalled past it), and a true answer.
   */
  private forgotten(err: unknown): boolean {
    if (!(err instanceof JobNotFound)) return false;
    const id = /"([^"]+)"/.exec(err.message)?.[1];
    return id !== undefined && this.records.pruned.has(id);
  }

  private internal(what: string, err: unknown, key?: string): void {
    // A key the restore forgot may since belong to another operation's job: the restore's limit.
    if (key !== undefined && this.restores.forgot(key)) return;
    const e = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    this.records.internalErrors.push(`${what}: ${e}`);
  }

  // ---------------------------------------------------------------- operators

  private startOperator(): void {
    const proc: SimProcess = { name: 'operator', skewMs: 0, crashed: false, frozenUntil: 0 };
    this.operator = this.queueFor(proc, []);
    const act = () => {
      void this.operate().finally(() =>
        this.world.schedule(this.world.int(300, 3_000), null, 'operator', act),
      );
    };
    this.world.schedule(this.world.int(300, 3_000), null, 'operator', act);
  }

  private async operate(): Promise<void> {
    const q = this.operator!;
    try {
      if (this.world.chance(0.5)) await this.decideOne(q);
      else await this.resolveOne(q);
    } catch (err) {
      // Lost a race with a worker, the expiry loop or retention, or decided after the approval's
      // timeout (refused, #33.3): a person reads the list again.
      if (
        err instanceof ApprovalExpired ||
        err instanceof StoreError ||
        err instanceof JobStateConflict ||
        err instanceof JobNotFound
      )
        return;
      this.internal('operator', err);
    }
  }

  private async decideOne(q: Queue): Promise<void> {
    const list = await q.approvals.list({ limit: 10 });
    if (list.length === 0) return;
    const job = list[this.world.int(0, list.length - 1)]!;
    const approve = this.world.chance(0.7);
    this.world.log('operator', `${approve ? 'approve' : 'deny'} ${job.requestKey}`);
    await q.approvals.decide(job.id, { approve, actor: 'sim' });
    if (!approve || job.approvalExpiresAt === null) return;
    const d = await q.job(job.id);
    const ev = d?.events.find((e) => e.kind === 'approved');
    if (ev && ev.at > job.approvalExpiresAt + this.s.worker.clockSkewToleranceMs)
      this.records.lateApprovals.push(
        `job ${job.id} (key ${job.requestKey}) approved at ${ev.at}, ${ev.at - job.approvalExpiresAt} ms after its approval expired`,
      );
  }

  /** A truthful person: reads the downstream, and decides only once nothing is in flight. */
  private async resolveOne(q: Queue): Promise<void> {
    const list = await q.review.list({ limit: 10 });
    if (list.length === 0) return;
    const d = list[this.world.int(0, list.length - 1)]!;
    const key = d.job.requestKey;
    const lastSent = Math.max(0, ...d.attempts.map((a) => a.dispatchedAt ?? 0));
    const quietAfter = lastSent + this.s.op.timeoutMs + this.s.op.graceMs + 1_000;
    if (this.world.now < quietAfter || (this.downstream.inFlight.get(key) ?? 0) > 0) return;
    const effects = this.downstream.effectsOf(key);
    const as = effects > 0 ? 'succeeded' : this.world.chance(0.5) ? 'retry' : 'failed';
    this.world.log('operator', `resolve ${key} as ${as}`);
    await q.review.resolve(d.job.id, { as, actor: 'sim' });
  }

  // ---------------------------------------------------------------- the end

  /** Every job of the journal, and the histories retention deleted. */
  async details(): Promise<JobDetail[]> {
    const jobs = await this.real.jobList({ limit: 10_000 });
    const out: JobDetail[] = [];
    for (const j of jobs) {
      const d = await this.real.jobGet({ id: j.id });
      if (d) out.push(d);
    }
    const live = new Set(out.map((d) => d.job.id));
    for (const [id, d] of this.records.pruned) if (!live.has(id)) out.push(d);
    return out;
  }
}

let template: Promise<Buffer> | undefined;

/** An empty store with every migration applied, made once: each run opens a copy of it. */
function migratedImage(): Promise<Buffer> {
  template ??= (async () => {
    const store = new SqliteStore({ path: ':memory:' });
    await store.init();
    try {
      return store.serialize();
    } finally {
      await store.close();
    }
  })();
  return template;
}

async function settledNow(store: Store): Promise<boolean> {
  const stats = await store.statsGet();
  return stats.queues.every((q) => q.counts.QUEUED + q.counts.LEASED + q.counts.UNKNOWN === 0);
}

/** One job as the journal ends it, for the end of a trace. */
function journalLine(d: JobDetail, ledger: SimDownstream): string {
  const attempts = d.attempts
    .map(
      (a) =>
        `#${a.attemptNo} ${a.state}${a.reason ? ` (${a.reason})` : ''}` +
        `${a.resolutionSource ? ` resolved by ${a.resolutionSource}` : ''}`,
    )
    .join(', ');
  return `${d.job.requestKey} ${d.job.operation} ${d.job.state}, effects ${ledger.effectsOf(d.job.requestKey)}; ${attempts || 'no attempts'}`;
}
