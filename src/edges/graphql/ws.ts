import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { DocumentNode, ExecutionArgs, GraphQLError } from 'graphql';
import { useServer } from 'graphql-ws/use/ws';
import { type WebSocket, WebSocketServer } from 'ws';
import type { Actor, Deps, Log } from '../../app/context';
import { closeCodeOf } from '../../kernel/error-codes';
import { DomainError } from '../../kernel/errors';
import { authenticate } from '../../modules/credentials';
import { noteActor, type RequestInfo, requestInfoOf, tagUpgrades, withinRequest } from '../../observability/requests';
import { clientAddress } from '../http/client-address';
import type { CorsPolicy } from '../http/cors';
import { endWithError } from '../http/protocol-errors';
import { MAX_JSON_BODY_BYTES } from '../http/text';
import { toClientError } from '../schema/errors';
import { variablesError } from './input';
import type { GraphQLHandler } from './yoga';

/** Subscriptions one graphql-ws connection may hold at once. */
export const MAX_SUBSCRIPTIONS = 100;

/** yoga's enveloped execute/subscribe, carried to graphql-ws through rootValue. */
interface EnvelopedRoot {
  execute(args: ExecutionArgs): never;
  subscribe(args: ExecutionArgs): never;
}

type SocketExtra = {
  actor?: Actor;
  clientAddress?: string;
  /** Its credential ended while a subscription still runs (a removed sandbox's last config): why it closes. */
  closing?: string;
};

/** The longest a socket whose credential ended waits for its last subscription to complete. */
const CLOSING_MS = 5_000;

/** How often sockets are looked at: an idle one is pinged, one that did not answer its last ping is dropped. */
const KEEP_ALIVE_MS = 12_000;
/** A socket that had traffic since the last look is pinged only every this many looks. */
const BUSY_PING_EVERY = 5;

/**
 * Keep-alive for every socket on one timer (instead of graphql-ws's timer and ping per socket):
 * idle sockets are pinged every 12 s, as graphql-ws does, sockets kept busy by deliveries every
 * 60 s (their own traffic keeps proxies from timing them out, and a socket that stops taking
 * deliveries is closed by the fan-out's unsent-bytes limit); no pong by the next look, terminated.
 */
function keepAlive(wss: WebSocketServer): () => void {
  interface Liveness {
    tcp: Duplex & { bytesWritten?: number };
    written: number;
    looks: number;
    waiting: boolean;
  }
  const sockets = new Map<WebSocket, Liveness>();
  wss.on('connection', (client: WebSocket, req: IncomingMessage) => {
    const liveness: Liveness = { tcp: req.socket, written: 0, looks: 0, waiting: false };
    sockets.set(client, liveness);
    client.on('pong', () => {
      liveness.waiting = false;
    });
    client.once('close', () => sockets.delete(client));
  });
  const timer = setInterval(() => {
    for (const [client, liveness] of sockets) {
      if (client.readyState !== client.OPEN) continue;
      if (liveness.waiting) {
        client.terminate();
        continue;
      }
      const written = liveness.tcp.bytesWritten ?? 0;
      const busy = written !== liveness.written;
      liveness.written = written;
      if (busy && ++liveness.looks < BUSY_PING_EVERY) continue;
      liveness.looks = 0;
      liveness.waiting = true;
      client.ping();
    }
  }, KEEP_ALIVE_MS).unref();
  return () => clearInterval(timer);
}

/** A WebSocket close reason is at most 123 bytes. */
function closeReason(message: string): string {
  let reason = message;
  while (Buffer.byteLength(reason) > 123) reason = reason.slice(0, -2);
  return reason;
}

/**
 * graphql-ws on /graphql. Every operation goes through yoga's envelop (the same parse limits,
 * input checks, depth and cost limits and context as HTTP); credentials come from
 * `connectionParams.authorization`, checked once when the socket connects.
 */
export function serveGraphQLWebSocket(
  server: Server,
  yoga: GraphQLHandler,
  deps: Deps,
  cors: CorsPolicy,
  log: Log,
  /** Other WebSocket endpoints by path (the node control channel…), served before the origin check here: each applies its own. */
  others: (path: string, req: IncomingMessage) => ((req: IncomingMessage, socket: Duplex, head: Buffer) => void) | undefined,
  /** Starts tracking an upgrade (its id, its log line when the socket closes). */
  track: (req: IncomingMessage, socket: Duplex, path: string) => RequestInfo,
) {
  // A frame larger than an HTTP body may be is refused (1009) from its header, before it is buffered.
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_JSON_BODY_BYTES });
  // Refused upgrades answer `{error, code}` like every other request.
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = (req.url ?? '/').split('?')[0]!;
    withinRequest(track(req, socket, path), () => upgrade(req, socket, head, path));
  });
  tagUpgrades(wss);
  const upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer, path: string) => {
    const other = others(path, req);
    if (other) return other(req, socket, head);
    if (path !== '/graphql') return endWithError(socket, 'not_found', `no WebSocket endpoint at ${path}; GraphQL's is /graphql`);
    // Browsers do not apply CORS to WebSocket: the same origin policy is enforced here.
    if (!cors.allows(req)) {
      return endWithError(
        socket,
        'forbidden',
        `origin ${req.headers.origin} may not open a WebSocket here; CORS_ORIGINS lists the origins that may`,
      );
    }
    wss.handleUpgrade(req, socket, head, (client) => wss.emit('connection', client, req));
  };
  wss.on('wsClientError', (err: Error, socket: Duplex) => {
    const method = /method/i.test(err.message);
    endWithError(socket, method ? 'method_not_allowed' : 'bad_request', `not a WebSocket handshake: ${err.message}`);
  });
  const graphqlWs = useServer<Record<string, unknown>, SocketExtra>(
    {
      execute: (args: ExecutionArgs) => (args.rootValue as EnvelopedRoot).execute(args),
      subscribe: (args: ExecutionArgs) => (args.rootValue as EnvelopedRoot).subscribe(args),
      onConnect: async (ctx) => {
        const params = ctx.connectionParams ?? {};
        const header = (params.authorization ?? params.Authorization) as string | undefined;
        const address = clientAddress(ctx.extra.request, deps.config.trustProxy);
        try {
          ctx.extra.actor = await authenticate(deps, header, address);
          ctx.extra.clientAddress = address;
          noteActor(ctx.extra.actor, requestInfoOf(ctx.extra.request));
          // A socket lives as long as its credential: revoked (on any instance), expired, or its
          // sandbox removed, the socket closes.
          const socket = ctx.extra.socket;
          const release = deps.credentials.hold(ctx.extra.actor, (reason) => {
            // A removed sandbox's agent still gets its last config: its subscription then
            // completes, and the socket closes (at the latest 5 s later).
            if (ctx.extra.actor?.kind !== 'sandbox' || Object.keys(ctx.subscriptions).length === 0)
              return socket.close(closeCodeOf('unauthorized'), reason);
            ctx.extra.closing = reason;
            setTimeout(() => socket.close(closeCodeOf('unauthorized'), reason), CLOSING_MS).unref();
          });
          socket.once('close', release);
          connections.add(ctx);
          socket.once('close', () => connections.delete(ctx));
          return true;
        } catch (error) {
          if (!(error instanceof DomainError)) {
            log('WebSocket authentication failed', error);
            ctx.extra.socket.close(1011, 'internal error');
          } else {
            ctx.extra.socket.close(
              closeCodeOf(error.code === 'rate_limited' ? 'rate_limited' : 'unauthorized'),
              closeReason(error.message),
            );
          }
          return false;
        }
      },
      onComplete: (ctx) => {
        const reason = ctx.extra.closing;
        // After the complete message went out and the subscription was forgotten.
        if (reason)
          setImmediate(() => Object.keys(ctx.subscriptions).length === 0 && ctx.extra.socket.close(closeCodeOf('unauthorized'), reason));
      },
      onSubscribe: async (ctx, id, payload) => {
        // Each subscription holds server memory; the one being made is already counted.
        if (Object.keys(ctx.subscriptions).length > MAX_SUBSCRIPTIONS) {
          const message = `at most ${MAX_SUBSCRIPTIONS} subscriptions per connection: complete one, or open another connection`;
          return [toClientError(new DomainError(message, 'too_many_subscriptions'), log)];
        }
        const badVariables = variablesError(payload.variables);
        if (badVariables) return [toClientError(badVariables, log)];
        const enveloped = yoga.getEnveloped({
          ...ctx,
          req: ctx.extra.request,
          socket: ctx.extra.socket,
          // A shared subscription (src/edges/graphql/fanout.ts) writes its frames to the socket itself.
          subscriptionId: id,
          params: payload,
          actor: ctx.extra.actor,
          clientAddress: ctx.extra.clientAddress,
        });
        let document: DocumentNode;
        try {
          document = enveloped.parse(payload.query);
        } catch (error) {
          return [toClientError(error, log)];
        }
        const errors = enveloped.validate(enveloped.schema, document) as readonly GraphQLError[];
        if (errors.length) return errors.map((e) => toClientError(e, log));
        return {
          schema: enveloped.schema,
          operationName: payload.operationName,
          document,
          variableValues: payload.variables,
          contextValue: await enveloped.contextFactory(),
          rootValue: { execute: enveloped.execute, subscribe: enveloped.subscribe },
        };
      },
    },
    wss,
    0, // keep-alive below, one timer for all sockets
  );
  const stopKeepAlive = keepAlive(wss);
  // Every authenticated connection, for berth_subscriptions (what each holds is graphql-ws's own count).
  const connections = new Set<{ subscriptions: Record<string, unknown> }>();
  deps.metrics.subscriptions.set('websocket', () => {
    let open = 0;
    for (const ctx of connections) open += Object.keys(ctx.subscriptions).length;
    return open;
  });
  return {
    async close() {
      stopKeepAlive();
      await graphqlWs.dispose();
      for (const client of wss.clients) client.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
