/**
 * `reckon tokens create|list|revoke`: the named tokens `reckon serve` accepts. A token is printed
 * once, when it is made; the store keeps only its SHA-256 hash.
 */
import { Option, type Command } from 'commander';
import { v7 as uuidv7 } from 'uuid';
import { TokenNotFound } from '../../core/errors.js';
import { newToken, tokenHash } from '../../server/auth.js';
import { ROLES } from '../../server/principal.js';
import type { TokenRecord } from '../../store/store.js';
import { UsageError } from '../exit.js';
import { cliVia } from '../os-user.js';
import { formatTime, printJson, println, table } from '../output.js';
import { listOption } from '../parse.js';
import { addJsonOption, addStoreOption, withQueue, type StoreFlags } from '../store-option.js';
import { durationOption } from './call.js';

interface CreateFlags extends StoreFlags {
  role: string;
  operations?: string[];
  grant?: string[];
  expires?: number;
  json?: boolean;
}

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$/;

export function registerTokens(program: Command): void {
  const tokens = program
    .command('tokens')
    .summary('named tokens for reckon serve: create, list, revoke')
    .description(
      'Each person or program that uses the HTTP API or the console gets its own token, with a ' +
        'role: viewer (reads; inputs and results redacted unless --grant inputs), producer ' +
        '(enqueue, call, read its own jobs), approver (approve or deny, optionally only some ' +
        'operations), reviewer (resolve NEEDS_REVIEW jobs), admin (everything). Every decision ' +
        'over HTTP records the token that made it. The store keeps only a SHA-256 hash.',
    );

  registerCreate(tokens);
  registerListAndRevoke(tokens);
}

function registerCreate(tokens: Command): void {
  const create = tokens
    .command('create')
    .summary('make a token and print it once')
    .argument('<name>', 'who or what uses it (recorded with every decision it makes)')
    .addOption(new Option('--role <role>', 'what it may do').choices(ROLES).makeOptionMandatory())
    .option(
      '--operations <names>',
      'approver, reviewer: only these operations (comma list)',
      listOption,
    )
    .option(
      '--grant <rights>',
      'extra rights: inputs (a viewer sees inputs and results)',
      listOption,
    )
    .option(
      '--expires <duration>',
      'expires after this long: 12h, 30d (default: never)',
      durationOption,
    )
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  $ reckon tokens create alice --role approver --operations payments.refund\n' +
        '  $ reckon tokens create agent-7 --role producer --expires 30d --json',
    );
  addStoreOption(create);
  addJsonOption(create, 'print { token, id, name, role, … } as JSON');
  create.action(async (name: string, flags: CreateFlags) => {
    if (!NAME_RE.test(name))
      throw new UsageError(
        `token name ${JSON.stringify(name)} is invalid: 1-100 letters, digits, . _ @ -`,
      );
    for (const g of flags.grant ?? [])
      if (g !== 'inputs')
        throw new UsageError(`unknown grant ${JSON.stringify(g)}; grants: inputs`);
    const token = newToken();
    const record = await withQueue(flags.store, { mustExist: true }, (q) =>
      q.store.tokenInsert({
        id: uuidv7(),
        name,
        role: flags.role,
        operations: flags.operations ?? null,
        grants: flags.grant ?? [],
        hash: tokenHash(token),
        createdBy: cliVia(),
        expiresInMs: flags.expires ?? null,
      }),
    );
    if (flags.json) return printJson({ token, ...record });
    println(token);
    process.stderr.write(
      `reckon: token ${name} (${record.role}) created; it is shown only now. ` +
        'Send it as Authorization: Bearer <token>, or sign in to the console with it.\n',
    );
  });
}

function registerListAndRevoke(tokens: Command): void {
  const list = tokens.command('list').summary('live tokens (never the tokens themselves)');
  list.option('--all', 'revoked ones too');
  addStoreOption(list);
  addJsonOption(list, 'print [{ id, name, role, operations, … }] as JSON');
  list.action(async (flags: StoreFlags & { all?: boolean; json?: boolean }) => {
    const items = await withQueue(flags.store, { mustExist: true }, (q) =>
      q.store.tokenList({ includeRevoked: flags.all === true }),
    );
    if (flags.json) return printJson(items);
    if (items.length === 0) return println('no tokens (reckon tokens create <name> --role …)');
    println(table(['name', 'role', 'operations', 'created', 'expires', 'revoked'], items.map(row)));
  });

  const revoke = tokens
    .command('revoke')
    .summary('revoke a token: its requests and sessions are refused at once')
    .argument('<name>', 'the token name');
  addStoreOption(revoke);
  addJsonOption(revoke, 'print the revoked token as JSON');
  revoke.action(async (name: string, flags: StoreFlags & { json?: boolean }) => {
    const record = await withQueue(flags.store, { mustExist: true }, (q) =>
      q.store.tokenRevoke({ name }),
    );
    if (!record) throw new TokenNotFound(name);
    if (flags.json) return printJson(record);
    println(`token ${name} revoked`);
  });
}

function row(t: TokenRecord): string[] {
  return [
    t.name,
    t.role + (t.grants.length ? ` +${t.grants.join(',')}` : ''),
    t.operations?.join(',') ?? 'all',
    formatTime(t.createdAt),
    t.expiresAt === null ? 'never' : formatTime(t.expiresAt),
    t.revokedAt === null ? '-' : formatTime(t.revokedAt),
  ];
}
