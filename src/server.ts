import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { costLimitPlugin } from '@escape.tech/graphql-armor-cost-limit';
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth';
import { useCSRFPrevention } from '@graphql-yoga/plugin-csrf-prevention';
import type { DocumentNode, ExecutionArgs, GraphQLError } from 'graphql';
import { useServer } from 'graphql-ws/use/ws';
import { createYoga } from 'graphql-yoga';
import { WebSocketServer } from 'ws';
import { type Clock, systemClock } from './clock';
import type { Config } from './config';
import { createConsoleHandler } from './console';
import type { Actor, Context, Deps } from './context';
import { loadMasterKey } from './crypto/master-key';
import { openDatabase } from './db';
import { createEvents } from './events';
import { callOperatorSocket, startOperatorSocket } from './operator';
import { createRestHandler } from './rest/adapter';
import { clientAddress, sendError } from './rest/http';
import { buildRoutes } from './rest/routes';
import { startBackground } from './scheduler/background';
import { backgroundJobs } from './scheduler/jobs';
import { schema } from './schema';
import { toClientError } from './schema/errors';
import { authenticate } from './services/auth';
import { DomainError } from './services/errors';
import { ensureDefaultOrganization } from './services/organizations';
import { applyCatalog } from './services/templates';
import { loadCatalog } from './services/templates-file';
import { createBlobStore } from './store';

export interface App {
  deps: Deps;
  server: Server;
  /** Base URL once listening. */
  url: string;
  /** A CLI token generated on the first start of an empty database (no BOOTSTRAP_TOKEN). */
  generatedToken?: string;
  stop(): Promise<void>;
}

export interface AppOptions {
  config: Config;
  clock?: Clock;
  log?: (message: string, err?: unknown) => void;
}

/** yoga's enveloped execute/subscribe, carried to graphql-ws through rootValue. */
interface EnvelopedRoot {
  execute(args: ExecutionArgs): never;
  subscribe(args: ExecutionArgs): never;
}

/** Builds and starts one Berth instance: database, schema, GraphQL (HTTP + WebSocket) and REST. */
export async function startApp(opts: AppOptions): Promise<App> {
  const { config } = opts;
  const log = opts.log ?? ((message: string, err?: unknown) => console.error(message, err ?? ''));
  if (!config.databaseUrl && (await callOperatorSocket(config.dataDir, '/ping', {}))) {
    throw new Error(`another Berth is already serving ${config.dataDir}`);
  }
  // A bad catalog fails the start with a message naming the field, before anything else opens.
  const catalog = await loadCatalog(config.templatesFile);
  const db = await openDatabase({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, schema: config.databaseSchema });
  const events = await createEvents({ databaseUrl: config.databaseUrl, schema: config.databaseSchema });
  const store = await createBlobStore({
    dataDir: config.dataDir,
    azureConnectionString: config.azureConnectionString,
    azureContainer: config.azureContainer,
  });
  const masterKey = await loadMasterKey({ masterKeyB64: config.masterKey, dataDir: config.dataDir });
  const deps = { config, db, prisma: db.prisma, clock: opts.clock ?? systemClock, events, store, masterKey, catalog } as Deps;
  await applyCatalog(db.prisma, catalog);
  deps.background = startBackground(deps, backgroundJobs, log);
  const { generatedToken } = await ensureDefaultOrganization(db.prisma, config.bootstrapToken);

  const yoga = createYoga<{ req?: IncomingMessage; actor?: Actor }, Context>({
    schema,
    graphqlEndpoint: '/graphql',
    graphiql: config.dev ? { headers: '{"Authorization": "Bearer <token>"}' } : false,
    landingPage: false,
    // Unexpected errors are logged once, by toClientError; domain errors are answers, not faults.
    logging: false,
    maskedErrors: { maskError: (error) => toClientError(error, log) },
    plugins: [
      useCSRFPrevention({ requestHeaders: ['x-graphql-yoga-csrf', 'authorization'] }),
      maxDepthPlugin({ n: 12 }),
      costLimitPlugin({ maxCost: 20_000 }),
    ],
    context: async ({ request, req, actor }) => {
      if (actor) return { deps, actor };
      try {
        const address = req ? clientAddress(req) : 'unknown';
        return { deps, actor: await authenticate(deps, request.headers.get('authorization'), address) };
      } catch (error) {
        throw toClientError(error);
      }
    },
  });

  const rest = createRestHandler(deps, schema, buildRoutes(schema));
  const web = createConsoleHandler();
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    try {
      if (await rest.handle(req, res)) return;
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/graphql') return void (await yoga.handle(req, res, { req }));
      if (path === '/healthz') return sendError(res, 200, 'ok');
      if (await web.handle(req, res)) return;
      sendError(res, 404, `no route for ${path}`, 'not_found');
    } catch (error) {
      log('request failed', error);
      if (!res.headersSent) sendError(res, 500, 'internal error', 'internal');
      else res.destroy();
    }
  });
  // No limit on a whole request's duration: a 2 GiB artifact upload takes minutes on a slow link.
  // Headers still have headersTimeout, and an upload that stops sending is cut by its idle timeout.
  server.requestTimeout = 0;

  const wss = new WebSocketServer({ server, path: '/graphql' });
  // WebSocket requests get the same plugins, context and auth as HTTP through yoga's envelop.
  const wsServer = useServer<Record<string, unknown>, { actor?: Actor }>(
    {
      execute: (args: ExecutionArgs) => (args.rootValue as EnvelopedRoot).execute(args),
      subscribe: (args: ExecutionArgs) => (args.rootValue as EnvelopedRoot).subscribe(args),
      onConnect: async (ctx) => {
        const params = ctx.connectionParams ?? {};
        const header = (params.authorization ?? params.Authorization) as string | undefined;
        try {
          ctx.extra.actor = await authenticate(deps, header, clientAddress(ctx.extra.request));
          return true;
        } catch (error) {
          const status = error instanceof DomainError ? error.status : 500;
          ctx.extra.socket.close(status === 429 ? 4429 : 4401, error instanceof Error ? error.message : 'unauthorized');
          return false;
        }
      },
      onSubscribe: async (ctx, _id, payload) => {
        const {
          schema: s,
          execute,
          subscribe,
          contextFactory,
          parse,
          validate,
        } = yoga.getEnveloped({
          ...ctx,
          req: ctx.extra.request,
          socket: ctx.extra.socket,
          params: payload,
          actor: ctx.extra.actor,
        });
        let document: DocumentNode;
        try {
          document = parse(payload.query);
        } catch (error) {
          return [toClientError(error)];
        }
        const errors = validate(s, document) as readonly GraphQLError[];
        if (errors.length) return errors.map((e) => toClientError(e));
        return {
          schema: s,
          operationName: payload.operationName,
          document,
          variableValues: payload.variables,
          contextValue: await contextFactory(),
          rootValue: { execute, subscribe },
        };
      },
    },
    wss,
  );

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, config.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  // Signed links point here unless PUBLIC_URL says otherwise (PORT=0 is known only now).
  config.publicUrl ??= url;

  const operator = config.databaseUrl ? undefined : await startOperatorSocket(db.prisma, config.dataDir);

  let stopped = false;
  return {
    deps,
    server,
    url,
    generatedToken,
    async stop() {
      if (stopped) return;
      stopped = true;
      await wsServer.dispose();
      for (const client of wss.clients) client.terminate();
      wss.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await deps.background.stop();
      await new Promise<void>((resolve) => (operator ? operator.close(() => resolve()) : resolve()));
      await events.close();
      await db.close();
    },
  };
}
