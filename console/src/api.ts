// The console's one connection to Berth: urql over HTTP for queries and mutations, graphql-ws for
// subscriptions. The token goes in the Authorization header and in the WebSocket's
// connectionParams, never in a URL.
import { Client, type CombinedError, cacheExchange, fetchExchange, mapExchange, subscriptionExchange } from '@urql/core';
import { createClient as createSocketClient, type Client as SocketClient } from 'graphql-ws';

/** Why the session ended on its own (the token was revoked or expired, or the address is locked). */
export type SessionEnd = { reason: 'refused' | 'locked'; message: string };

export interface Api {
  client: Client;
  token: string;
  /** Calls `listener` when the WebSocket is back after a drop (events may have been missed). */
  onReconnected(listener: () => void): () => void;
  /** Ends the session because Berth refused the token on a call outside GraphQL (a REST 401). */
  refused(message: string): void;
  /** Closes the WebSocket and forgets every pending retry. */
  dispose(): void;
}

/** graphql-ws close codes Berth uses when it refuses the connection's credentials. */
const UNAUTHORIZED = 4401;
const RATE_LIMITED = 4429;

export function socketUrl(location: Location = window.location): string {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/graphql`;
}

export function createApi(token: string, onEnd: (end: SessionEnd) => void): Api {
  const authorization = `Bearer ${token}`;
  const socket: SocketClient = createSocketClient({
    url: socketUrl(),
    connectionParams: { authorization },
    lazy: true,
    // Pages come and go; the connection stays for the next page's subscriptions.
    lazyCloseTimeout: 10_000,
    // Reconnect after network trouble and restarts; never with credentials Berth refused.
    retryAttempts: Number.POSITIVE_INFINITY,
    shouldRetry: (event) => !(isCloseEvent(event) && (event.code === UNAUTHORIZED || event.code === RATE_LIMITED)),
    on: {
      closed: (event) => {
        if (!isCloseEvent(event)) return;
        if (event.code === UNAUTHORIZED)
          onEnd({ reason: 'refused', message: `Berth refused the token: ${event.reason || 'unauthorized'}` });
        if (event.code === RATE_LIMITED) onEnd({ reason: 'locked', message: event.reason || 'too many failed authentications' });
      },
    },
  });
  const client = new Client({
    url: '/graphql',
    preferGetMethod: false,
    fetchOptions: () => ({ headers: { authorization } }),
    exchanges: [
      mapExchange({
        onError(error) {
          const code = errorCode(error);
          if (code === 'unauthorized') onEnd({ reason: 'refused', message: errorMessage(error) });
        },
      }),
      cacheExchange,
      fetchExchange,
      subscriptionExchange({
        forwardSubscription(request) {
          const input = { ...request, query: request.query ?? '' };
          return {
            subscribe(sink) {
              return { unsubscribe: socket.subscribe(input, sink) };
            },
          };
        },
      }),
    ],
  });
  return {
    client,
    token,
    onReconnected: (listener) => socket.on('connected', (_socket, _payload, wasRetry) => wasRetry && listener()),
    refused: (message) => onEnd({ reason: 'refused', message }),
    dispose: () => void socket.dispose(),
  };
}

function isCloseEvent(event: unknown): event is CloseEvent {
  return typeof event === 'object' && event !== null && 'code' in event;
}

/** The machine-readable code of a GraphQL error (extensions.code), or of the HTTP failure. */
export function errorCode(error: CombinedError | undefined): string | undefined {
  if (!error) return undefined;
  for (const e of error.graphQLErrors) {
    if (typeof e.extensions?.code === 'string') return e.extensions.code;
  }
  const status = (error.response as Response | undefined)?.status;
  if (status === 401) return 'unauthorized';
  if (status === 429) return 'rate_limited';
  return error.networkError ? 'network' : undefined;
}

/** A message for people: the server's own words, without urql's "[GraphQL]" prefixes. */
export function errorMessage(error: CombinedError | Error | undefined): string {
  if (!error) return '';
  if ('graphQLErrors' in error) {
    if (error.graphQLErrors.length) return error.graphQLErrors.map((e) => e.message).join('; ');
    if (error.networkError) return `Berth did not answer (${error.networkError.message})`;
  }
  return error.message;
}

export interface ErrorPart {
  message: string;
  code?: string;
}

/** Each distinct error of an answer: the server's words for people, its `code` for programs. */
export function errorParts(error: CombinedError | Error): ErrorPart[] {
  if (!('graphQLErrors' in error)) return [{ message: error.message }];
  if (!error.graphQLErrors.length) return [{ message: errorMessage(error), code: errorCode(error) }];
  const parts = new Map<string, ErrorPart>();
  for (const e of error.graphQLErrors) {
    const code = typeof e.extensions?.code === 'string' ? e.extensions.code : undefined;
    parts.set(`${code}\u0000${e.message}`, { message: e.message, code });
  }
  return [...parts.values()];
}

/** The form field a GraphQL error is about: its extensions.field (`labels.team` is `labels`). */
function errorField(e: { extensions?: Record<string, unknown> }): string | undefined {
  const field = e.extensions?.field;
  if (typeof field === 'string') return field.split('.')[0];
  return e.extensions?.code === 'no_template' ? 'template' : undefined;
}

/** Server errors by the field of `fields` they belong to; the rest under `form`. */
export function formErrors(error: CombinedError | undefined, fields: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  if (!error) return out;
  if (!error.graphQLErrors.length) return { form: errorMessage(error) };
  for (const e of error.graphQLErrors) {
    const field = errorField(e);
    const key = field && fields.includes(field) ? field : 'form';
    out[key] = out[key] ? `${out[key]}; ${e.message}` : e.message;
  }
  return out;
}
