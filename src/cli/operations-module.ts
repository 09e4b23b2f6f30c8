/**
 * `--operations <module>`: the user's operations. The loader lives in the runtime (the testkit's
 * chaos runs and worker children use it too); its errors exit 64, as usage errors (exit.ts).
 */
export { loadOperations, loadSchedules } from '../runtime/operations-module.js';

export const OPERATIONS_HELP =
  'module that exports your operations (made by defineOperation), as a path from the current directory; ' +
  'a .ts module needs a TypeScript loader, e.g. node --import tsx';
