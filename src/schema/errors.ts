import { GraphQLError } from 'graphql';
import { DomainError, RateLimitedError, STATUS_BY_CODE } from '../services/errors';

/**
 * The one translation of a thrown error into what clients see, shared by yoga (GraphQL) and the
 * REST adapter: domain errors keep their message and `extensions.code`; anything unexpected is
 * logged and shown as a generic internal error.
 */
export function toClientError(error: unknown, log: (msg: string, err: unknown) => void = console.error): GraphQLError {
  const gqlError = error instanceof GraphQLError ? error : undefined;
  const original = gqlError ? gqlError.originalError : error;
  if (original instanceof DomainError) {
    const extensions: Record<string, unknown> = { code: original.code, http: { status: original.status } };
    if (original instanceof RateLimitedError) {
      extensions.http = { status: 429, headers: { 'Retry-After': String(original.retryAfterSeconds) } };
      extensions.retryAfter = original.retryAfterSeconds;
    }
    if ('field' in original && original.field) extensions.field = original.field;
    return new GraphQLError(original.message, { nodes: gqlError?.nodes, path: gqlError?.path, extensions });
  }
  if (gqlError && (!original || !gqlError.path)) {
    // Parse, validation and variable-coercion errors (no path: nothing ran): the request was wrong.
    const code =
      typeof gqlError.extensions.code === 'string' && gqlError.extensions.code in STATUS_BY_CODE ? gqlError.extensions.code : 'invalid';
    return new GraphQLError(gqlError.message, { nodes: gqlError.nodes, path: gqlError.path, extensions: { ...gqlError.extensions, code } });
  }
  log('unexpected error', original ?? error);
  return new GraphQLError('internal error', { nodes: gqlError?.nodes, path: gqlError?.path, extensions: { code: 'internal' } });
}
