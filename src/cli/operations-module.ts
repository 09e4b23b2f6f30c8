/**
 * `--operations <module>`: the user's operations, loaded from a module resolved against the
 * current directory. Every operation it exports counts: named exports, and a default export
 * that is one operation, an array of them, or an object whose values are operations.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { errorMessage } from '../core/errors.js';
import { isOperation, type AnyOperation } from '../core/operation.js';
import { UsageError } from './exit.js';

export const OPERATIONS_HELP =
  'module that exports your operations (made by defineOperation), as a path from the current directory; ' +
  'a .ts module needs a TypeScript loader, e.g. node --import tsx';

export async function loadOperations(spec: string): Promise<AnyOperation[]> {
  const path = resolve(process.cwd(), spec);
  if (!existsSync(path))
    throw new UsageError(`operations module not found: ${path}`, 'OPERATIONS_MODULE_NOT_FOUND');
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (err) {
    const hint =
      (err as { code?: unknown }).code === 'ERR_UNKNOWN_FILE_EXTENSION'
        ? ' (run node with a TypeScript loader, e.g. node --import tsx, or point at the compiled .js)'
        : '';
    throw new UsageError(
      `cannot load operations module ${path}: ${errorMessage(err)}${hint}`,
      'OPERATIONS_MODULE_FAILED',
    );
  }
  const ops = operationsOf(mod);
  if (ops.length === 0)
    throw new UsageError(
      `${path} exports no operations: export the values made by defineOperation(), ` +
        'as named exports or as a default export (one operation, or an array of them)',
      'NO_OPERATIONS',
    );
  return ops;
}

/** The distinct operations among a module's exports, by name; two different ones with one name is an error. */
export function operationsOf(mod: Record<string, unknown>): AnyOperation[] {
  const candidates: unknown[] = [];
  for (const [name, value] of Object.entries(mod)) {
    if (name !== 'default') candidates.push(value);
    else if (Array.isArray(value)) candidates.push(...(value as unknown[]));
    else if (isOperation(value)) candidates.push(value);
    else if (typeof value === 'object' && value !== null)
      candidates.push(...Object.values(value as Record<string, unknown>));
  }
  const byName = new Map<string, AnyOperation>();
  for (const c of candidates) {
    if (!isOperation(c)) continue;
    const seen = byName.get(c.name);
    if (seen && seen !== c)
      throw new UsageError(
        `the operations module exports two different operations named ${c.name}`,
        'DUPLICATE_OPERATION',
      );
    byName.set(c.name, c);
  }
  return [...byName.values()];
}
