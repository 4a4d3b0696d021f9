// Applies prisma/migrations at start the way `prisma migrate deploy` does, without Prisma's native
// engine: same `_prisma_migrations` table, rows and advisory lock, so the Prisma CLI (where it is
// available) sees the same history.
import { createHash, randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { packagePath } from '../paths';

/**
 * One database session. It must be a single connection (pg.Client, a checked-out PoolClient, or
 * PGlite), not a pool: the advisory lock and the transactions are per session. Queries without
 * params must accept several statements (pg's simple query protocol does; for PGlite use `exec`).
 */
export interface MigrationClient {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** Prisma Migrate's advisory lock id; holding it also keeps the Prisma CLI out while we run. */
const LOCK_ID = 72707369;
/** The migrations this version of Berth ships. */
export const MIGRATIONS_DIR = packagePath('prisma', 'migrations');

// Prisma's DDL, verbatim (schema-engine, PostgreSQL flavour).
const CREATE_TABLE = `CREATE TABLE IF NOT EXISTS _prisma_migrations (
    id                      VARCHAR(36) PRIMARY KEY NOT NULL,
    checksum                VARCHAR(64) NOT NULL,
    finished_at             TIMESTAMPTZ,
    migration_name          VARCHAR(255) NOT NULL,
    logs                    TEXT,
    rolled_back_at          TIMESTAMPTZ,
    started_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    applied_steps_count     INTEGER NOT NULL DEFAULT 0
)`;

interface Migration {
  name: string;
  sql: string;
  checksum: string;
  /** Also accepted: the file with CRLF line ends turned into LF (a Windows checkout), as Prisma does. */
  lfChecksum: string;
}

const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');

async function readMigrations(dir: string): Promise<Migration[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const names = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  return Promise.all(
    names.map(async (name) => {
      const bytes = await readFile(join(dir, name, 'migration.sql'));
      const sql = bytes.toString('utf8');
      return { name, sql, checksum: sha256(bytes), lfChecksum: sha256(sql.replace(/\r\n/g, '\n')) };
    }),
  );
}

interface Row {
  migration_name: string;
  checksum: string;
  finished_at: unknown;
  rolled_back_at: unknown;
  started_at: unknown;
}

/**
 * Applies pending migrations in name order, each in its own transaction together with its
 * `_prisma_migrations` row. Returns the names applied (empty when up to date). Refuses to run when
 * the recorded history disagrees with the folder (edited, failed or unknown migrations).
 */
export async function applyMigrations(client: MigrationClient, dir: string = MIGRATIONS_DIR): Promise<string[]> {
  const migrations = await readMigrations(dir);
  await client.query(`SELECT pg_advisory_lock(${LOCK_ID})`);
  try {
    return await applyLocked(client, migrations);
  } finally {
    // A failure here means the session is gone, which releases the lock anyway.
    await client.query(`SELECT pg_advisory_unlock(${LOCK_ID})`).catch(() => {});
  }
}

async function applyLocked(client: MigrationClient, migrations: Migration[]): Promise<string[]> {
  await client.query(CREATE_TABLE);
  const { rows } = (await client.query(
    'SELECT migration_name, checksum, finished_at, rolled_back_at, started_at FROM _prisma_migrations ORDER BY started_at',
  )) as { rows: Row[] };
  const byName = new Map(migrations.map((m) => [m.name, m]));
  const applied = new Set<string>();
  // Rolled-back rows are only an audit trail, as for Prisma.
  for (const row of rows.filter((r) => r.rolled_back_at == null)) {
    const name = row.migration_name;
    if (row.finished_at == null) {
      throw new Error(
        `migration ${name} failed when it was applied (started ${String(row.started_at)}) and is not ` +
          `rolled back; fix the database, then mark it with \`prisma migrate resolve\` before starting again`,
      );
    }
    const m = byName.get(name);
    if (!m) {
      throw new Error(`migration ${name} is applied in the database but missing from the migrations folder`);
    }
    if (row.checksum !== m.checksum && row.checksum !== m.lfChecksum) {
      throw new Error(
        `migration ${name} was modified after it was applied (checksum ${row.checksum} in the database, ` +
          `${m.checksum} on disk); add a new migration instead of editing an applied one`,
      );
    }
    applied.add(name);
  }

  const done: string[] = [];
  for (const m of migrations.filter((x) => !applied.has(x.name))) {
    await client.query('BEGIN');
    try {
      await client.query(m.sql);
      // started_at: now() is the transaction start; finished_at: the actual end.
      await client.query(
        `INSERT INTO _prisma_migrations (id, checksum, finished_at, migration_name, applied_steps_count)
         VALUES ($1, $2, clock_timestamp(), $3, 1)`,
        [randomUUID(), m.checksum, m.name],
      );
      await client.query('COMMIT');
    } catch (e) {
      await client.query('ROLLBACK').catch(() => {});
      throw new Error(`migration ${m.name} failed and was rolled back: ${(e as Error).message}`, { cause: e });
    }
    done.push(m.name);
  }
  return done;
}

/**
 * Migrations of the folder that the database has not finished applying (readiness: another
 * instance may be applying them, or one failed). Any session will do; it takes no lock.
 */
export async function pendingMigrations(client: MigrationClient, dir: string = MIGRATIONS_DIR): Promise<string[]> {
  const migrations = await readMigrations(dir);
  const { rows } = (await client.query(
    'SELECT migration_name FROM _prisma_migrations WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL',
  )) as { rows: { migration_name: string }[] };
  const done = new Set(rows.map((r) => r.migration_name));
  return migrations.map((m) => m.name).filter((name) => !done.has(name));
}
