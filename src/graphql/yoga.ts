import type { IncomingMessage } from 'node:http';
import { costLimitPlugin } from '@escape.tech/graphql-armor-cost-limit';
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth';
import { useCSRFPrevention } from '@graphql-yoga/plugin-csrf-prevention';
import { GraphQLError } from 'graphql';
import { createYoga, type YogaServerInstance } from 'graphql-yoga';
import type { Actor, Context, Deps } from '../context';
import type { Log } from '../deps';
import { clientAddress } from '../http/client-address';
import { MAX_JSON_BODY_BYTES } from '../http/text';
import { schema } from '../schema';
import { toClientError } from '../schema/errors';
import { authenticate } from '../services/auth';
import { useErrorBodies } from './error-bodies';
import { useSharedSubscriptions } from './fanout';
import { useStorableInput } from './input';
import { useParseLimits } from './limits';
import { toRequestError, useRequestErrors } from './request-errors';

/** What the server hands yoga per request: the Node request over HTTP; the actor and address over WebSocket. */
export interface GraphQLServerContext {
  req?: IncomingMessage;
  actor?: Actor;
  clientAddress?: string;
  /** Authentication already failed (src/graphql/post.ts): answered as if it failed here. */
  authError?: unknown;
}

export type GraphQLHandler = YogaServerInstance<GraphQLServerContext, Context>;

/**
 * GraphQL over HTTP (POST, GET, SSE) on /graphql; the WebSocket transport (src/graphql/ws.ts)
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
    // One CORS policy for REST and GraphQL, applied by the server (src/http/cors.ts).
    cors: false,
    maxRequestBodySize: MAX_JSON_BODY_BYTES,
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
      maxDepthPlugin({ n: 12 }),
      costLimitPlugin({ maxCost: 20_000 }),
      useErrorBodies(),
    ],
    context: async ({ request, req, actor, clientAddress: known, authError }) => {
      if (authError) throw authError;
      const address = known ?? (req ? clientAddress(req, deps.config.trustProxy) : 'unknown');
      if (actor) return { deps, actor, clientAddress: address };
      return { deps, clientAddress: address, actor: await authenticate(deps, request.headers.get('authorization'), address) };
    },
  });
}
