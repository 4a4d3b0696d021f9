import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { Prisma as P, PrismaClient } from '../../generated/prisma/client';
import { applyMigrations } from './migrate';
import { PGliteSession } from './pglite-stream';

export type Prisma = PrismaClient;
/** The client inside `prisma.$transaction(async (tx) => …)`. */
export type Tx = Omit<PrismaClient, '$connect' | '$disconnect' | '$on' | '$transaction' | '$extends'>;

export interface Database {
  prisma: PrismaClient;
  /** Raw pool for what Prisma does not express (LISTEN, advisory locks, SKIP LOCKED claims). */
  pool: pg.Pool;
  kind: 'pglite' | 'postgres';
  /** Migrations applied by this start. */
  applied: string[];
  close(): Promise<void>;
}

export interface DatabaseOptions {
  dataDir: string;
  databaseUrl?: string;
  schema?: string;
  /** Pool size for a real PostgreSQL. */
  poolSize?: number;
}

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * The embedded PostgreSQL's settings beyond PGlite's defaults. PGlite's postgresql.conf asks for
 * the server default shared_buffers of 128MB, and PGlite touches its shared memory at start, so
 * all of it is resident from the first second. Berth's embedded database is small (artifact bytes
 * live in the blob store): 16MB caches 2,048 pages, a page missing from it is read back from the
 * operating system's cache, and wal_buffers follows at 1/32 of it. Measured in docs/benchmarks.md.
 */
export const PGLITE_SETTINGS: Readonly<Record<string, string>> = { shared_buffers: '16MB' };

/** PGlite's start parameters with PGLITE_SETTINGS appended (`-c name=value` each). */
export function pgliteStartParams(): string[] {
  return [...PGlite.defaultStartParams, ...Object.entries(PGLITE_SETTINGS).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
}

/**
 * A pg Pool whose `query()` keeps the connection after a failed statement. pg-pool's own `query()`
 * releases the client *with the error*, which destroys the connection, though a statement error
 * (an ErrorResponse followed by ReadyForQuery) leaves the session healthy. On PostgreSQL that only
 * costs a reconnect; the embedded PGlite is one session, which a replacement connection must
 * first reset (pglite-stream.ts), dropping every prepared statement. Connections that are really broken are still
 * dropped: pg-pool removes a released client that is no longer queryable.
 * Prisma's adapter sends every query outside a transaction through `pool.query()`.
 */
export class StatementSafePool extends pg.Pool {
  // biome-ignore lint/suspicious/noExplicitAny: the override must accept every overload of pg's query().
  override query(...args: any[]): any {
    const callback = typeof args.at(-1) === 'function' ? (args.pop() as (err: unknown, res?: unknown) => void) : undefined;
    const result = this.connect().then(async (client) => {
      // A connection error is also emitted as 'error' on the client; unheard, it would crash the process.
      const onError = () => undefined;
      client.on('error', onError);
      try {
        return await client.query(...(args as [string]));
      } finally {
        client.off('error', onError);
        client.release();
      }
    });
    if (!callback) return result;
    result.then(
      (res) => callback(undefined, res),
      (err) => callback(err),
    );
  }
}

/** Distinct statement texts Prisma's statements are named for: each connection keeps each one prepared. */
export const MAX_NAMED_STATEMENTS = 512;

/**
 * Names each of Prisma's statement texts (its query shapes: values are parameters), so a
 * connection parses and plans one once and then only binds it, as Berth's hot raw statements
 * already do (docs/benchmarks.md, "The embedded database's wire, and named statements"). PostgreSQL keeps a prepared statement for
 * the session's life: texts past MAX_NAMED_STATEMENTS (lists of every length inlined in raw SQL)
 * go unnamed, so what each connection holds stays bounded.
 */
export function statementNames(max = MAX_NAMED_STATEMENTS): (query: { sql: string }) => string {
  const names = new Map<string, string>();
  return ({ sql }) => {
    let name = names.get(sql);
    if (name === undefined && names.size < max) {
      name = `prisma_${names.size}`;
      names.set(sql, name);
    }
    // An empty name: node-postgres sends it unnamed.
    return name ?? '';
  };
}

/**
 * Opens the configured database and applies pending migrations. Without a URL it embeds PGlite
 * under DATA_DIR, spoken to over an in-process stream (pglite-stream.ts), so the same pg driver and
 * Prisma adapter run in both modes. PGlite is a single session, hence a pool of exactly one connection.
 */
export async function openDatabase(opts: DatabaseOptions): Promise<Database> {
  if (opts.schema !== undefined && !SCHEMA_NAME.test(opts.schema)) {
    throw new Error(`DATABASE_SCHEMA "${opts.schema}" is not a plain lower-case identifier`);
  }
  let pglite: PGlite | undefined;
  let pool: pg.Pool;
  if (opts.databaseUrl) {
    pool = new StatementSafePool({
      connectionString: opts.databaseUrl,
      max: opts.poolSize ?? 10,
      options: opts.schema ? `-c search_path=${opts.schema}` : undefined,
    });
  } else {
    await mkdir(opts.dataDir, { recursive: true, mode: 0o700 });
    pglite = await PGlite.create(join(opts.dataDir, 'pg'), { startParams: pgliteStartParams() });
    const session = new PGliteSession(pglite);
    // Not a socket: nothing outside this process reaches the embedded database.
    pool = new StatementSafePool({ user: 'postgres', database: 'postgres', max: 1, stream: () => session.connect() });
  }
  const close = async () => {
    await pool.end().catch(() => undefined);
    await pglite?.close().catch(() => undefined);
  };
  try {
    const client = await pool.connect();
    let applied: string[];
    try {
      if (opts.schema) await client.query(`CREATE SCHEMA IF NOT EXISTS "${opts.schema}"`);
      applied = await applyMigrations(client);
    } finally {
      client.release();
    }
    const prisma = new PrismaClient({
      adapter: new PrismaPg(pool, { schema: opts.schema, statementNameGenerator: statementNames() }),
      // Prisma's defaults (2 s to get a connection, 5 s to finish) turn a burst of creates
      // waiting on the one PGlite connection, or on a quota lock, into errors instead of waits.
      transactionOptions: { maxWait: 30_000, timeout: 30_000 },
    });
    return {
      prisma,
      pool,
      kind: opts.databaseUrl ? 'postgres' : 'pglite',
      applied,
      close: async () => {
        await prisma.$disconnect();
        await close();
      },
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** Serialises transactions on a named lock, held until commit (PostgreSQL advisory lock). */
export async function lockFor(tx: Tx, name: string): Promise<void> {
  await tx.$executeRaw`SELECT ${lockSql(name)}`;
}

/** lockFor's lock as an expression (of a name, or of an SQL expression giving names), for a statement that takes it and goes on. */
export function lockSql(name: string | P.Sql): P.Sql {
  return P.sql`pg_advisory_xact_lock(hashtextextended(${name}, 0))`;
}
