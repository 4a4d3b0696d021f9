// Serves Deps (src/app/deps.ts) on one node:http server: REST /v1, GraphQL over HTTP and WebSocket on
// /graphql, liveness and readiness; the rules every request passes first (CORS, protocol errors)
// live in src/edges/http/.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { createSessionServer, SESSION_PATH, sessionRoute } from '../edges/channels/exec-session';
import { NODE_CHANNEL_PATH, serveNodeChannel } from '../edges/channels/node-channel';
import { createPreviewProxy } from '../edges/channels/preview-proxy';
import { createRelayServer } from '../edges/channels/relay-server';
import { CLI_PATH, createCliInstallHandler, INSTALL_PATH } from '../edges/cli-install';
import { createConsoleHandler } from '../edges/console';
import { createGraphQLPostPath } from '../edges/graphql/post';
import { serveGraphQLWebSocket } from '../edges/graphql/ws';
import { createGraphQLHandler } from '../edges/graphql/yoga';
import { watchBodyIdle } from '../edges/http/body-idle';
import { corsPolicy } from '../edges/http/cors';
import { LingeringResponse } from '../edges/http/early-answer';
import { sendLiveness, sendReadiness } from '../edges/http/health';
import { answerProtocolErrors, trackRequest } from '../edges/http/protocol-errors';
import { sendError } from '../edges/http/respond';
import { queryEncodingProblem } from '../edges/http/text';
import { createRestHandler } from '../edges/rest/adapter';
import { buildRoutes } from '../edges/rest/routes';
import { schema } from '../edges/schema';
import { ensureBuiltinNode } from '../modules/nodes';
import { ensureDefaultOrganization } from '../modules/organizations';
import { METRICS_PATH, sendMetrics } from '../observability/endpoint';
import { createLogger, type Logger, logFunction, requestLogger } from '../observability/log';
import { beginRequest, loggedPath, methodLabel, type RequestInfo, withinRequest } from '../observability/requests';
import type { Clock } from '../platform/clock';
import { RELAY_MUX_PATH, RELAY_NODE_MUX_PATH, RELAY_NODE_PATH, RELAY_PATH } from '../protocol/relay';
import { type BuiltinSupervisor, superviseBuiltinNode } from './builtin-supervisor';
import type { Config } from './config';
import type { Deps } from './context';
import { buildDeps, closeDeps } from './deps';
import { startOperatorSocket } from './operator';

export interface App {
  deps: Deps;
  /** The built-in node's process (src/app/builtin-supervisor.ts). */
  builtin: BuiltinSupervisor;
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
  /** Where the server's log lines go; default: LOG_FORMAT and LOG_LEVEL on stdout. */
  logger?: Logger;
}

/** Builds one Berth instance's dependencies and serves them. */
export async function startApp(opts: AppOptions): Promise<App> {
  const logger = opts.logger ?? createLogger({ format: opts.config.logFormat, level: opts.config.logLevel });
  const deps = await buildDeps({ config: opts.config, clock: opts.clock, log: logFunction(logger) });
  try {
    return await serve(deps, logger);
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

/** A session's or request's one log line, and its count and duration in the metrics. */
function finished(
  deps: Deps,
  logger: Logger,
  req: IncomingMessage,
  info: RequestInfo,
  status: number,
  started: bigint,
  extra: { websocket?: true; aborted?: true },
) {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const method = methodLabel(req.method);
  deps.metrics.httpRequests.inc({ route: info.route, method, status: String(status) });
  // A session lasts as long as its client wants: timed with the requests, it would hide their latency.
  if (!extra.websocket) deps.metrics.httpDuration.observe({ route: info.route, method }, seconds);
  const { id, route, orgId, actorKind, actorId } = info;
  logger.info(
    {
      reqId: id,
      method: req.method,
      path: loggedPath(req.url ?? '/'),
      route,
      status,
      durationMs: Math.round(seconds * 1e4) / 10,
      orgId,
      actorKind,
      actorId,
      ...extra,
    },
    'request',
  );
}

/** Serves `deps` on HTTP (REST and GraphQL) and WebSocket, then starts the background jobs. */
export async function serve(deps: Deps, logger: Logger): Promise<App> {
  const { config } = deps;
  const log = logFunction(logger);
  const requestLog = requestLogger(logger);
  const cors = corsPolicy({ origins: config.corsOrigins, publicUrl: () => config.publicUrl });
  const graphql = createGraphQLHandler(deps, log);
  const graphqlPost = createGraphQLPostPath(deps, graphql);
  const rest = createRestHandler(deps, schema, buildRoutes(schema), log);
  const web = createConsoleHandler();
  // PUBLIC_URL as set: once listening, config.publicUrl is filled with the bound address.
  const cli = createCliInstallHandler({ publicUrl: config.publicUrl, trustProxy: config.trustProxy });
  let stopping = false;
  // Made with the relay once listening; a request before that finds no preview host.
  let previews: ReturnType<typeof createPreviewProxy> | undefined;

  // An answer given while the request's body still arrives waits for it, bounded (early-answer.ts).
  const server = createServer({ ServerResponse: LingeringResponse }, (req: IncomingMessage, res: ServerResponse) => {
    const started = process.hrtime.bigint();
    const info = beginRequest(req, 'other');
    res.setHeader('x-request-id', info.id);
    // `close` also comes for an answer cut short: its line says so.
    res.once('close', () => finished(deps, requestLog, req, info, res.statusCode, started, res.writableFinished ? {} : { aborted: true }));
    return withinRequest(info, () => answer(req, res, info));
  });
  const answer = async (req: IncomingMessage, res: ServerResponse, info: RequestInfo) => {
    trackRequest(req, res);
    // A host under PREVIEW_DOMAIN is an environment's preview, never the API (its own origin: no CORS).
    const preview = previews?.route(req);
    if (preview !== undefined && previews) {
      info.route = 'preview';
      return await previews.handle(req, res, preview);
    }
    watchBodyIdle(req, res, config.bodyIdleMs);
    try {
      if (cors.preflight(req, res)) return;
      for (const [name, value] of Object.entries(cors.headers(req))) res.setHeader(name, value);
      const path = (req.url ?? '/').split('?')[0]!;
      if (['/healthz', '/readyz', '/graphql', METRICS_PATH, CLI_PATH, INSTALL_PATH].includes(path)) info.route = path;
      if (path === '/healthz') return sendLiveness(res);
      if (path === '/readyz') return await sendReadiness(res, deps, stopping, log);
      if (path === METRICS_PATH) {
        if (!config.metricsToken) return sendError(res, 'not_found', `no route for ${path}`);
        return await sendMetrics(req, res, deps.metrics.registry, config.metricsToken);
      }
      if (path === '/graphql') {
        const encoding = queryEncodingProblem((req.url ?? '').slice(path.length));
        if (encoding) return sendError(res, 'bad_request', encoding);
        if (req.method !== 'POST') return void (await graphql.handle(req, res, { req, res }));
        const handOver = await graphqlPost.handle(req, res);
        if (!handOver) return;
        // yoga's node adapter reads a body already read from `req.body`.
        if (handOver.body) (req as IncomingMessage & { body?: Buffer }).body = handOver.body;
        const { context, authError } = handOver;
        return void (await graphql.handle(req, res, { req, res, ...context, authError }));
      }
      if (await rest.handle(req, res)) return;
      if (await cli.handle(req, res)) return;
      info.route = 'console';
      if (await web.handle(req, res)) return;
      info.route = 'other';
      sendError(res, 'not_found', `no route for ${path}`);
    } catch (error) {
      log('request failed', error);
      if (!res.headersSent) sendError(res, 'internal', 'internal error');
      else res.destroy();
    }
  };
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
  previews = createPreviewProxy(deps, relay, log);
  const endpoints: Record<string, (req: IncomingMessage, socket: Duplex, head: Buffer) => void> = {
    [NODE_CHANNEL_PATH]: nodeChannel.handleUpgrade,
    [RELAY_PATH]: relay.handleUpgrade,
    [RELAY_NODE_PATH]: relay.handleNodeUpgrade,
    [RELAY_MUX_PATH]: relay.handleMuxUpgrade,
    [RELAY_NODE_MUX_PATH]: relay.handleNodeMuxUpgrade,
  };
  const upgradeRoute = (path: string, req: IncomingMessage) =>
    previews?.route(req) !== undefined ? 'preview' : path === '/graphql' || endpoints[path] ? path : (sessionRoute(path) ?? 'other');
  const ws = serveGraphQLWebSocket(
    server,
    graphql,
    deps,
    cors,
    log,
    (path, req) => {
      const preview = previews?.route(req);
      if (preview !== undefined) return (r, socket, head) => previews?.handleUpgrade(r, socket, head, preview);
      return SESSION_PATH.test(path) ? sessions.handleUpgrade : endpoints[path];
    },
    // One line per WebSocket session, when it ends: a refused upgrade's status, or 101 and how long it lasted.
    (req, socket, path) => {
      const started = process.hrtime.bigint();
      const info = beginRequest(req, upgradeRoute(path, req), socket);
      socket.once('close', () => finished(deps, requestLog, req, info, info.status ?? 0, started, { websocket: true }));
      return info;
    },
  );
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  // Signed links point here unless PUBLIC_URL says otherwise (PORT=0 is known only now).
  config.publicUrl ??= url;
  config.localUrl = url;

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
  let builtin: BuiltinSupervisor | undefined;
  let generatedToken: string | undefined;
  let bootstrapRevoked: boolean | undefined;
  try {
    operator = config.databaseUrl ? undefined : await startOperatorSocket(deps.prisma, config);
    // The first start's admin token is made only once the port is bound: a start that fails
    // before that (a taken port) makes none, so the next start is still the first and shows one.
    ({ generatedToken, bootstrapRevoked } = await ensureDefaultOrganization(deps.prisma, config.bootstrapToken));
    // The built-in node says hello before the jobs run: the environments it still holds are its
    // own again, not failed for a silence that was only the restart (docs/agents.md).
    await ensureBuiltinNode(deps);
    builtin = superviseBuiltinNode(deps, url, (line) => logger.info(line));
    await waitFor(builtin.ready, BUILTIN_HELLO_MS, () =>
      log(`the built-in node did not say hello within ${BUILTIN_HELLO_MS / 1000} s; serving without it meanwhile`),
    );
  } catch (err) {
    await builtin?.stop();
    await new Promise<void>((resolve) => (operator ? operator.close(() => resolve()) : resolve()));
    await closeServer();
    throw err;
  }
  deps.background.start(deps);
  const node = builtin as BuiltinSupervisor;

  let stopped = false;
  return {
    deps,
    builtin: node,
    server,
    url,
    generatedToken,
    bootstrapRevoked,
    async stop() {
      if (stopped) return;
      stopped = true;
      stopping = true;
      // Jobs first: a prepare or release in flight waits for the node's answer.
      await deps.background.stop();
      await node.stop();
      await closeServer();
      await new Promise<void>((resolve) => (operator ? operator.close(() => resolve()) : resolve()));
      await closeDeps(deps);
    },
  };
}

/** How long a start waits for the built-in node's first hello before it serves without it. */
const BUILTIN_HELLO_MS = 60_000;

/** Waits for `promise` (its rejection thrown), or `ms`, after which `late` is called and the wait ends. */
async function waitFor(promise: Promise<void>, ms: number, late: () => void): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), ms);
  });
  try {
    if ((await Promise.race([promise, timeout])) === 'late') late();
  } finally {
    clearTimeout(timer);
  }
}
