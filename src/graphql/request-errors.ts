import { GraphQLError } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import type { Log } from '../deps';
import { toClientError } from '../schema/errors';

// GraphQL over HTTP: an error of the request itself (a document that does not parse or validate,
// bad variables, missing or refused credentials) is a 4xx with no data; an error while executing
// is part of a 200 answer, beside the other fields' data. Only request errors carry a status.

const STATUS_BY_CODE: Record<string, number> = { unauthorized: 401, forbidden: 403, rate_limited: 429 };
/** Statuses yoga or its plugins already chose (CSRF 403, 405, …) and the code each means. */
const CODE_BY_STATUS: Record<number, string> = {
  401: 'unauthorized',
  403: 'forbidden',
  405: 'method_not_allowed',
  406: 'not_acceptable',
  413: 'too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
};

function givenStatus(error: unknown): number | undefined {
  const http = error instanceof GraphQLError ? (error.extensions.http as { status?: number } | undefined) : undefined;
  return http?.status !== undefined && http.status >= 400 ? http.status : undefined;
}

/** A request error as clients see it, with its HTTP status (and Retry-After for the 429 lock). */
export function toRequestError(error: unknown, log?: Log): GraphQLError {
  const converted = toClientError(error, log);
  const given = givenStatus(error);
  const code = given && converted.extensions.code === 'invalid' ? (CODE_BY_STATUS[given] ?? 'invalid') : String(converted.extensions.code);
  const retryAfter = converted.extensions.retryAfter;
  // `spec: false`: yoga would otherwise answer 200 to clients that accept only application/json.
  const http = {
    spec: false,
    status: given ?? STATUS_BY_CODE[code] ?? 400,
    ...(typeof retryAfter === 'number' ? { headers: { 'Retry-After': String(retryAfter) } } : {}),
  };
  return new GraphQLError(converted.message, {
    nodes: converted.nodes,
    source: converted.source,
    positions: converted.positions,
    extensions: { ...converted.extensions, code, http },
  });
}

export function requestError(message: string, code: string): GraphQLError {
  return toRequestError(new GraphQLError(message, { extensions: { code } }));
}

/**
 * yoga masks errors of execution and of the request pipeline through `maskError`, but returns
 * validation errors as they are: they get the same treatment here.
 */
export function useRequestErrors(log: Log): Plugin {
  return {
    onValidate() {
      return ({ result, setResult }) => {
        if (result.length) setResult(result.map((e) => toRequestError(e, log)));
      };
    },
  };
}
