import { createHash, randomBytes } from 'node:crypto';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { diagnoseMigrationHistory, diffMigrationsToSchema } from '../scripts/schema-engine.js';
import { applyMigrations, MIGRATIONS_DIR } from '../src/platform/db/migrate.js';

const checkedIn = (await readdir(MIGRATIONS_DIR, { withFileTypes: true }))
  .filter((e) => e.isDirectory())
  .map((e) => e.name)
  .sort();
const sha256 = async (dir: string, name: string) =>
  createHash('sha256')
    .update(await readFile(join(dir, name, 'migration.sql')))
    .digest('hex');

// The checked-in migrations plus one more: semicolons inside literals, several statements.
const EXTRA = '99990101000000_extra';
let fixtureDir: string;
beforeAll(async () => {
  fixtureDir = await mkdtemp(join(tmpdir(), 'berth-migrations-'));
  await cp(MIGRATIONS_DIR, fixtureDir, { recursive: true });
  await mkdir(join(fixtureDir, EXTRA));
  await writeFile(
    join(fixtureDir, EXTRA, 'migration.sql'),
    `-- a; comment\nCREATE TABLE "Extra" ("v" TEXT NOT NULL DEFAULT 'a;b');\nINSERT INTO "Extra" VALUES ('x;y');\n`,
  );
});
afterAll(() => rm(fixtureDir, { recursive: true, force: true }));

describe('migrations folder', () => {
  it('matches prisma/schema.prisma', async () => {
    const sql = await diffMigrationsToSchema();
    expect(sql, 'schema.prisma differs from prisma/migrations: run `npm run migrate:new -- <name>`').toBe('');
  });
});

interface Db {
  /** Connection string, for Prisma's engine. */
  url: string;
  /** Schema the tables go to (search_path). */
  schema: string;
  connect(): Promise<pg.Client>;
  drop(): Promise<void>;
}

/** The same checks against any PostgreSQL; `fresh` gives an empty database or schema. */
function runnerTests(fresh: () => Promise<Db>) {
  let db: Db;
  let client: pg.Client | undefined;
  const connect = async () => (client = await db.connect());
  beforeAll(async () => {
    db = await fresh();
  });
  afterEach(async () => {
    await client?.end();
    client = undefined;
    await db.drop();
    db = await fresh();
  });
  afterAll(() => db.drop());

  it('applies every migration once, with the rows Prisma writes', async () => {
    const c = await connect();
    expect(await applyMigrations(c)).toEqual(checkedIn);
    const tables = await c.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name', [
      db.schema,
    ]);
    expect(tables.rows.map((r) => r.table_name)).toEqual(
      expect.arrayContaining(['Organization', 'Environment', 'Credential', 'Artifact', '_prisma_migrations']),
    );
    const rows = await c.query('SELECT * FROM _prisma_migrations ORDER BY migration_name');
    expect(rows.rows).toHaveLength(checkedIn.length);
    for (const [i, row] of rows.rows.entries()) {
      expect(row).toMatchObject({
        migration_name: checkedIn[i],
        checksum: await sha256(MIGRATIONS_DIR, checkedIn[i]!),
        applied_steps_count: 1,
        rolled_back_at: null,
        logs: null,
      });
      expect(row.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(row.finished_at).toBeInstanceOf(Date);
      expect(row.finished_at.getTime()).toBeGreaterThanOrEqual(row.started_at.getTime());
    }
    expect(await applyMigrations(c)).toEqual([]);
    // Prisma's own engine reads the same history as complete and unedited.
    await c.end();
    client = undefined;
    expect(await diagnoseMigrationHistory(db.url, { schema: db.schema })).toEqual({
      editedMigrationNames: [],
      failedMigrationNames: [],
      hasMigrationsTable: true,
      history: null,
    });
  });

  it('applies only what is pending, multi-statement scripts included', async () => {
    const c = await connect();
    expect(await applyMigrations(c)).toEqual(checkedIn);
    expect(await applyMigrations(c, fixtureDir)).toEqual([EXTRA]);
    expect((await c.query('SELECT v FROM "Extra"')).rows).toEqual([{ v: 'x;y' }]);
    const row = await c.query('SELECT checksum FROM _prisma_migrations WHERE migration_name = $1', [EXTRA]);
    expect(row.rows).toEqual([{ checksum: await sha256(fixtureDir, EXTRA) }]);
    expect(await applyMigrations(c, fixtureDir)).toEqual([]);
  });

  it('refuses an applied migration whose file changed', async () => {
    const c = await connect();
    await applyMigrations(c, fixtureDir);
    await c.query(`UPDATE _prisma_migrations SET checksum = repeat('0', 64) WHERE migration_name = $1`, [EXTRA]);
    await expect(applyMigrations(c, fixtureDir)).rejects.toThrow(new RegExp(`migration ${EXTRA} was modified`));
  });

  it('refuses a failed migration and one missing from the folder', async () => {
    const c = await connect();
    await applyMigrations(c, fixtureDir);
    await c.query('UPDATE _prisma_migrations SET finished_at = NULL WHERE migration_name = $1', [EXTRA]);
    await expect(applyMigrations(c, fixtureDir)).rejects.toThrow(new RegExp(`migration ${EXTRA} failed`));
    // Rolled back: no longer blocks; it is applied again (its table is gone first).
    await c.query('UPDATE _prisma_migrations SET rolled_back_at = now() WHERE migration_name = $1', [EXTRA]);
    await c.query('DROP TABLE "Extra"');
    expect(await applyMigrations(c, fixtureDir)).toEqual([EXTRA]);
    await expect(applyMigrations(c)).rejects.toThrow(
      new RegExp(`migration ${EXTRA} is applied in the database but missing from the migrations folder`),
    );
  });

  it('rolls back a migration that fails, recording nothing', async () => {
    const c = await connect();
    const bad = '99990202000000_bad';
    await mkdir(join(fixtureDir, bad));
    try {
      await writeFile(join(fixtureDir, bad, 'migration.sql'), 'CREATE TABLE "Bad" (x int);\nSELECT nope;\n');
      await expect(applyMigrations(c, fixtureDir)).rejects.toThrow(new RegExp(`migration ${bad} failed`));
    } finally {
      await rm(join(fixtureDir, bad), { recursive: true });
    }
    expect((await c.query(`SELECT to_regclass('"Bad"') AS t`)).rows).toEqual([{ t: null }]);
    const names = await c.query('SELECT migration_name FROM _prisma_migrations ORDER BY migration_name');
    expect(names.rows.map((r) => r.migration_name)).toEqual([...checkedIn, EXTRA]);
    // The lock was released. Asked of this session's own locks: other suites migrating their
    // schemas in the same database take the same lock, so trying to take it would race them.
    const held = await c.query(
      `SELECT count(*)::int AS n FROM pg_locks
        WHERE locktype = 'advisory' AND objid = 72707369 AND pid = pg_backend_pid()`,
    );
    expect(held.rows).toEqual([{ n: 0 }]);
  });

  return { db: () => db };
}

describe('applyMigrations on PGlite (through pglite-socket)', () => {
  runnerTests(async () => {
    const pglite = await PGlite.create();
    const server = new PGLiteSocketServer({ db: pglite, port: 0, host: '127.0.0.1' });
    await server.start();
    const url = `postgres://postgres@${server.getServerConn()}/postgres`;
    return {
      url,
      schema: 'public',
      // The socket serves one connection at a time: one client per test.
      connect: async () => {
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        return c;
      },
      drop: async () => {
        await server.stop();
        await pglite.close();
      },
    };
  });
});

const pgUrl = process.env.TEST_DATABASE_URL;

describe.skipIf(!pgUrl)(
  pgUrl ? 'applyMigrations on PostgreSQL (TEST_DATABASE_URL)' : 'applyMigrations on PostgreSQL: skipped, TEST_DATABASE_URL is not set',
  () => {
    const admin = () => new pg.Client({ connectionString: pgUrl });
    // Each test gets its own schema, reached through search_path, and drops it afterwards.
    const fresh = async (): Promise<Db> => {
      const schema = `berth_test_${randomBytes(6).toString('hex')}`;
      const a = admin();
      await a.connect();
      await a.query(`CREATE SCHEMA "${schema}"`);
      await a.end();
      const url = new URL(pgUrl!);
      url.searchParams.set('options', `-c search_path=${schema}`);
      return {
        url: url.toString(),
        schema,
        connect: async () => {
          const c = new pg.Client({ connectionString: url.toString() });
          await c.connect();
          return c;
        },
        drop: async () => {
          const d = admin();
          await d.connect();
          await d.query(`DROP SCHEMA "${schema}" CASCADE`);
          await d.end();
        },
      };
    };
    const suite = runnerTests(fresh);

    it('serialises concurrent starters: each migration is applied once', async () => {
      const db = suite.db();
      const [a, b] = await Promise.all([db.connect(), db.connect()]);
      try {
        const results = await Promise.all([applyMigrations(a, fixtureDir), applyMigrations(b, fixtureDir)]);
        expect(results.flat().sort()).toEqual([...checkedIn, EXTRA]);
        expect(results.some((r) => r.length === 0)).toBe(true);
        const rows = await a.query('SELECT migration_name, count(*)::int AS n FROM _prisma_migrations GROUP BY 1');
        expect(rows.rows.every((r) => r.n === 1)).toBe(true);
        expect(rows.rows).toHaveLength(checkedIn.length + 1);
      } finally {
        await Promise.all([a.end(), b.end()]);
      }
    });
  },
);
