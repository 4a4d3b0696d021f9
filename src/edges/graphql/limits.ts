import { costLimitPlugin } from '@escape.tech/graphql-armor-cost-limit';
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth';
import { GraphQLError, parse, type Source, type ValidationContext } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { requestError } from './request-errors';

// graphql-js parses, validates and coerces recursively: a document nested a few thousand levels
// deep (`{ a { a { …`, or an input literal `{a: {a: …`) overflows the stack before any depth
// rule looks at it. So the size and the nesting of a document are bounded while parsing: a cheap
// scan of the brackets first, then graphql-js's own token limit. Then validation bounds the
// depth of selections and what a query asks for. A document over any limit is refused with 400
// and code `invalid`, whatever the client accepts.

/** Most tokens a document may have (the cost limit then bounds what it asks for). */
export const MAX_TOKENS = 50_000;
/** Deepest nesting of `{`, `[` and `(` in a document; the selection depth limit is far lower. */
export const MAX_NESTING = 64;
/** Deepest selection. */
export const MAX_DEPTH = 12;
/** Most a query may cost (graphql-armor's count: fields, times `first` on lists, deeper levels weighing more). */
export const MAX_COST = 20_000;

/** Index just past the string starting at `i` (a block string `"""…"""` or a one-line string). */
function skipString(source: string, i: number): number {
  if (source.startsWith('"""', i)) {
    let end = source.indexOf('"""', i + 3);
    while (end > 0 && source[end - 1] === '\\') end = source.indexOf('"""', end + 3);
    return end < 0 ? source.length : end + 3;
  }
  for (let j = i + 1; j < source.length; j++) {
    const c = source[j];
    if (c === '\\') j++;
    else if (c === '"' || c === '\n' || c === '\r') return j + 1;
  }
  return source.length;
}

/** Whether brackets nest deeper than `limit` anywhere outside strings and comments. */
export function nestsDeeperThan(source: string, limit: number): boolean {
  let depth = 0;
  for (let i = 0; i < source.length; ) {
    const c = source[i];
    if (c === '"') {
      i = skipString(source, i);
      continue;
    }
    if (c === '#') {
      while (i < source.length && source[i] !== '\n' && source[i] !== '\r') i++;
      continue;
    }
    if (c === '{' || c === '[' || c === '(') {
      if (++depth > limit) return true;
    } else if (c === '}' || c === ']' || c === ')') {
      depth--;
    }
    i++;
  }
  return false;
}

/** Parses a client's document within MAX_TOKENS and MAX_NESTING; refuses it as a request error otherwise. */
export function parseBounded(source: string | Source): ReturnType<typeof parse> {
  const text = typeof source === 'string' ? source : source.body;
  if (nestsDeeperThan(text, MAX_NESTING)) {
    throw requestError(`the document is nested more than ${MAX_NESTING} levels deep`, 'invalid');
  }
  try {
    return parse(source, { maxTokens: MAX_TOKENS });
  } catch (error) {
    // graphql-js tells its token limit as a syntax error ("contains more that 50000 tokens"): it
    // is a limit, refused as the others.
    if (error instanceof GraphQLError && error.message.includes(` ${MAX_TOKENS} tokens`)) {
      throw requestError(`the document has more than ${MAX_TOKENS} tokens`, 'invalid');
    }
    throw error;
  }
}

/** yoga (HTTP and, through its envelop, WebSocket) parses every document with parseBounded. */
export function useParseLimits(): Plugin {
  return {
    onParse({ setParseFn }) {
      setParseFn((source) => parseBounded(source));
    },
  };
}

/**
 * graphql-armor throws a rejection out of `validate` by default, which no caller expects of
 * validation (the POST path answered 500, graphql-ws closed the socket with 4500): it is reported
 * as a validation error instead, answered 400 on every transport.
 */
const reportRejection = {
  propagateOnRejection: false,
  onReject: [
    (context: ValidationContext | null, error: GraphQLError) =>
      context?.reportError(new GraphQLError(error.message.replace(/^Syntax Error: /, ''), { extensions: { code: 'invalid' } })),
  ],
};

/** The depth and cost limits, in every validation through yoga's envelop (HTTP and WebSocket). */
export function useSelectionLimits(): Plugin[] {
  return [maxDepthPlugin({ n: MAX_DEPTH, ...reportRejection }), costLimitPlugin({ maxCost: MAX_COST, ...reportRejection })];
}
