// Serves Deps (src/deps.ts) on one node:http server: REST /v1, GraphQL over HTTP and WebSocket on
// /graphql, liveness and readiness; the rules every request passes first (CORS, protocol errors)
// live in src/http/.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Clock } from './clock';
import type { Config } from './config';
import { createConsoleHandler } from './console';
import type { Deps } from './context';
import { createSessionServer, SESSION_PATH } from './dataplane/exec-session';
import { createRelayServer, RELAY_NODE_PATH, RELAY_PATH } from './dataplane/relay-server';
import { buildDeps, closeDeps, type Log } from './deps';
import { createGraphQLPostPath } from './graphql/post';
import { serveGraphQLWebSocket } from './graphql/ws';
import { createGraphQLHandler } from './graphql/yoga';
import { watchBodyIdle } from './http/body-idle';
import { corsPolicy } from './http/cors';
import { sendLiveness, sendReadiness } from './http/health';
import { answerProtocolErrors, trackRequest } from './http/protocol-errors';
import { sendError } from './http/respond';
import { queryEncodingProblem } from './http/text';
import { startOperatorSocket } from './operator';
import { createRestHandler } from './rest/adapter';
import { NODE_CHANNEL_PATH, serveNodeChannel } from './rest/node-channel';
import { buildRoutes } from './rest/routes';
import { schema } from './schema';
import { ensureDefaultOrganization } from './services/organizations';

export interface App {
  deps: Deps;
  server: Server;
  /** Base URL once listening. */
  url: string;
  /** A CLI token generated on the first start of an empty database (no BOOTSTRAP_TOKEN). */
  generatedToken?: string;
  /** BOOTSTRAP_TOKEN names a token that was revoked: it stays revoked. */
  bootstrapRevoked?: boolean;
  stop(): Promise<void>;
}

export interface AppOptions {
  config: Config;
  clock?: Clock;
  log?: Log;
}

const defaultLog: Log = (message, err) => console.error(message, err ?? '');

/** Builds one Berth instance's dependencies and serves them. */
export async function startApp(opts: AppOptions): Promise<App> {
  const log = opts.log ?? defaultLog;
  const deps = await buildDeps({ config: opts.config, clock: opts.clock, log });
  try {
    return await serve(deps, log);
  } catch (err) {
    await closeDeps(deps);
    throw err;
  }
}

/** Why listening failed, in words an operator can act on. */
function listenError(err: NodeJS.ErrnoException, config: Config): Error {
  const where = `port ${config.port} on ${config.host}`;
  switch (err.code) {
    case 'EADDRINUSE':
      return new Error(`${where} is already in use; stop what uses it or set PORT (0: any free port)`);
    case 'EACCES':
      return new Error(`not allowed to listen on ${where}; choose a port above 1023 with PORT`);
    case 'EADDRNOTAVAIL':
      return new Error(`HOST ${config.host} is not an address of this machine`);
    default:
      return new Error(`cannot listen on ${where}: ${err.message}`);
  }
}

/** Serves `deps` on HTTP (REST and GraphQL) and WebSocket, then starts the background jobs. */
export async function serve(deps: Deps, log: Log): Promise<App> {
  const { config } = deps;
  const cors = corsPolicy({ origins: config.corsOrigins, publicUrl: () => config.publicUrl });
  const graphql = createGraphQLHandler(deps, log);
  const graphqlPost = createGraphQLPostPath(deps, graphql);
  const rest = createRestHandler(deps, schema, buildRoutes(schema));
  const web = createConsoleHandler();
  let stopping = false;

  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    trackRequest(req, res);
    watchBodyIdle(req, res, config.bodyIdleMs);
    try {
      if (cors.preflight(req, res)) return;
      for (const [name, value] of Object.entries(cors.headers(req))) res.setHeader(name, value);
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/healthz') return sendLiveness(res);
      if (path === '/readyz') return await sendReadiness(res, deps, stopping, log);
      if (path === '/graphql') {
        const encoding = queryEncodingProblem((req.url ?? '').slice(path.length));
        if (encoding) return sendError(res, 400, encoding, 'bad_request');
        if (req.method !== 'POST') return void (await graphql.handle(req, res, { req, res }));
        const handOver = await graphqlPost.handle(req, res);
        if (!handOver) return;
        // yoga's node adapter reads a body already read from `req.body`.
        if (handOver.body) (req as IncomingMessage & { body?: Buffer }).body = handOver.body;
        const { context, authError } = handOver;
        return void (await graphql.handle(req, res, { req, res, ...context, authError }));
      }
      if (await rest.handle(req, res)) return;
      if (await web.handle(req, res)) return;
      sendError(res, 404, `no route for ${path}`, 'not_found');
    } catch (error) {
      log('request failed', error);
      if (!res.headersSent) sendError(res, 500, 'internal error', 'internal');
      else res.destroy();
    }
  });
  // No limit on a whole request's duration: a 2 GiB artifact upload takes minutes on a slow link.
  // Headers still have headersTimeout; bodies an idle timeout (watchBodyIdle, longer for uploads).
  server.requestTimeout = 0;
  answerProtocolErrors(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(listenError(err, config)));
    server.listen(config.port, config.host, () => resolve());
  });
  // Attached once listening: a WebSocket server on a server that fails to listen reports that failure again, loudly.
  const nodeChannel = serveNodeChannel(deps, log);
  const relay = createRelayServer(deps, log);
  const sessions = createSessionServer(deps, cors, log);
  const endpoints: Record<string, (req: IncomingMessage, socket: Duplex, head: Buffer) => void> = {
    [NODE_CHANNEL_PATH]: nodeChannel.handleUpgrade,
    [RELAY_PATH]: relay.handleUpgrade,
    [RELAY_NODE_PATH]: relay.handleNodeUpgrade,
  };
  const ws = serveGraphQLWebSocket(server, graphql, deps, cors, log, (path) =>
    SESSION_PATH.test(path) ? sessions.handleUpgrade : endpoints[path],
  );
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  // Signed links point here unless PUBLIC_URL says otherwise (PORT=0 is known only now).
  config.publicUrl ??= url;

  const closeServer = async () => {
    await relay.close();
    await sessions.close();
    await nodeChannel.close();
    await ws.close();
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  };
  let operator: Server | undefined;
  let generatedToken: string | undefined;
  let bootstrapRevoked: boolean | undefined;
  try {
    operator = config.databaseUrl ? undefined : await startOperatorSocket(deps.prisma, config);
    // The first start's admin token is made only once the port is bound: a start that fails
    // before that (a taken port) makes none, so the next start is still the first and shows one.
    ({ generatedToken, bootstrapRevoked } = await ensureDefaultOrganization(deps.prisma, config.bootstrapToken));
  } catch (err) {
    await new Promise<void>((resolve) => (operator ? operator.close(() => resolve()) : resolve()));
    await closeServer();
    throw err;
  }
  deps.background.start(deps);

  let stopped = false;
  return {
    deps,
    server,
    url,
    generatedToken,
    bootstrapRevoked,
    async stop() {
      if (stopped) return;
      stopped = true;
      stopping = true;
      await closeServer();
      await new Promise<void>((resolve) => (operator ? operator.close(() => resolve()) : resolve()));
      await closeDeps(deps);
    },
  };
}
