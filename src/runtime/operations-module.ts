/**
 * A module of the user's operations, loaded from a path resolved against the current directory:
 * the CLI's `--operations`, a chaos run's and a worker child's. Every operation it exports
 * counts: named exports, and a default export that is one operation, an array of them, or an
 * object whose values are operations.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { errorMessage, OperationsModuleError } from '../core/errors.js';
import { isOperation, type AnyOperation } from '../core/operation.js';
import { isSchedule, type Schedule } from '../core/schedule.js';

export async function loadOperations(spec: string): Promise<AnyOperation[]> {
  const path = resolve(process.cwd(), spec);
  if (!existsSync(path))
    throw new OperationsModuleError(
      'OPERATIONS_MODULE_NOT_FOUND',
      `operations module not found: ${path}`,
      path,
    );
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (err) {
    const hint =
      (err as { code?: unknown }).code === 'ERR_UNKNOWN_FILE_EXTENSION'
        ? ' (run node with a TypeScript loader, e.g. node --import tsx, or point at the compiled .js)'
        : '';
    throw new OperationsModuleError(
      'OPERATIONS_MODULE_FAILED',
      `cannot load operations module ${path}: ${errorMessage(err)}${hint}`,
      path,
    );
  }
  const ops = operationsOf(mod, path);
  if (ops.length === 0)
    throw new OperationsModuleError(
      'NO_OPERATIONS',
      `${path} exports no operations: export the values made by defineOperation(), ` +
        'as named exports or as a default export (one operation, or an array of them)',
      path,
    );
  return ops;
}

/** The distinct operations among a module's exports, by name; two different ones with one name is an error. */
export function operationsOf(mod: Record<string, unknown>, path = '(module)'): AnyOperation[] {
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
      throw new OperationsModuleError(
        'DUPLICATE_OPERATION',
        `the operations module exports two different operations named ${c.name}`,
        path,
      );
    byName.set(c.name, c);
  }
  return [...byName.values()];
}

/**
 * The schedules (`defineSchedule`) an operations module exports, named or in its default export
 * (an array or an object of them): `reckon work` and worker children tick them.
 */
export async function loadSchedules(spec: string): Promise<Schedule[]> {
  const path = resolve(process.cwd(), spec);
  // Already loaded by loadOperations: the module cache answers.
  const mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  const found = new Map<string, Schedule>();
  for (const [name, value] of Object.entries(mod)) {
    const values =
      name === 'default' && typeof value === 'object' && value !== null
        ? Object.values(value as Record<string, unknown>)
        : [value];
    for (const v of values) if (isSchedule(v)) found.set(v.name, v);
  }
  return [...found.values()];
}
