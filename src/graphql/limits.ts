import { parse, type Source } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { requestError } from './request-errors';

// graphql-js parses, validates and coerces recursively: a document nested a few thousand levels
// deep (`{ a { a { …`, or an input literal `{a: {a: …`) overflows the stack before any depth
// rule looks at it. So the size and the nesting of a document are bounded while parsing: a cheap
// scan of the brackets first, then graphql-js's own token limit.

/** Most tokens a document may have (the cost limit then bounds what it asks for). */
export const MAX_TOKENS = 50_000;
/** Deepest nesting of `{`, `[` and `(` in a document; the selection depth limit is far lower. */
export const MAX_NESTING = 64;

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
  return parse(source, { maxTokens: MAX_TOKENS });
}

/** yoga (HTTP and, through its envelop, WebSocket) parses every document with parseBounded. */
export function useParseLimits(): Plugin {
  return {
    onParse({ setParseFn }) {
      setParseFn((source) => parseBounded(source));
    },
  };
}
