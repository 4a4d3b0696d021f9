// The database a benchmark's Berth runs on: PGlite in its data folder, as `npm start` has it, or,
// with BENCH_DATABASE_URL, a fresh schema of that PostgreSQL, dropped afterwards.
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export interface BenchDatabase {
  /** What to add to Berth's environment. */
  env: Record<string, string>;
  /** Which one, for the report. */
  label: string;
  drop(): Promise<void>;
}

export function benchDatabase(): BenchDatabase {
  const url = process.env.BENCH_DATABASE_URL;
  if (!url) return { env: {}, label: 'PGlite', drop: async () => undefined };
  const schema = `berth_bench_${randomBytes(4).toString('hex')}`;
  return {
    env: { DATABASE_URL: url, DATABASE_SCHEMA: schema },
    label: 'PostgreSQL',
    async drop() {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    },
  };
}
