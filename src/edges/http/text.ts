// The one check every string from a client passes at the edge (REST path, query and body;
// GraphQL variables and string literals, over HTTP and WebSocket): PostgreSQL cannot store a NUL
// (U+0000) in text or a lone UTF-16 surrogate in JSON, so such strings are refused here, with the
// field named, instead of failing a statement. Nesting is bounded too, so no walk over a client's
// value (this one, coercion, validation) can exhaust the stack.

/** Largest JSON body, REST or GraphQL. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024;

/** Deepest nesting of arrays and objects accepted in a JSON body or in GraphQL variables. */
export const MAX_JSON_DEPTH = 64;

// A NUL, a high surrogate not followed by a low one, or a low surrogate not preceded by a high one.
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding NUL is the point.
const BAD_TEXT = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why `text` cannot be stored, or null when it can. */
export function textProblem(text: string): string | null {
  const bad = BAD_TEXT.exec(text);
  if (!bad) return null;
  const unit = bad[0].charCodeAt(0);
  if (unit === 0) return 'contains U+0000 (NUL), which is not allowed';
  return `contains a lone UTF-16 surrogate (U+${unit.toString(16).toUpperCase()}), which is not valid Unicode`;
}

export interface TextIssue {
  /** Where in the value: `name`, `include[0]`, `files.src/a`, or the key itself. */
  field: string;
  problem: string;
}

/**
 * The first string (key or value) in `value` that cannot be stored, or an object or array nested
 * deeper than MAX_JSON_DEPTH; null when the whole value is fine. Iterative, so depth costs no stack.
 */
export function findTextIssue(value: unknown, field: string): TextIssue | null {
  const stack: { value: unknown; field: string; depth: number }[] = [{ value, field, depth: 0 }];
  while (stack.length) {
    const item = stack.pop()!;
    if (typeof item.value === 'string') {
      const problem = textProblem(item.value);
      if (problem) return { field: item.field, problem };
    } else if (item.value !== null && typeof item.value === 'object') {
      if (item.depth >= MAX_JSON_DEPTH) return { field: item.field, problem: `is nested more than ${MAX_JSON_DEPTH} levels deep` };
      // Pushed last to first, so the first problem in reading order is the one reported.
      if (Array.isArray(item.value)) {
        for (let i = item.value.length - 1; i >= 0; i--) {
          stack.push({ value: item.value[i], field: `${item.field}[${i}]`, depth: item.depth + 1 });
        }
      } else {
        const entries = Object.entries(item.value);
        for (const [key] of entries) {
          const keyProblem = textProblem(key);
          if (keyProblem) return { field: item.field || 'body', problem: `has a key that ${keyProblem}` };
        }
        for (const [key, v] of entries.reverse()) {
          stack.push({ value: v, field: item.field ? `${item.field}.${key}` : key, depth: item.depth + 1 });
        }
      }
    }
  }
  return null;
}

/**
 * What is wrong with a URL's query (`?a=b&…`), or null: URLSearchParams turns a malformed escape,
 * or one that is not UTF-8 (`%FF`; `%ED%A0%80`, a lone surrogate), into U+FFFD and lets it
 * through, so every edge that reads a query decodes it strictly first, as the REST path is.
 */
export function queryEncodingProblem(search: string): string | null {
  for (const pair of search.replace(/^\?/, '').split('&')) {
    try {
      decodeURIComponent(pair);
    } catch {
      const name = pair.split('=', 1)[0]!;
      return `${/^[\w.-]{1,100}$/.test(name) ? name : 'query'}: malformed percent-encoding in the query (or not UTF-8)`;
    }
  }
  return null;
}
