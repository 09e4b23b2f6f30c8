#!/usr/bin/env node
/**
 * The `reckon` command line (DESIGN §5). One file per command under ./commands; the rules
 * for exit codes and errors are in ./exit.ts and printed by `reckon --help`.
 */
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { registerBackup } from './commands/backup.js';
import { registerCall } from './commands/call.js';
import { registerApprovals } from './commands/approvals.js';
import { registerChaos } from './commands/chaos.js';
import { registerSim } from './commands/sim.js';
import { registerDemo } from './commands/demo.js';
import { registerEnqueue } from './commands/enqueue.js';
import { registerInit } from './commands/init.js';
import { registerJobs } from './commands/jobs.js';
import { registerPrune } from './commands/prune.js';
import { registerRestore } from './commands/restore.js';
import { registerMcp } from './commands/mcp.js';
import { registerReview } from './commands/review.js';
import { registerServe } from './commands/serve.js';
import { registerStatus } from './commands/status.js';
import { registerWork } from './commands/work.js';
import { EXIT_HELP, EXIT_SHORT_HELP, reportError } from './exit.js';

function version(): string {
  // ../../package.json from both src/cli (tsx) and dist/cli (built).
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

export function buildProgram(): Command {
  const program = new Command('reckon')
    .description(
      'reckon: a durable job queue and execution journal for side effects.\n\n' +
        'Every job records whether it was accepted, whether its request left (dispatch), what ' +
        'the downstream answered, and how a crash was reconciled, so recovery proves what ' +
        'happened instead of guessing. Start with `reckon init`, then `reckon enqueue` and ' +
        '`reckon work`; `reckon demo` shows it all against a fake downstream.',
    )
    .version(version(), '-V, --version', 'print the reckon version')
    .helpOption('-h, --help', 'show help for a command')
    .showSuggestionAfterError()
    .exitOverride()
    .configureOutput({
      outputError: (message, write) => write(`reckon: ${message.replace(/^error: /, '')}`),
    })
    .addHelpText(
      'after',
      '\nThe store: --store <url> on each command, else RECKON_STORE, else sqlite:./reckon.db.\n' +
        EXIT_HELP,
    );
  // Subcommands made by .command() inherit exitOverride and the output settings above.
  registerInit(program);
  registerEnqueue(program);
  registerCall(program);
  registerWork(program);
  registerJobs(program);
  registerReview(program);
  registerApprovals(program);
  registerStatus(program);
  registerServe(program);
  registerPrune(program);
  registerBackup(program);
  registerRestore(program);
  registerMcp(program);
  registerDemo(program);
  registerChaos(program);
  registerSim(program);
  for (const leaf of leaves(program)) leaf.addHelpText('after', `\n${EXIT_SHORT_HELP}`);
  return program;
}

function leaves(cmd: Command): Command[] {
  return cmd.commands.length === 0 ? [cmd] : cmd.commands.flatMap(leaves);
}

/** Was JSON output asked for? Read from argv so that usage errors are JSON too. */
function wantsJson(argv: string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--json');
}

async function main(argv: string[]): Promise<void> {
  // `reckon jobs list | head`: a closed pipe ends the output, it is not an error.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    process.exit(process.exitCode ?? 0);
  });
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    process.exitCode = reportError(err, wantsJson(argv));
  }
}

await main(process.argv);
