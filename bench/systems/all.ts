/** Every system the bench knows, by the name --systems takes. */
import { BullMqSystem } from './bullmq.js';
import { GraphileSystem } from './graphile.js';
import { PgBossSystem } from './pgboss.js';
import { ReckonSystem } from './reckon.js';
import type { BenchSystem } from './system.js';

export const ALL_SYSTEMS: Record<string, () => BenchSystem> = {
  'reckon-sqlite': () => new ReckonSystem('sqlite'),
  'reckon-pg': () => new ReckonSystem('postgres'),
  'pg-boss': () => new PgBossSystem(),
  'graphile-worker': () => new GraphileSystem(),
  bullmq: () => new BullMqSystem(),
};
