import { GraphQLError } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import type { Log } from '../../app/context';
import { codeForStatus, type ErrorCode, isCallerError, isErrorCode, statusOf } from '../../kernel/error-codes';
import { toClientError } from '../schema/errors';

// GraphQL over HTTP: an error of the request itself (a document that does not parse or validate,
// bad variables, missing or refused credentials) is answered with no data; an error while
// executing is part of a 200 answer, beside the other fields' data. Only request errors carry a
// status. A client that asks for application/json by name gets graphql-js's own refusals of its
// document and variables (syntax, validation, coercion) with 200, as GraphQL over HTTP says;
// every other request error (credentials, Berth's input rules and limits), and every error to
// other clients (application/graphql-response+json, a wildcard, no Accept, an event stream), is a
// 4xx: 400, or the code's own status when it is about the caller (credentials, the 429 lock).

interface HttpExtension {
  /** yoga: answer 200 instead of `status` when the answer is application/json. */
  spec?: boolean;
  status?: number;
  headers?: Record<string, string>;
}

function givenStatus(error: unknown): number | undefined {
  const http = error instanceof GraphQLError ? (error.extensions.http as HttpExtension | undefined) : undefined;
  return http?.status !== undefined && http.status >= 400 ? http.status : undefined;
}

/** The codes yoga gives graphql-js's own refusals as they pass (parse, validation, a subscription's variables). */
const YOGA_CODES = new Set(['GRAPHQL_PARSE_FAILED', 'GRAPHQL_VALIDATION_FAILED', 'BAD_USER_INPUT']);

/**
 * graphql-js's own refusal of a document or its variables: no code but yoga's names for them
 * (Berth's rules and limits give `invalid`, yoga's transport errors codes of their own), no status
 * but 400 (the CSRF refusal has 403 and no code), wrapping no error but graphql-js's.
 */
function refusedByGraphQL(error: unknown): boolean {
  if (!(error instanceof GraphQLError)) return false;
  const { code } = error.extensions;
  return (
    (code === undefined || YOGA_CODES.has(String(code))) &&
    (givenStatus(error) ?? 400) === 400 &&
    (error.originalError === undefined || error.originalError instanceof GraphQLError)
  );
}

/**
 * Errors toRequestError made, and whether each is one of graphql-js's refusals. They come back
 * (from yoga's caches, or thrown and masked), marked by yoga on the way: `spec` is kept here.
 */
const made = new WeakMap<GraphQLError, boolean>();

/** A request error as clients see it, with its HTTP status (and Retry-After for the 429 lock). */
export function toRequestError(error: unknown, log?: Log): GraphQLError {
  const converted = toClientError(error, log);
  const given = givenStatus(error);
  // A status yoga or its plugins already chose (CSRF 403, 405, …) names its generic code.
  const code = given && converted.extensions.code === 'invalid' ? (codeForStatus(given) ?? 'invalid') : String(converted.extensions.code);
  const retryAfter = converted.extensions.retryAfter;
  // `spec` only for graphql-js's refusals: yoga answers any error so marked 200 in application/json.
  const spec = (error instanceof GraphQLError ? made.get(error) : undefined) ?? refusedByGraphQL(error);
  const http: HttpExtension = {
    spec,
    status: given ?? (isErrorCode(code) && isCallerError(code) ? statusOf(code) : 400),
    ...(typeof retryAfter === 'number' ? { headers: { 'Retry-After': String(retryAfter) } } : {}),
  };
  const requestError = new GraphQLError(converted.message, {
    nodes: converted.nodes,
    source: converted.source,
    positions: converted.positions,
    extensions: { ...converted.extensions, code, http },
  });
  made.set(requestError, spec);
  return requestError;
}

export function requestError(message: string, code: ErrorCode): GraphQLError {
  return toRequestError(new GraphQLError(message, { extensions: { code } }));
}

/** Whether an Accept header names application/json itself (not only through a wildcard). */
function namesJson(accept: string | null): boolean {
  return (accept ?? '').split(',').some((range) => range.split(';')[0]!.trim().toLowerCase() === 'application/json');
}

/**
 * yoga masks errors of execution and of the request pipeline through `maskError`, but returns
 * validation errors as they are: they get the same treatment here. yoga answers `spec` errors with
 * 200 whenever it answers application/json, to a wildcard or no Accept too: those keep their 400.
 */
export function useRequestErrors(log: Log): Plugin {
  return {
    onValidate() {
      return ({ result, setResult }) => {
        if (result.length) setResult(result.map((e) => toRequestError(e, log)));
      };
    },
    onResultProcess({ request, result, setResult }) {
      if (Array.isArray(result) || Symbol.asyncIterator in result || namesJson(request.headers.get('accept'))) return;
      if (!result.errors?.some((e) => (e.extensions?.http as HttpExtension | undefined)?.spec)) return;
      setResult({ ...result, extensions: { ...result.extensions, http: { status: 400 } } });
    },
  };
}
