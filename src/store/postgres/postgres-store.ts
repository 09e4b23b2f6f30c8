/** Placeholder until the PostgreSQL store lands (issue 3). */
import { StoreUnavailable } from '../../core/errors.js';

export class PostgresStore {
  constructor(_options: { connectionString: string; schema?: string; poolMax?: number }) {
    throw new StoreUnavailable('the PostgreSQL store is not built yet');
  }
}
