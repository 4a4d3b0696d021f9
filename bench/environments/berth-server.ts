/**
 * Berth under test, in a process of its own (so its CPU and RSS are its own), with the bare
 * baselines beside it reading the same database:
 *  - bare: node:http + pg, no authentication, `SELECT * FROM "Environment" WHERE id = $1` as JSON;
 *  - bare + auth: the same plus one more indexed query for the credential (its secret's hash is
 *    unique), refusing unknown, revoked and expired credentials;
 *  - bare + Berth's auth statement: the same with the very statement of src/modules/credentials/auth.ts
 *    (the credential joined with its person, its sandbox and the address's failure counter),
 *    sent as Prisma's `$queryRaw` sends it (an unnamed statement, planned on every execution) and
 *    as a named statement (prepared once per connection; PostgreSQL then reuses its plan).
 * On the embedded PGlite they share Berth's pool of one connection (PGlite is one session); on
 * PostgreSQL they get a pool like Berth's (10 connections, same schema).
 * Answers `usage`, `profileStart`/`profileStop`, `sql` (on Berth's own pool) and `stop`.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import type { App } from '../../src/app/server';
import { measuringHandlers, serve } from './common';

export interface BerthStart {
  backend: 'pglite' | 'postgres';
  dataDir: string;
  databaseUrl: string;
  schema: string;
  token: string;
  templatesFile: string;
}

export interface BerthUrls {
  url: string;
  bareUrl: string;
  bareAuthUrl: string;
  bareBerthAuthUrl: string;
  bareBerthAuthNamedUrl: string;
  pid: number;
}

const CREDENTIAL_SQL = 'SELECT id, "orgId", revoked, expires FROM "Credential" WHERE "secretHash" = $1';

const BERTH_CREDENTIAL_SQL = `
  SELECT c.id, c.kind, c."orgId", c."personId", c."sandboxId", c.name, c.admin AS "keyAdmin", c.expires, c.revoked, c."lastUsed",
         p.email, p.admin, s.removed AS "sandboxRemoved",
         (SELECT f."blockedUntil" FROM "AuthFailure" f WHERE f.address = $1) AS "blockedUntil"
    FROM "Credential" c
    LEFT JOIN "Person" p ON p.id = c."personId"
    LEFT JOIN "Sandbox" s ON s.id = c."sandboxId"
   WHERE c."secretHash" = $2`;

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function listen(handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>): Promise<Server> {
  const server = createServer((req, res) => {
    handler(req, res).catch((error) => send(res, 500, { error: String(error), code: 'internal' }));
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const urlOf = (server: Server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
const idOf = (req: IncomingMessage) => decodeURIComponent((req.url ?? '').slice('/v1/environments/'.length));

let app: App | undefined;
let ownPool: pg.Pool | undefined;
const baselines: Server[] = [];

serve({
  ...measuringHandlers(),
  async start(p: BerthStart): Promise<BerthUrls> {
    // Berth as deployed: the schema reads NODE_ENV when it is built, at import.
    process.env.NODE_ENV ??= 'production';
    const { loadConfig } = await import('../../src/app/config');
    const { startApp } = await import('../../src/app/server');
    const { createLogger } = await import('../../src/observability/log');
    app = await startApp({
      config: loadConfig({
        ...process.env,
        PORT: '0',
        HOST: '127.0.0.1',
        DATA_DIR: p.dataDir,
        BOOTSTRAP_TOKEN: p.token,
        DATABASE_URL: p.databaseUrl,
        DATABASE_SCHEMA: p.schema,
        TEMPLATES_FILE: p.templatesFile,
      }),
      // As a default start logs: a JSON line per request on stdout, here a pipe the benchmark drains.
      logger: createLogger({ format: 'json', level: 'info' }),
    });
    ownPool =
      p.backend === 'postgres'
        ? new pg.Pool({ connectionString: p.databaseUrl, max: 10, options: `-c search_path=${p.schema}` })
        : undefined;
    const pool = ownPool ?? app.deps.db.pool;

    const bare = await listen(async (req, res) => {
      const { rows } = await pool.query('SELECT * FROM "Environment" WHERE id = $1', [idOf(req)]);
      send(res, rows.length ? 200 : 404, rows[0] ?? { error: 'not found', code: 'not_found' });
    });
    const authenticated = (statement: 'simple' | 'berth' | 'berth-named') =>
      listen(async (req, res) => {
        const secret = /^Bearer[ ]+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1];
        const hash = createHash('sha256')
          .update(secret ?? '')
          .digest('hex');
        const address = req.socket.remoteAddress ?? 'unknown';
        const cred = (
          statement === 'simple'
            ? await pool.query(CREDENTIAL_SQL, [hash])
            : await pool.query({
                text: BERTH_CREDENTIAL_SQL,
                values: [address, hash],
                name: statement === 'berth-named' ? 'bench-credential' : undefined,
              })
        ).rows[0];
        const now = new Date();
        if (!secret || !cred || cred.revoked || (cred.expires && cred.expires <= now) || cred.sandboxRemoved) {
          return send(res, 401, { error: 'unauthorized', code: 'unauthorized' });
        }
        const { rows } = await pool.query('SELECT * FROM "Environment" WHERE id = $1 AND "orgId" = $2', [idOf(req), cred.orgId]);
        send(res, rows.length ? 200 : 404, rows[0] ?? { error: 'not found', code: 'not_found' });
      });
    const bareAuth = await authenticated('simple');
    const bareBerthAuth = await authenticated('berth');
    const bareBerthAuthNamed = await authenticated('berth-named');
    baselines.push(bare, bareAuth, bareBerthAuth, bareBerthAuthNamed);
    return {
      url: app.url,
      bareUrl: urlOf(bare),
      bareAuthUrl: urlOf(bareAuth),
      bareBerthAuthUrl: urlOf(bareBerthAuth),
      bareBerthAuthNamedUrl: urlOf(bareBerthAuthNamed),
      pid: process.pid,
    };
  },
  async sql(p: { text: string; params?: unknown[] }) {
    if (!app) throw new Error('Berth is not started');
    return (await app.deps.db.pool.query(p.text, p.params)).rows;
  },
  async stop() {
    for (const server of baselines) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
    await ownPool?.end();
    await app?.stop();
    setImmediate(() => process.exit(0));
  },
});
