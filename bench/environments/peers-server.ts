/**
 * The peers of Berth's GraphQL read, each serving the same row of the same PostgreSQL schema from
 * its own pool of 10 connections, in this one process (measured one at a time):
 *  - PostGraphile 5 (amber preset, grafserv on node:http);
 *  - graphql-yoga with a plain graphql-js resolver (one `SELECT … WHERE id = $1`);
 *  - graphql-js `execute` on bare node:http, documents parsed and validated once per query text;
 *  - graphql-jit on bare node:http, documents compiled once per query text.
 * None authenticates: they are the figures the issue quotes, the ceiling of a GraphQL read.
 *
 * PostGraphile 5 declares Node >= 22 and needs `Promise.withResolvers` (Node 22); on Node 20 it is
 * polyfilled here, in the peers' own process, never in Berth's. It is not in Berth's install (whose
 * `npm ci` would warn of that Node): it comes from bench/peers, which bench/environments.ts installs
 * on first use, and only when it is one of the peers asked for.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { buildSchema, type DocumentNode, execute, type GraphQLScalarType, type GraphQLSchema, parse, validate } from 'graphql';
import { compileQuery, isCompiledQuery } from 'graphql-jit';
import { createYoga } from 'graphql-yoga';
import pg from 'pg';
import { countQueries, measuringHandlers, type PeerName, serve } from './common';

// Node 22's Promise.withResolvers, which grafast calls on every request.
const promiseCtor = Promise as unknown as { withResolvers?: () => unknown };
promiseCtor.withResolvers ??= () => {
  let resolve!: (value: unknown) => void;
  let reject!: (reason?: unknown) => void;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
};

const SDL = `
  scalar DateTime
  scalar JSON
  type Environment {
    id: String! orgId: String! name: String! template: String! pool: String! state: String! node: String sandboxId: String
    labels: JSON! project: String! error: String createdBy: String! created: DateTime! starting: DateTime startMs: Int!
    ready: DateTime readyMs: Int stopped: DateTime expires: DateTime! idleUntil: DateTime! idleMs: Int! hardMs: Int!
    exports: JSON! shares: JSON! sync: JSON! snapshot: String restore: [String!]! restored: JSON queueSeq: String!
    workClaim: DateTime version: Int!
  }
  type Query { environment(id: String!): Environment }`;

interface Ctx {
  pool: pg.Pool;
}

function handSchema(): GraphQLSchema {
  const schema = buildSchema(SDL);
  const dateTime = schema.getType('DateTime') as GraphQLScalarType;
  dateTime.serialize = (value) => (value instanceof Date ? value.toISOString() : value);
  const query = schema.getQueryType()!.getFields().environment!;
  query.resolve = async (_root, args: { id: string }, ctx: Ctx) =>
    (await ctx.pool.query('SELECT * FROM "Environment" WHERE id = $1', [args.id])).rows[0] ?? null;
  return schema;
}

function readBody(req: IncomingMessage): Promise<{ query: string; variables?: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch (error) {
        reject(error);
      }
    });
    req.on('error', reject);
  });
}

function reply(res: ServerResponse, status: number, json: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(json);
}

function listen(server: Server): Promise<string> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)),
  );
}

type Run = (variables: Record<string, unknown>) => Promise<string>;

/**
 * A bare node:http GraphQL endpoint: each distinct query text is parsed, validated and prepared
 * once (`prepare` turns the document into a runner answering JSON text), then only run.
 */
function documentServer(schema: GraphQLSchema, prepare: (document: DocumentNode) => Run | { errors?: unknown }): Server {
  const runners = new Map<string, Run>();
  return createServer(async (req, res) => {
    try {
      const body = await readBody(req);
      let run = runners.get(body.query);
      if (!run) {
        const document = parse(body.query);
        const errors = validate(schema, document);
        const prepared = errors.length ? { errors } : prepare(document);
        if (typeof prepared !== 'function') return reply(res, 400, JSON.stringify(prepared));
        run = prepared;
        runners.set(body.query, run);
      }
      reply(res, 200, await run(body.variables ?? {}));
    } catch (error) {
      reply(res, 500, JSON.stringify({ errors: [{ message: String(error) }] }));
    }
  });
}

/** graphql-js `execute` on the document, `JSON.stringify` of the result. */
const graphqlJsServer = (schema: GraphQLSchema, ctx: Ctx) =>
  documentServer(
    schema,
    (document) => async (variableValues) => JSON.stringify(await execute({ schema, document, variableValues, contextValue: ctx })),
  );

/** graphql-jit: the document compiled to a function and a serializer. */
const graphqlJitServer = (schema: GraphQLSchema, ctx: Ctx) =>
  documentServer(schema, (document) => {
    const compiled = compileQuery(schema, document);
    if (!isCompiledQuery(compiled)) return compiled;
    return async (variables) => compiled.stringify(await compiled.query(undefined, ctx, variables));
  });

const quietYoga = { graphiql: false, landingPage: false, logging: false } as const;

/** The parts of PostGraphile 5 used here (its own types live in bench/peers, outside Berth's tsconfig). */
interface PostGraphileModules {
  postgraphile(preset: object): { createServ(grafserv: unknown): { addTo(server: Server): unknown }; release(): unknown };
  PostGraphileAmberPreset: object;
  makePgService(options: object): object;
  grafserv: unknown;
}

/** PostGraphile 5 from bench/peers (CommonJS), or a message saying how to get it. */
function loadPostGraphile(): PostGraphileModules {
  const load = createRequire(new URL('../peers/package.json', import.meta.url));
  try {
    // PostGraphile's pg is bench/peers' copy, whose statements are counted like the others'.
    countQueries(load('pg').Client);
    return {
      ...load('postgraphile'),
      ...load('postgraphile/presets/amber'),
      ...load('postgraphile/adaptors/pg'),
      ...load('postgraphile/grafserv/node'),
    };
  } catch (error) {
    throw new Error(`PostGraphile is not installed in bench/peers (npm ci --prefix bench/peers): ${(error as Error).message}`);
  }
}

/** PostGraphile 5, amber preset, grafserv on node:http. */
function postgraphileServer(p: { databaseUrl: string; schema: string }): Server {
  const { postgraphile, PostGraphileAmberPreset, makePgService, grafserv } = loadPostGraphile();
  const pgl = postgraphile({
    extends: [PostGraphileAmberPreset],
    // Berth has a table named Node; Relay's Node interface would clash with it (and is not read here).
    disablePlugins: ['NodePlugin'],
    pgServices: [makePgService({ connectionString: p.databaseUrl, schemas: [p.schema], poolConfig: { max: 10 } })],
    grafserv: { graphiql: false, watch: false },
  });
  const server = createServer();
  pgl.createServ(grafserv).addTo(server);
  stopPostgraphile = () => pgl.release();
  return server;
}

const servers: Server[] = [];
const pools: pg.Pool[] = [];
let stopPostgraphile: (() => unknown) | undefined;

serve({
  ...measuringHandlers(),
  async start(p: { databaseUrl: string; schema: string; peers: PeerName[] }): Promise<Partial<Record<PeerName, string>>> {
    const newPool = () => {
      const pool = new pg.Pool({ connectionString: p.databaseUrl, max: 10, options: `-c search_path=${p.schema}` });
      pools.push(pool);
      return pool;
    };
    const schema = handSchema();
    const make: Record<PeerName, () => Server> = {
      postgraphile: () => postgraphileServer(p),
      yoga: () => createServer(createYoga<Record<string, unknown>, Ctx>({ schema, context: { pool: newPool() }, ...quietYoga })),
      'graphql-js': () => graphqlJsServer(schema, { pool: newPool() }),
      'graphql-jit': () => graphqlJitServer(schema, { pool: newPool() }),
    };
    const urls: Partial<Record<PeerName, string>> = {};
    for (const name of p.peers) {
      const server = make[name]();
      servers.push(server);
      urls[name] = `${await listen(server)}/graphql`;
    }
    return urls;
  },
  async stop() {
    for (const server of servers) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
    await stopPostgraphile?.();
    for (const pool of pools) await pool.end();
    setImmediate(() => process.exit(0));
  },
});
