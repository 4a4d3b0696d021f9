import type { IncomingMessage, ServerResponse } from 'node:http';
import { useCSRFPrevention } from '@graphql-yoga/plugin-csrf-prevention';
import { type DocumentNode, GraphQLError } from 'graphql';
import { createYoga, type Plugin, type YogaServerInstance } from 'graphql-yoga';
import type { WebSocket } from 'ws';
import type { Actor, Context, Deps, Log } from '../../app/context';
import { authenticate } from '../../modules/credentials';
import { clientAddress } from '../http/client-address';
import { MAX_JSON_BODY_BYTES } from '../http/text';
import { schema } from '../schema';
import { toClientError } from '../schema/errors';
import { useErrorBodies } from './error-bodies';
import { useSharedSubscriptions } from './fanout';
import { useStorableInput } from './input';
import { useParseLimits, useSelectionLimits } from './limits';
import { toRequestError, useRequestErrors } from './request-errors';
import { TextCache } from './text-cache';

/** What the server hands yoga per request: the Node request over HTTP (useCredentialsFirst adds the actor and address); the actor and address over WebSocket. */
export interface GraphQLServerContext {
  req?: IncomingMessage;
  res?: ServerResponse;
  actor?: Actor;
  clientAddress?: string;
  /** Authentication already failed (src/edges/graphql/post.ts): answered as if it failed here. */
  authError?: unknown;
  /** The graphql-ws socket the operation came on. */
  socket?: WebSocket;
}

export type GraphQLHandler = YogaServerInstance<GraphQLServerContext, Context>;

/**
 * Credentials are checked before yoga reads the body: a request they refuse is answered 401 (or
 * 429) with nothing of it parsed, validated or cached. Over HTTP only: graphql-ws checks them at
 * `connection_init`, and refuses a subscribe before that with 4401. Runs after the CSRF check, so a
 * browser's request without a preflight is still refused 403 first.
 */
function useCredentialsFirst(deps: Deps): Plugin<Record<string, never>, GraphQLServerContext> {
  let streams = 0;
  deps.metrics.subscriptions.set('sse', () => streams);
  return {
    async onRequestParse({ request, serverContext }) {
      // The POST path (src/edges/graphql/post.ts) authenticated already: not twice, nor a failure counted twice.
      if (serverContext.authError) throw serverContext.authError;
      if (serverContext.actor) return;
      const { req } = serverContext;
      const address = req ? clientAddress(req, deps.config.trustProxy) : 'unknown';
      const actor = await authenticate(deps, request.headers.get('authorization'), address);
      serverContext.actor = actor;
      serverContext.clientAddress = address;
      // An SSE stream lives as long as its credential: revoked, expired or its sandbox removed,
      // the stream's connection is closed.
      const { res } = serverContext;
      if (req && res && request.headers.get('accept')?.includes('text/event-stream')) {
        streams++;
        res.once('close', () => streams--);
        res.once(
          'close',
          deps.credentials.hold(actor, () => req.socket.destroy()),
        );
      }
    },
  };
}

/**
 * GraphQL over HTTP (POST, GET, SSE) on /graphql; the WebSocket transport (src/edges/graphql/ws.ts)
 * goes through the same envelop, so both get the same plugins, context and authentication.
 */
export function createGraphQLHandler(deps: Deps, log: Log): GraphQLHandler {
  // Errors with a path happened while executing (200, beside the other fields' data); the
  // others are errors of the request itself (4xx).
  const maskError = (error: unknown) =>
    error instanceof GraphQLError && error.path ? toClientError(error, log) : toRequestError(error, log);
  return createYoga<GraphQLServerContext, Context>({
    schema,
    graphqlEndpoint: '/graphql',
    // Off: yoga's GraphiQL loads its scripts from a CDN, onto the console's origin. The web console
    // and any GraphQL client (the schema is schema.graphql) serve instead.
    graphiql: false,
    landingPage: false,
    // One CORS policy for REST and GraphQL, applied by the server (src/edges/http/cors.ts).
    cors: false,
    maxRequestBodySize: MAX_JSON_BODY_BYTES,
    // Bounded by the text they keep (src/edges/graphql/text-cache.ts), not only by entries; validation
    // results are kept by document, so the documents bound them too.
    parserAndValidationCache: { documentCache: new TextCache<DocumentNode>(), errorCache: new TextCache<unknown>() },
    // Unexpected errors are logged once, by toClientError; domain errors are answers, not faults.
    logging: false,
    maskedErrors: { maskError },
    plugins: [
      // First: a shared subscription stops the plugins' own subscribe hooks (it masks its errors itself).
      useSharedSubscriptions((error) => maskError(error) as GraphQLError, log),
      useParseLimits(),
      useStorableInput(),
      useRequestErrors(log),
      useCSRFPrevention({ requestHeaders: ['x-graphql-yoga-csrf', 'authorization'] }),
      useCredentialsFirst(deps),
      ...useSelectionLimits(),
      useErrorBodies(),
    ],
    // The actor comes from useCredentialsFirst over HTTP, from the socket's connection over WebSocket.
    context: ({ actor, clientAddress: address, socket, res }) => {
      if (!actor) throw new Error('a GraphQL operation reached execution without an actor');
      return { deps, actor, clientAddress: address ?? 'unknown', unsent: unsentOf(socket, res) };
    },
  });
}

/** What a graphql-ws socket or an SSE response holds unsent; 0 once it is closed (no one to wait for). */
function unsentOf(socket: WebSocket | undefined, res: ServerResponse | undefined): (() => number) | undefined {
  if (socket) return () => (socket.readyState === socket.OPEN ? socket.bufferedAmount : 0);
  if (res) return () => (res.destroyed ? 0 : res.writableLength);
  return undefined;
}
