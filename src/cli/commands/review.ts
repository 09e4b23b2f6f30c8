/**
 * `reckon review list|resolve`: jobs no automatic path can settle, and a person's decision.
 */
import { cliDecisionBy } from '../os-user.js';
import { Option, type Command } from 'commander';
import type { ReviewDecision } from '../../runtime/review.js';
import type { JobDetail } from '../../store/store.js';
import { brief, formatTime, printJson, println, table } from '../output.js';
import { intOption } from '../parse.js';
import { addJsonOption, addStoreOption, withQueue, type StoreFlags } from '../store-option.js';

interface ListFlags extends StoreFlags {
  operation?: string;
  limit: number;
  json?: boolean;
}

interface ResolveFlags extends StoreFlags {
  as: ReviewDecision;
  actor: string;
  note?: string;
  json?: boolean;
}

/** The evidence a reviewer reads first. */
export interface ReviewEvidence {
  lastAttemptNo: number | null;
  lastAttemptState: string | null;
  dispatchedAt: number | null;
  reason: string | null;
  error: string | null;
  why: string;
}

export function registerReview(program: Command): void {
  const review = program
    .command('review')
    .summary('jobs that need a person to decide what happened')
    .description(
      'A job is NEEDS_REVIEW when its request may have reached the downstream, the result is ' +
        'not known, and no automatic path (lookup, same-key retry) can prove what happened. ' +
        'Check the downstream yourself, then record the decision with `review resolve`.',
    );

  registerReviewList(review);

  const resolve = review
    .command('resolve')
    .summary("record a person's decision: succeeded, failed or retry")
    .description(
      "Records a person's decision about a NEEDS_REVIEW (or UNKNOWN) job in the journal, " +
        'with who decided and why:\n\n' +
        '  succeeded  it happened (you checked the downstream): the job succeeds\n' +
        '  failed     it did not happen and must not: the job fails\n' +
        '  retry      it did not happen: run it again, with the same request key',
    )
    .argument('<id>', 'the job id')
    .addOption(
      new Option('--as <decision>', 'what happened')
        .choices(['succeeded', 'failed', 'retry'])
        .makeOptionMandatory(),
    )
    .requiredOption('--actor <name>', 'who decided (kept as operator:<name>)')
    .option('--note <text>', 'the evidence you based the decision on')
    .addHelpText(
      'after',
      '\nExample:\n  $ reckon review resolve 0190… --as succeeded --actor alice --note "charge ch_123 in the Stripe dashboard"',
    );
  addStoreOption(resolve);
  addJsonOption(resolve, 'print the job after the decision as JSON');
  resolve.action(async (id: string, flags: ResolveFlags) => {
    const job = await withQueue(flags.store, { mustExist: true }, (q) =>
      q.review.resolve(id, {
        as: flags.as,
        by: cliDecisionBy(flags.actor),
        ...(flags.note !== undefined ? { note: flags.note } : {}),
      }),
    );
    if (flags.json) return printJson(job);
    println(
      `job ${job.id} resolved as ${flags.as} by operator:${flags.actor.trim()}; now ${job.state}`,
    );
  });
}

/** `reckon review list`. */
function registerReviewList(review: Command): void {
  const list = review
    .command('list')
    .summary('jobs waiting for a decision, with their evidence')
    .description('Lists NEEDS_REVIEW jobs, oldest first, with the evidence to decide on.')
    .option('--operation <name>', 'only this operation')
    .option('--limit <n>', 'at most this many jobs', intOption(1, 10_000), 100);
  addStoreOption(list);
  addJsonOption(list, 'print [{ job, attempts, events, evidence }] as JSON');
  list.action(async (flags: ListFlags) => {
    const details = await withQueue(flags.store, { mustExist: true }, (q) =>
      q.review.list({
        limit: flags.limit,
        ...(flags.operation ? { operation: flags.operation } : {}),
      }),
    );
    const items = details.map((d) => ({ ...d, evidence: evidenceOf(d) }));
    if (flags.json) return printJson(items);
    if (items.length === 0) return println('nothing to review');
    println(
      table(
        ['id', 'operation', 'request key', 'last attempt', 'dispatched at', 'why'],
        items.map(({ job, evidence: e }) => [
          job.id,
          job.operation,
          brief(job.requestKey, 30),
          e.lastAttemptNo === null
            ? '-'
            : `#${e.lastAttemptNo} ${e.lastAttemptState ?? ''}${e.reason ? ` (${e.reason})` : ''}${e.error ? `\n${brief(e.error, 50)}` : ''}`,
          formatTime(e.dispatchedAt),
          brief(e.why, 70),
        ]),
      ),
    );
    println(
      `${items.length} job(s) to review. Decide with: reckon review resolve <id> --as succeeded|failed|retry --actor <you>`,
    );
  });
}

export function evidenceOf({ job, attempts, events }: JobDetail): ReviewEvidence {
  const last = attempts.at(-1);
  const escalation = [...events].reverse().find((e) => e.toState === 'NEEDS_REVIEW');
  const detail = (escalation?.detail ?? {}) as Record<string, unknown>;
  const why =
    typeof detail.why === 'string'
      ? detail.why
      : typeof detail.reason === 'string'
        ? detail.reason
        : escalation
          ? `${escalation.kind} by ${escalation.actor}`
          : `job is ${job.state}`;
  return {
    lastAttemptNo: last?.attemptNo ?? null,
    lastAttemptState: last?.state ?? null,
    dispatchedAt: last?.dispatchedAt ?? null,
    reason: last?.reason ?? null,
    error: last?.error ? `${last.error.name}: ${last.error.message}` : null,
    why,
  };
}
