/**
 * Exit codes and error reporting: one rule for every command.
 *
 *   0   done; also `work` after a graceful stop
 *   1   reckon refused or failed the request (a ReckonError: its `code` says which)
 *   2   a check failed: `status` found the store unhealthy, `demo` or `chaos` saw a violation
 *   3 / 4 / 5  `call`: the job FAILED / was CANCELLED / has no outcome yet (OUTCOME_PENDING)
 *   64  the command line is wrong (unknown option, missing argument, bad value), as sysexits
 *   70  internal error: a bug in reckon (printed with its stack)
 *   130 / 143  `work` got a second SIGINT / SIGTERM and exited at once
 *
 * Errors go to stderr as `reckon: <message> [CODE]`. With `--json`, stdout carries exactly one
 * JSON document in every case: the result, or `{ "error": { code, message, details? } }`.
 */
import { CommanderError } from 'commander';
import { OperationsModuleError, ReckonError } from '../core/errors.js';

export const EXIT = {
  ok: 0,
  error: 1,
  unhealthy: 2,
  callFailed: 3,
  callCancelled: 4,
  callPending: 5,
  usage: 64,
  internal: 70,
} as const;

/** The command line cannot be carried out as written. Exit 64. */
export class UsageError extends ReckonError {
  constructor(message: string, code = 'USAGE') {
    super(code, message);
  }
}

/** Shown in every command's help, so the conventions are one `--help` away. */
export const EXIT_HELP = `
Exit codes:
  0    done
  1    reckon refused or failed the request (the error's code says why)
  2    a check failed (status: unhealthy; demo, chaos: duplicates or lost jobs)
  3    call: the job FAILED (4: CANCELLED; 5: no outcome yet, OUTCOME_PENDING)
  64   usage error: unknown option, missing argument, bad value
  70   internal error (a bug; reported with a stack trace)
  130  work: second Ctrl-C, exited without waiting (143 for SIGTERM)

Errors are printed on stderr as "reckon: <message> [CODE]". With --json, stdout
always holds exactly one JSON document: the result, or
{ "error": { "code": "...", "message": "..." } } when the command failed.`;

/** The same, in two lines, for each command's help. */
export const EXIT_SHORT_HELP =
  'Exit codes: 0 done, 1 failed (see the error code), 2 check failed, 64 usage error,\n' +
  '70 internal error. With --json, errors are { "error": { code, message } } on stdout.';

interface ErrorReport {
  exitCode: number;
  code: string;
  message: string;
  details?: Record<string, unknown>;
  stack?: string;
}

export function describeError(err: unknown): ErrorReport {
  if (err instanceof CommanderError) {
    return {
      exitCode: err.exitCode === 0 ? EXIT.ok : EXIT.usage,
      code: 'USAGE',
      message: err.message.replace(/^error: /, ''),
    };
  }
  // A bad --operations module is a bad value on the command line, whoever loaded it.
  if (err instanceof UsageError || err instanceof OperationsModuleError)
    return { exitCode: EXIT.usage, code: err.code, message: err.message };
  if (err instanceof ReckonError) {
    const details = Object.fromEntries(
      Object.entries(err).filter(
        ([k]) => !['name', 'message', 'code', 'stack', 'cause'].includes(k),
      ),
    );
    return {
      exitCode: EXIT.error,
      code: err.code,
      message: err.message,
      ...(Object.keys(details).length > 0 ? { details } : {}),
    };
  }
  const e = err instanceof Error ? err : new Error(String(err));
  return {
    exitCode: EXIT.internal,
    code: 'INTERNAL',
    message: `internal error: ${e.message}`,
    ...(e.stack ? { stack: e.stack } : {}),
  };
}

/** Prints the error by the rule above and returns the exit code. */
export function reportError(err: unknown, json: boolean): number {
  const r = describeError(err);
  if (r.exitCode === EXIT.ok) return EXIT.ok; // --help / --version through exitOverride
  // Commander has already printed its own usage message on stderr.
  if (!(err instanceof CommanderError)) {
    process.stderr.write(`reckon: ${r.message} [${r.code}]\n`);
    if (r.stack) process.stderr.write(`${r.stack}\n`);
  }
  if (json) {
    const error = {
      code: r.code,
      message: r.message,
      ...(r.details ? { details: r.details } : {}),
    };
    process.stdout.write(`${JSON.stringify({ error }, null, 2)}\n`);
  }
  return r.exitCode;
}
