/**
 * `npm run bench`: reckon (SQLite and PostgreSQL stores, full journal) against pg-boss,
 * graphile-worker, BullMQ and DBOS on the same workloads, interleaved round by round, each run on
 * a fresh database. Prints medians and reckon's ratio to each peer.
 *
 *   npm run bench -- [--quick] [--json] [--out file.json] [--rounds N]
 *                    [--systems reckon-sqlite,reckon-pg,pg-boss,graphile-worker,bullmq,dbos]
 *                    [--workloads enqueue-1by1,enqueue-32,…] [--enqueue-jobs N]
 *                    [--process-jobs N] [--latency-jobs N]
 *                    [--claim-waiting N] [--claim-waiting-small N] [--claim-samples N]
 *                    [--memory-waiting N] [--memory-ms N] [--agent-jobs N]
 *                    [--agent-concurrency N] [--in-process]
 *   npm run bench -- --trace [--systems reckon-pg,reckon-sqlite] [--trace-jobs N]
 *                    [--trace-concurrency C]
 *
 * Loopback only: PostgreSQL at 127.0.0.1:5432 (user postgres), Redis at 127.0.0.1:6379 db 9.
 * The peers are bench/'s own package (bench/package.json), installed the first time a run
 * asks for one; reckon is imported from the repository's src.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { describeHost, HOST_SIZES, measureHost } from './host.js';
import { dropLeftoverDatabases, median, tolerateTeardownTermination } from './lib.js';
import { loadSystems, PeerInstallError, SYSTEM_NAMES } from './systems/all.js';
import { WORKLOADS, type Metrics, type Sizes } from './workloads.js';

const USAGE = `Usage: npm run bench -- [options]

Runs reckon (SQLite and PostgreSQL stores, full journal) and its peers on the same workloads,
interleaved round by round, each on a fresh database; prints medians and reckon's ratio to each
peer. PostgreSQL at 127.0.0.1:5432 (user postgres), Redis at 127.0.0.1:6379 (db 9). Starts by
measuring the host (fsync, single-row durable commits, loopback round trip), so that a run on a
slow host reads as one. The peers are installed into bench/node_modules the first time a run
asks for one (npm ci --prefix bench).

Options:
  --quick                 small sizes and one round (a smoke run, not a measurement)
  --rounds N              rounds per workload (default 3; bulk-loaded workloads run once)
  --systems a,b           systems to run (default: all): ${SYSTEM_NAMES.join(', ')}
  --workloads a,b         workloads to run (default: all): ${WORKLOADS.map((w) => w.name).join(', ')}
  --json                  print the report as JSON on stdout (progress goes to stderr)
  --out FILE              also write the JSON report to FILE (for bench/report.ts)
  --enqueue-jobs N        jobs per enqueue run (default 20000; batched: 5x)
  --process-jobs N        jobs pre-enqueued per processing run (default 100000)
  --latency-jobs N        jobs per latency run, at 200 jobs/s (default 4000)
  --claim-waiting N       jobs waiting in claim-1m (default 1000000)
  --claim-waiting-small N jobs waiting in claim-10k (default 10000)
  --claim-samples N       timed claims per claim run (default 1000)
  --memory-waiting N      jobs waiting in memory-1m (default 1000000)
  --memory-ms N           how long the memory-1m worker runs before it is measured (default 5000)
  --agent-jobs N          jobs per agent-1000 run, each waiting 1-5 s (default 5000)
  --agent-concurrency N   jobs in flight in agent-1000 (default 1000)
  --in-process            run the processing workloads' workers in the bench's own process
                          (by default each system's worker is a process of its own)
  --trace                 instead of the workloads: what one reckon job writes, per phase
                          (PostgreSQL: rows, index entries, WAL records and bytes; SQLite: pages
                          per commit and per job), for the stores --systems names
  --trace-jobs N          jobs traced (default 2000)
  --trace-concurrency C   the traced worker's concurrency (default 50)
  -h, --help              this text
`;

/** A mistake in the command line: said in one line, with no stack. */
class UsageError extends Error {}

interface Args {
  help?: boolean;
  quick: boolean;
  json: boolean;
  out?: string;
  rounds?: number;
  systems?: string[];
  workloads?: string[];
  enqueueJobs?: number;
  processJobs?: number;
  latencyJobs?: number;
  claimWaiting?: number;
  claimWaitingSmall?: number;
  claimSamples?: number;
  memoryWaiting?: number;
  memoryMs?: number;
  agentJobs?: number;
  agentConcurrency?: number;
  inProcess?: boolean;
  trace?: boolean;
  traceJobs?: number;
  traceConcurrency?: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { quick: false, json: false };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const [name, inline] = flag.split('=', 2) as [string, string | undefined];
    const value = () => inline ?? argv[++i] ?? '';
    const int = () => {
      const n = Number(value());
      if (!Number.isInteger(n) || n < 1) throw new UsageError(`${name} takes a positive integer`);
      return n;
    };
    if (name === '--help' || name === '-h') a.help = true;
    else if (name === '--quick') a.quick = true;
    else if (name === '--json') a.json = true;
    else if (name === '--out') a.out = value();
    else if (name === '--rounds') a.rounds = int();
    else if (name === '--systems') a.systems = value().split(',');
    else if (name === '--workloads') a.workloads = value().split(',');
    else if (name === '--enqueue-jobs') a.enqueueJobs = int();
    else if (name === '--process-jobs') a.processJobs = int();
    else if (name === '--latency-jobs') a.latencyJobs = int();
    else if (name === '--claim-waiting') a.claimWaiting = int();
    else if (name === '--claim-waiting-small') a.claimWaitingSmall = int();
    else if (name === '--claim-samples') a.claimSamples = int();
    else if (name === '--memory-waiting') a.memoryWaiting = int();
    else if (name === '--memory-ms') a.memoryMs = int();
    else if (name === '--agent-jobs') a.agentJobs = int();
    else if (name === '--agent-concurrency') a.agentConcurrency = int();
    else if (name === '--in-process') a.inProcess = true;
    else if (name === '--trace') a.trace = true;
    else if (name === '--trace-jobs') a.traceJobs = int();
    else if (name === '--trace-concurrency') a.traceConcurrency = int();
    else throw new UsageError(`unknown flag ${flag} (npm run bench -- --help lists them)`);
  }
  return a;
}

type Results = Record<string, Record<string, Metrics[]>>;

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.help) {
    process.stdout.write(USAGE);
    return;
  }
  const sizes: Sizes = {
    enqueueJobs: args.enqueueJobs ?? (args.quick ? 2_000 : 20_000),
    processJobs: args.processJobs ?? (args.quick ? 5_000 : 100_000),
    latencyJobs: args.latencyJobs ?? (args.quick ? 400 : 4_000),
    latencyRatePerSec: 200,
    // --quick: sizes that load in seconds; the workload names keep saying 10k / 1m.
    claimWaitingSmall: args.claimWaitingSmall ?? (args.quick ? 1_000 : 10_000),
    claimWaitingLarge: args.claimWaiting ?? (args.quick ? 50_000 : 1_000_000),
    // A p99 of 200 samples is their second worst: one SQLite checkpoint more or less in the
    // window moved it 5x. 1,000 steady it, but a p99 ratio still moves with the stalls.
    claimSamples: args.claimSamples ?? (args.quick ? 200 : 1_000),
    claimWarmup: 10,
    memoryWaiting: args.memoryWaiting ?? (args.quick ? 50_000 : 1_000_000),
    memoryMs: args.memoryMs ?? (args.quick ? 2_000 : 5_000),
    callJobs: 1_000,
    inProcess: args.inProcess ?? false,
    agentJobs: args.agentJobs ?? (args.quick ? 2_000 : 5_000),
    agentConcurrency: args.agentConcurrency ?? 1_000,
    agentLeaseMs: 1_000,
    agentWaitMs: [1_000, 5_000],
  };
  const rounds = args.rounds ?? (args.quick ? 1 : 3);
  const systemNames = args.systems ?? SYSTEM_NAMES;
  for (const n of systemNames)
    if (!SYSTEM_NAMES.includes(n)) throw new UsageError(`unknown system ${n}`);
  if (args.trace) return trace(args, systemNames);
  for (const n of args.workloads ?? [])
    if (!WORKLOADS.some((w) => w.name === n)) throw new UsageError(`unknown workload ${n}`);
  const workloads = WORKLOADS.filter((w) => !args.workloads || args.workloads.includes(w.name));
  const log = (m: string) => (args.json ? process.stderr : process.stdout).write(m + '\n');
  const systems = await loadSystems(systemNames, log);
  tolerateTeardownTermination();
  await dropLeftoverDatabases();
  const host = await measureHost(
    args.quick ? { samples: 50, commits: 200, batches: 5 } : HOST_SIZES,
  );
  log(`host: ${describeHost(host)}`);

  // Every (round, workload, system) run, in order: the count and the elapsed time go on each line.
  const plan: { round: number; w: (typeof workloads)[number]; name: string }[] = [];
  for (let round = 0; round < rounds; round++) {
    for (const w of workloads) {
      if (w.firstRoundOnly && round > 0) continue;
      // Rotate the order each round so no system always runs first (or last) on a warm host.
      const order = systemNames.map((_, i) => systemNames[(i + round) % systemNames.length]!);
      for (const name of order)
        if (!w.only || w.only(systems[name]!())) plan.push({ round, w, name });
    }
  }
  const results: Results = {};
  const started = new Date();
  const width = String(plan.length).length;
  for (const [i, { round, w, name }] of plan.entries()) {
    const s = systems[name]!();
    await s.open();
    let m: Metrics;
    try {
      m = await w.run(s, sizes);
    } finally {
      await s.close();
    }
    ((results[w.name] ??= {})[name] ??= []).push(m);
    const elapsed = Math.round((Date.now() - started.getTime()) / 1000);
    const clock = `${Math.floor(elapsed / 60)}:${String(elapsed % 60).padStart(2, '0')}`;
    log(
      `[${String(i + 1).padStart(width)}/${plan.length} ${clock.padStart(5)}] ` +
        `round ${round + 1}/${rounds}  ${w.name.padEnd(20)} ${name.padEnd(16)} ${fmt(m)}`,
    );
  }

  const summary = summarize(results, workloads);
  const report = {
    date: started.toISOString(),
    machine: {
      cpus: cpus().length,
      cpu: cpus()[0]?.model,
      memGiB: Math.round(totalmem() / 2 ** 30),
      node: process.version,
    },
    host,
    rounds,
    sizes,
    command: `npm run bench -- ${process.argv.slice(2).join(' ')}`.trim(),
    medians: summary.medians,
    ratios: summary.ratios,
    claimScaling: summary.claimScaling,
    raw: results,
  };
  if (args.out) writeFileSync(args.out, JSON.stringify(report, null, 2));
  if (args.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  else printSummary(summary, workloads);
}

function fmt(m: Metrics): string {
  return Object.entries(m)
    .map(([k, v]) => `${k}=${v >= 100 ? Math.round(v) : v.toFixed(2)}`)
    .join(' ');
}

const LOWER_IS_BETTER = (workload: string) => /^(latency|claim|memory|call|agent)/.test(workload);

/**
 * --trace: bench/trace.ts for each reckon store named, each in a process of its own (it reads
 * its own CPU time, and takes another checkout's reckon with --src when run by hand).
 */
function trace(args: Args, systemNames: readonly string[]): void {
  const stores = systemNames.filter((n) => n.startsWith('reckon-'));
  if (stores.length === 0)
    throw new UsageError('--trace traces reckon: name reckon-pg or reckon-sqlite');
  const script = fileURLToPath(new URL('./trace.ts', import.meta.url));
  for (const name of stores) {
    const store = name === 'reckon-pg' ? 'postgres' : 'sqlite';
    const jobs = String(args.traceJobs ?? (args.quick ? 500 : 2_000));
    const concurrency = String(args.traceConcurrency ?? 50);
    const argv = [
      '--import',
      'tsx',
      script,
      '--store',
      store,
      '--jobs',
      jobs,
      '--concurrency',
      concurrency,
    ];
    process.stdout.write(`\n== ${name}\n`);
    execFileSync(process.execPath, argv, { stdio: 'inherit' });
  }
}

function summarize(results: Results, workloads: { name: string }[]) {
  const medians: Record<string, Record<string, Metrics>> = {};
  const ratios: Record<string, Record<string, Record<string, number>>> = {};
  for (const w of workloads) {
    const bySystem = results[w.name] ?? {};
    for (const [sys, runs] of Object.entries(bySystem)) {
      const keys = Object.keys(runs[0] ?? {});
      (medians[w.name] ??= {})[sys] = Object.fromEntries(
        keys.map((k) => [k, median(runs.map((r) => r[k]!))]),
      );
    }
    for (const r of Object.keys(bySystem).filter((s) => s.startsWith('reckon-'))) {
      for (const p of Object.keys(bySystem).filter((s) => !s.startsWith('reckon-'))) {
        const a = medians[w.name]![r]!.value!;
        const b = medians[w.name]![p]!.value!;
        // Always "how many times better reckon is": >1 means reckon wins.
        ((ratios[w.name] ??= {})[r] ??= {})[p] = LOWER_IS_BETTER(w.name) ? b / a : a / b;
      }
    }
  }
  // The target: claim latency with 1M waiting within 1.25× of 10k (p50 and p99).
  const claimScaling: Record<string, { p50: number; p99: number }> = {};
  for (const [sys, big] of Object.entries(medians['claim-1m'] ?? {})) {
    const small = medians['claim-10k']?.[sys];
    if (small) claimScaling[sys] = { p50: big.p50! / small.p50!, p99: big.p99! / small.p99! };
  }
  return { medians, ratios, claimScaling };
}

function printSummary(
  s: ReturnType<typeof summarize>,
  workloads: { name: string; unit: string }[],
): void {
  console.log('\nmedians');
  for (const w of workloads) {
    const m = s.medians[w.name];
    if (!m) continue;
    console.log(`  ${w.name} (${w.unit})`);
    for (const [sys, v] of Object.entries(m)) console.log(`    ${sys.padEnd(16)} ${fmt(v)}`);
  }
  const scaling = Object.entries(s.claimScaling);
  if (scaling.length > 0) {
    console.log('\nclaim latency, 1M waiting ÷ 10k waiting (target for reckon: ≤ 1.25×)');
    for (const [sys, r] of scaling)
      console.log(`    ${sys.padEnd(16)} p50 ${r.p50.toFixed(2)}×  p99 ${r.p99.toFixed(2)}×`);
  }
  console.log('\nreckon ÷ peer (>1: reckon better; latency, claim, memory: peer ÷ reckon)');
  for (const w of workloads) {
    const r = s.ratios[w.name];
    if (!r) continue;
    for (const [sys, peers] of Object.entries(r)) {
      const cells = Object.entries(peers).map(([p, x]) => `${p} ${x.toFixed(2)}×`);
      console.log(`  ${w.name.padEnd(20)} ${sys.padEnd(14)} ${cells.join('  ')}`);
    }
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    if (err instanceof UsageError) {
      console.error(`bench: ${err.message}`);
      process.exit(2);
    }
    if (err instanceof PeerInstallError) {
      console.error(`bench: ${err.message}`);
      process.exit(1);
    }
    console.error(err);
    process.exit(1);
  },
);
