/**
 * A chaos run against YOUR operations and YOUR downstream (docs/chaos.md):
 *
 *   npm run build && node examples/chaos/run.js [jobs] [seed]
 *
 * Prints the closing table (or, with --json, the report) and exits 2 on any violation.
 */
import process from 'node:process';
import { URL, fileURLToPath } from 'node:url';
import { runChaos, renderChaosReport } from 'reckon/testkit';
import { startPaymentsService } from './payments-service.js';

const [jobs = 60, seed = 1] = process.argv
  .slice(2)
  .filter((a) => !a.startsWith('--'))
  .map(Number);
const json = process.argv.includes('--json');

const payments = await startPaymentsService();
// The parent process loads the module too (it enqueues with the operations' fingerprints).
process.env.PAYMENTS_URL = payments.url;
try {
  const report = await runChaos({
    jobs,
    seed,
    workers: 3,
    operationsModule: fileURLToPath(new URL('./operations.js', import.meta.url)),
    workerEnv: { PAYMENTS_URL: payments.url },
    workload: ({ jobs, random, runTag }) =>
      Array.from({ length: jobs }, (_, n) => ({
        operation: 'example.charge',
        input: { customer: `cus_${n}`, amountCents: 100 + Math.floor(random() * 9_900) },
        key: `order-${runTag}-${n}:charge`,
      })),
    // The business truth: how many times the service charged each request key.
    ledger: (requestKey) => payments.chargesOf(requestKey),
    kills: { everyMs: 400 },
  });
  process.stdout.write(
    json ? `${JSON.stringify(report, null, 2)}\n` : renderChaosReport(report, false),
  );
  process.exitCode = report.ok ? 0 : 2;
} finally {
  await payments.close();
}
