/**
 * The embedded database's wire (issue 35): a statement through node-postgres to PGlite over the
 * in-process stream Berth uses (src/platform/db/pglite-stream.ts), against the same statement over
 * @electric-sql/pglite-socket on a Unix socket (what Berth used before), one PGlite, one run.
 *
 *   npm run bench:pglite-wire
 *
 * BENCH_STATEMENTS (3000) of each kind per round, BENCH_ROUNDS (3) rounds alternating the two
 * wires after a warm-up: a primary-key read sent unnamed (as Prisma sends every statement), the
 * same read as a named statement (Berth's hot ones), and an update inside a transaction. Reports
 * µs per statement (the median round) and the ratio stream / socket.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import pg from 'pg';
import { PGliteSession } from '../src/platform/db/pglite-stream';
import { knob } from './environments/common';

const STATEMENTS = knob('BENCH_STATEMENTS', 3000);
const ROUNDS = knob('BENCH_ROUNDS', 3);
const KINDS = ['unnamed read', 'named read', 'update in a transaction'] as const;

const dir = await mkdtemp(join(tmpdir(), 'berth-bench-pglite-wire-'));
const db = await PGlite.create(join(dir, 'pg'));
await db.exec(`CREATE TABLE item (id text PRIMARY KEY, n int, label text, detail jsonb);
  INSERT INTO item SELECT 'item-' || g, g, repeat('x', 60), '{"a": 1, "b": [1, 2, 3]}' FROM generate_series(1, 1000) g;`);
const socket = new PGLiteSocketServer({ db, path: join(dir, '.s.PGSQL.5432') });
await socket.start();
const session = new PGliteSession(db);

/** µs per statement of each kind, over one connection of `wire`. */
async function round(wire: 'socket' | 'stream', tag: string): Promise<number[]> {
  const client =
    wire === 'socket'
      ? new pg.Client({ host: dir, port: 5432, user: 'postgres', database: 'postgres' })
      : new pg.Client({ user: 'postgres', database: 'postgres', stream: () => session.connect() });
  await client.connect();
  const id = (i: number) => `item-${(i % 1000) + 1}`;
  const timed = async (run: (i: number) => Promise<unknown>) => {
    const started = performance.now();
    for (let i = 0; i < STATEMENTS; i++) await run(i);
    return ((performance.now() - started) * 1000) / STATEMENTS;
  };
  const figures = [
    await timed((i) => client.query('SELECT * FROM item WHERE id = $1', [id(i)])),
    // PGlite is one session: prepared statements outlive a connection, so each round names its own.
    await timed((i) => client.query({ name: `read_${tag}`, text: 'SELECT * FROM item WHERE id = $1', values: [id(i)] })),
    await (async () => {
      await client.query('BEGIN');
      const us = await timed((i) => client.query('UPDATE item SET n = n + 1 WHERE id = $1', [id(i)]));
      await client.query('COMMIT');
      return us;
    })(),
  ];
  await client.end();
  return figures;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
try {
  await round('socket', 'warm_socket');
  await round('stream', 'warm_stream');
  const runs: Record<'socket' | 'stream', number[][]> = { socket: [], stream: [] };
  for (let r = 0; r < ROUNDS; r++) {
    runs.socket.push(await round('socket', `socket_${r}`));
    runs.stream.push(await round('stream', `stream_${r}`));
  }
  console.log(`PGlite wire benchmark (${STATEMENTS} statements of each kind, ${ROUNDS} rounds, median round)`);
  console.log('| statement | Unix socket (pglite-socket) | in-process stream | ratio |');
  console.log('| --- | ---: | ---: | ---: |');
  KINDS.forEach((kind, k) => {
    const viaSocket = median(runs.socket.map((r) => r[k]!));
    const viaStream = median(runs.stream.map((r) => r[k]!));
    console.log(`| ${kind} | ${viaSocket.toFixed(0)} µs | ${viaStream.toFixed(0)} µs | ${(viaStream / viaSocket).toFixed(2)}x |`);
  });
} finally {
  await socket.stop();
  await db.close();
  await rm(dir, { recursive: true, force: true });
}
