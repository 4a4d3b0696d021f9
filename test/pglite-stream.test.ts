// The embedded database's wire (src/platform/db/pglite-stream.ts): node-postgres and Prisma speak
// to PGlite over an in-process stream. What a socket gave for free must still hold: messages split
// or joined anywhere, results larger than PGlite's buffer, a failed statement leaving the session
// usable, and a connection that replaces a broken one starting on a clean session.
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Database, openDatabase, statementNames } from '../src/platform/db';

describe('the embedded database over its in-process stream', () => {
  let dataDir: string;
  let db: Database;
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'berth-pglite-stream-'));
    db = await openDatabase({ dataDir });
  });
  afterAll(async () => {
    await db?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('opens no socket: nothing outside the process reaches the database', async () => {
    expect((await readdir(dataDir)).filter((name) => name.startsWith('.s.PGSQL'))).toEqual([]);
  });

  it('carries parameters and results of many megabytes both ways', async () => {
    const big = 'x'.repeat(6 * 1024 * 1024);
    const { rows } = await db.pool.query<{ n: number; back: string }>('SELECT length($1::text) AS n, $1::text || $1::text AS back', [big]);
    expect(rows[0]!.n).toBe(big.length);
    expect(rows[0]!.back.length).toBe(2 * big.length);
    const many = await db.pool.query<{ g: number }>('SELECT g FROM generate_series(1, 200000) g');
    expect(many.rows).toHaveLength(200_000);
    expect(many.rows.at(-1)!.g).toBe(200_000);
  });

  it('keeps the session after a failed statement, with the next ones queued beside it', async () => {
    const results = await Promise.allSettled([
      db.pool.query('SELECT 1 AS one'),
      db.pool.query('SELECT * FROM no_such_table'),
      db.pool.query({ name: 'berth_test_two', text: 'SELECT 2 AS two' }),
      db.prisma.$queryRaw<{ three: number }[]>`SELECT 3::int AS three`,
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason.message).toMatch(/no_such_table/);
    expect((results[3] as PromiseFulfilledResult<{ three: number }[]>).value).toEqual([{ three: 3 }]);
  });

  it('runs transactions whole while other statements wait', async () => {
    await db.pool.query('CREATE TABLE IF NOT EXISTS stream_counter (n int)');
    await db.pool.query('TRUNCATE stream_counter');
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        db.prisma.$transaction(async (tx) => {
          await tx.$executeRaw`INSERT INTO stream_counter VALUES (${i})`;
          if (i % 5 === 0) throw new Error('rolled back');
        }),
      ).map((p) => p.catch(() => undefined)),
    );
    const { rows } = await db.pool.query<{ c: number }>('SELECT count(*)::int AS c FROM stream_counter');
    expect(rows[0]!.c).toBe(16);
  });

  it('starts a connection that replaces a broken one on a clean session', async () => {
    const client = await db.pool.connect();
    await client.query('BEGIN');
    await client.query('CREATE TABLE left_open (n int)');
    await client.query({ name: 'berth_test_prepared', text: 'SELECT 1 AS n' });
    // The connection breaks inside its transaction: the pool drops it.
    client.release(new Error('broken'));
    const again = await db.pool.connect();
    try {
      // The same name prepares again, and the open transaction was rolled back.
      expect((await again.query({ name: 'berth_test_prepared', text: 'SELECT 1 AS n' })).rows).toEqual([{ n: 1 }]);
      expect((await again.query(`SELECT to_regclass('left_open') AS t`)).rows).toEqual([{ t: null }]);
      expect((await again.query('SELECT 1 AS ok')).rows).toEqual([{ ok: 1 }]);
    } finally {
      again.release();
    }
  });
});

describe("Prisma's statements, named", () => {
  it('gives each text one name, and none past the bound', () => {
    const name = statementNames(2);
    const a = name({ sql: 'SELECT 1' });
    const b = name({ sql: 'SELECT 2' });
    expect(a).not.toBe(b);
    expect(name({ sql: 'SELECT 1' })).toBe(a);
    // Past the bound: unnamed (node-postgres sends an empty name as the unnamed statement).
    expect(name({ sql: 'SELECT 3' })).toBe('');
    expect(name({ sql: 'SELECT 2' })).toBe(b);
  });

  it('are prepared once on the connection and bound again after', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'berth-named-'));
    const db = await openDatabase({ dataDir });
    try {
      for (const id of ['a', 'b', 'c']) await db.prisma.environment.findUnique({ where: { id } });
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name LIKE 'prisma\\_%' AND statement LIKE '%"Environment"%'`,
      );
      expect(rows[0]!.n).toBe(1);
    } finally {
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
