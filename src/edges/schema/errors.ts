import { GraphQLError } from 'graphql';
import { type ErrorCode, isErrorCode } from '../../kernel/error-codes';
import { DomainError, RateLimitedError } from '../../kernel/errors';
import { boundMessage } from '../http/respond';

/**
 * The one translation of a thrown error into what clients see, shared by GraphQL and the REST
 * adapter: domain errors keep their message and `extensions.code` (plus `field`, `retryAfter`);
 * errors of the request itself (parse, validation, variables) get code `invalid` unless they
 * carry one of Berth's; anything unexpected is logged and shown as a generic internal error.
 * Messages are bounded (a client's 5 MB value never comes back whole). No HTTP status here: each
 * transport takes its own from the code's row of src/kernel/error-codes.ts.
 */
export function toClientError(error: unknown, log: (msg: string, err: unknown) => void = console.error): GraphQLError {
  const gqlError = error instanceof GraphQLError ? error : undefined;
  const original = gqlError ? gqlError.originalError : error;
  const at = { nodes: gqlError?.nodes, source: gqlError?.source, positions: gqlError?.positions, path: gqlError?.path };
  if (original instanceof DomainError) {
    const extensions: Record<string, unknown> = { code: original.code };
    if (original instanceof RateLimitedError) extensions.retryAfter = original.retryAfterSeconds;
    if ('field' in original && original.field) extensions.field = original.field;
    return new GraphQLError(boundMessage(original.message), { ...at, extensions });
  }
  if (gqlError && (!original || !gqlError.path)) {
    // Parse, validation and variable-coercion errors (no path: nothing ran): the request was wrong.
    // Codes of the table are Berth's own; others (graphql-js, yoga, plugins) are not.
    const code: ErrorCode = isErrorCode(gqlError.extensions.code) ? gqlError.extensions.code : 'invalid';
    return new GraphQLError(boundMessage(gqlError.message), { ...at, extensions: { ...gqlError.extensions, code } });
  }
  log('unexpected error', original ?? error);
  const code: ErrorCode = 'internal';
  return new GraphQLError('internal error', { ...at, extensions: { code } });
}

/** The code of an error toClientError made. */
export function clientCodeOf(error: GraphQLError): ErrorCode {
  return isErrorCode(error.extensions.code) ? error.extensions.code : 'internal';
}
