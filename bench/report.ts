/**
 * Turns a `npm run bench -- --out results.json` file into the Markdown tables and the mermaid
 * chart of docs/benchmarks.md:  npx tsx bench/report.ts results.json
 */
import { readFileSync } from 'node:fs';
import { describeHost, type HostLimits } from './host.js';

interface Report {
  date: string;
  machine: { cpus: number; cpu?: string; memGiB: number; node: string };
  /** Absent from runs before the bench measured its host. */
  host?: HostLimits;
  rounds: number;
  sizes: Record<string, number>;
  command: string;
  medians: Record<string, Record<string, Record<string, number>>>;
  ratios: Record<string, Record<string, Record<string, number>>>;
  claimScaling?: Record<string, { p50: number; p99: number }>;
}

const r = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Report;
const systems = ['reckon-sqlite', 'reckon-pg', 'pg-boss', 'graphile-worker', 'bullmq', 'dbos'];
const fmt = (v: number | undefined) =>
  v === undefined || Number.isNaN(v)
    ? '—'
    : v >= 100
      ? Math.round(v).toLocaleString('en')
      : v.toFixed(2);

const out: string[] = [];
out.push(
  `Run of ${r.date}: \`${r.command}\`; ${r.rounds} rounds, sizes ${JSON.stringify(r.sizes)};`,
);
out.push(
  `${r.machine.cpus} × ${r.machine.cpu ?? 'cpu'}, ${r.machine.memGiB} GiB, Node ${r.machine.node}.`,
);
if (r.host) out.push(`Host: ${describeHost(r.host)}.`);
out.push('');
out.push(`| workload | ${systems.join(' | ')} |`);
out.push(`|---|${systems.map(() => '---:').join('|')}|`);
for (const [w, bySys] of Object.entries(r.medians)) {
  const cell = (s: string) => {
    const m = bySys[s];
    if (!m) return '—';
    if (w.startsWith('claim')) return `${fmt(m.p50)} / ${fmt(m.p99)}`;
    if (w.startsWith('memory')) return `${fmt(m.rssMB)} (heap ${fmt(m.heapUsedMB)})`;
    if (w.startsWith('agent')) return `${fmt(m.value)} s (${fmt(m.overIdeal)}× ideal)`;
    if (w.startsWith('latency'))
      return (
        `${fmt(m.pickupP50)} / ${fmt(m.pickupP99)}` +
        (m.e2eP50 !== undefined ? ` (e2e ${fmt(m.e2eP50)} / ${fmt(m.e2eP99)})` : '')
      );
    return fmt(m.value);
  };
  out.push(`| ${w} | ${systems.map(cell).join(' | ')} |`);
}
out.push('');
out.push(
  'Latency and claim cells: p50 / p99 in ms; memory: worker RSS in MB (V8 heap used in MB); ' +
    'agent: completion time (÷ the ideal).',
);
out.push('');
agentTable();
const scaling = Object.entries(r.claimScaling ?? {});
if (scaling.length > 0) {
  out.push('Claim latency, 1M waiting ÷ 10k waiting (target for reckon: ≤ 1.25×):');
  out.push('');
  out.push(`| | ${systems.join(' | ')} |`);
  out.push(`|---|${systems.map(() => '---:').join('|')}|`);
  for (const k of ['p50', 'p99'] as const)
    out.push(
      `| ${k} | ${systems.map((s) => (r.claimScaling?.[s] ? `${r.claimScaling[s][k].toFixed(2)}×` : '—')).join(' | ')} |`,
    );
  out.push('');
}
out.push(
  'Ratios, reckon ÷ peer (> 1: reckon better; for latency, claim and memory, peer ÷ reckon at p50 / RSS):',
);
out.push('');
const peers = systems.filter((s) => !s.startsWith('reckon'));
out.push(`| workload | reckon store | ${peers.join(' | ')} |`);
out.push(`|---|---|${peers.map(() => '---:').join('|')}|`);
for (const [w, byR] of Object.entries(r.ratios))
  for (const [rs, byP] of Object.entries(byR))
    out.push(
      `| ${w} | ${rs} | ${peers.map((p) => (byP[p] === undefined ? '—' : `${byP[p].toFixed(2)}×`)).join(' | ')} |`,
    );
out.push('');
// Mermaid xychart bars overlap rather than group, so each chart has one series: reckon's ratio
// to the fastest peer it is compared with (all peers for SQLite; PostgreSQL peers for reckon-pg).
const tp = Object.keys(r.medians).filter((w) => /^(enqueue|process)/.test(w));
const PG_PEERS = ['pg-boss', 'graphile-worker', 'dbos'];
for (const [rs, against] of tp.length === 0
  ? []
  : ([
      ['reckon-sqlite', peers],
      ['reckon-pg', PG_PEERS],
    ] as const)) {
  const ratios = tp.map((w) => {
    const mine = r.medians[w]?.[rs]?.value ?? 0;
    const best = Math.max(...against.map((p) => r.medians[w]?.[p]?.value ?? 0));
    return best > 0 ? mine / best : 0;
  });
  out.push('```mermaid');
  out.push('xychart-beta');
  out.push(
    `  title "${rs} ÷ fastest ${rs === 'reckon-pg' ? 'PostgreSQL ' : ''}peer (1.0 = parity)"`,
  );
  out.push(`  x-axis [${tp.map((w) => `"${w}"`).join(', ')}]`);
  out.push(`  y-axis "ratio" 0 --> ${Math.max(1.5, Math.ceil(Math.max(...ratios) * 2) / 2)}`);
  out.push(`  bar [${ratios.map((x) => x.toFixed(2)).join(', ')}]`);
  out.push(`  line [${ratios.map(() => '1').join(', ')}]`);
  out.push('```');
  out.push('');
}
console.log(out.join('\n'));

/** The agent workload's own table: time against the ideal, CPU per job, the store's writes. */
function agentTable(): void {
  const a = r.medians['agent-1000'];
  if (!a) return;
  out.push(
    'agent-1000: completion against the ideal (total wait ÷ concurrency), handlers started ' +
      "again (a lease lost), the worker process's CPU per job, and the store's writes per second (PostgreSQL: commits, read-only " +
      "ones included, and rows written in the run's database; Redis: commands; SQLite: KB the " +
      'worker process wrote to disk):',
  );
  out.push('');
  out.push(
    '| system | completion s | ideal s | × ideal | peak in flight | restarts | CPU µs/job | store writes/s |',
  );
  out.push('|---|---:|---:|---:|---:|---:|---:|---|');
  for (const sys of systems) {
    const m = a[sys];
    if (!m) continue;
    const writes = [
      m.commitsPerS !== undefined ? `${fmt(m.commitsPerS)} commits` : '',
      m.rowWritesPerS !== undefined ? `${fmt(m.rowWritesPerS)} rows` : '',
      m.redisCommandsPerS !== undefined ? `${fmt(m.redisCommandsPerS)} commands` : '',
      m.diskKBPerS !== undefined ? `${fmt(m.diskKBPerS)} KB` : '',
    ].filter((x) => x !== '');
    out.push(
      `| ${sys} | ${fmt(m.value)} | ${fmt(m.idealS)} | ${fmt(m.overIdeal)} | ${fmt(m.peakInFlight)} | ` +
        `${fmt(m.restarts)} | ` +
        `${fmt(m.cpuUsPerJob)} | ${writes.join(', ')} |`,
    );
  }
  out.push('');
}
