import type { IncomingMessage, ServerResponse } from 'node:http';
import type { DocumentNode, GraphQLError } from 'graphql';
import type { Context, Deps } from '../../app/context';
import { statusOf } from '../../kernel/error-codes';
import { PayloadTooLargeError } from '../../kernel/errors';
import { authenticate } from '../../modules/credentials';
import { clientAddress } from '../http/client-address';
import { readBody } from '../http/read-body';
import { sendJson } from '../http/respond';
import { type CompiledOperation, compileOperations } from '../schema/compiled';
import { errorBody } from './error-bodies';
import { variablesError } from './input';
import { TextCache } from './text-cache';
import type { GraphQLHandler } from './yoga';

// POST /graphql without yoga's Fetch layer, for the common case only: a JSON query the server has
// already parsed and validated through yoga's own envelop (the same parse limits, storable
// literals, depth and cost limits), executed as a compiled operation. Everything else — another
// content type or Accept, a document seen for the first time or refused, a mutation or
// subscription, missing or refused credentials, an answer with errors — goes to yoga, which
// answers it as before: yoga stays the one definition of GraphQL over HTTP here, and this path
// only answers what yoga would answer with `{"data": …}` and a 200.

/** Bodies above this go to yoga unread. */
const MAX_BODY = 64 * 1024;
/** The media types yoga answers a JSON POST with, by the Accept headers this path serves. */
const ANSWER_TYPE: Record<string, string> = {
  '': 'application/json; charset=utf-8',
  '*/*': 'application/json; charset=utf-8',
  'application/json': 'application/json; charset=utf-8',
  'application/graphql-response+json': 'application/graphql-response+json; charset=utf-8',
};
const BODY_KEYS = new Set(['query', 'variables', 'operationName']);

interface Remembered {
  /** By operation name; '' for the document's only operation. */
  operations: Map<string, CompiledOperation>;
}

/** What yoga gets when this path hands a request over after reading it. */
export interface HandOver {
  /** The body this path already read (yoga's node adapter reads `req.body` instead of the stream). */
  body?: Buffer;
  /** The caller, when this path authenticated it: yoga must not authenticate (or count a failure) twice. */
  context?: Context;
  /** Why authentication failed here: yoga answers it as its own context error. */
  authError?: unknown;
}

export interface GraphQLPostPath {
  /** Answers the request, or returns what yoga needs to answer it. */
  handle(req: IncomingMessage, res: ServerResponse): Promise<HandOver | undefined>;
}

function parseBody(body: Buffer): { query: string; variables?: Record<string, unknown>; operationName: string } | undefined {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) return undefined;
  const params = json as Record<string, unknown>;
  for (const key in params) if (!BODY_KEYS.has(key)) return undefined;
  const { query, variables, operationName } = params;
  if (typeof query !== 'string') return undefined;
  if (variables !== undefined && variables !== null && (typeof variables !== 'object' || Array.isArray(variables))) return undefined;
  // An empty name names no operation: yoga's to refuse.
  if (operationName !== undefined && operationName !== null && (typeof operationName !== 'string' || operationName === ''))
    return undefined;
  return { query, variables: (variables ?? undefined) as Record<string, unknown> | undefined, operationName: operationName ?? '' };
}

export function createGraphQLPostPath(deps: Deps, yoga: GraphQLHandler): GraphQLPostPath {
  /** Documents remembered, by their text; those yoga refuses are never remembered. */
  const documents = new TextCache<Remembered>();

  /** Parses and validates through yoga's envelop; undefined when yoga would refuse the document. */
  function remember(query: string, req: IncomingMessage): Remembered | undefined {
    const enveloped = yoga.getEnveloped({ req });
    let document: DocumentNode;
    try {
      document = enveloped.parse(query);
      if ((enveloped.validate(enveloped.schema, document) as readonly GraphQLError[]).length) return undefined;
    } catch {
      // Whatever parsing or validating throws, yoga answers (as a request error).
      return undefined;
    }
    const remembered = { operations: compileOperations(enveloped.schema, document) };
    documents.set(query, remembered);
    return remembered;
  }

  return {
    async handle(req, res) {
      const type = req.headers['content-type'];
      const answerType = ANSWER_TYPE[req.headers.accept ?? ''];
      const length = Number(req.headers['content-length']);
      const chunked = req.headers['transfer-encoding'] !== undefined;
      const fast =
        req.url === '/graphql' &&
        (type === 'application/json' || type === 'application/json; charset=utf-8') &&
        answerType !== undefined &&
        length > 0 &&
        length <= MAX_BODY &&
        !chunked;
      // A chunked body (no length to refuse up front) is read here too, bounded as REST's are, and
      // handed to yoga read: yoga's own limit gives up on it mid-stream, destroying the request, so
      // its connection could not linger after the 413 (src/edges/http/early-answer.ts). Browsers
      // send no chunked bodies over HTTP/1.1, so reading it after credentials skips no CSRF check.
      if (!fast && !chunked) return {};
      // Credentials first: of a request they refuse, nothing is read, parsed or remembered.
      const address = clientAddress(req, deps.config.trustProxy);
      let context: Context;
      try {
        context = { deps, clientAddress: address, actor: await authenticate(deps, req.headers.authorization, address) };
      } catch (authError) {
        return { authError };
      }
      let body: Buffer;
      try {
        body = await readBody(req);
      } catch (err) {
        if (err instanceof PayloadTooLargeError) sendJson(res, statusOf('too_large'), errorBody(err.message, 'too_large'));
        // The client went away or sent less than its Content-Length (or stalled: answered 408).
        else if (!res.headersSent) res.destroy();
        return undefined;
      }
      if (!fast) return { body, context };
      const params = parseBody(body);
      if (!params || variablesError(params.variables)) return { body, context };
      const remembered = documents.get(params.query) ?? remember(params.query, req);
      const operation = remembered?.operations.get(params.operationName);
      if (operation?.kind !== 'query') return { body, context };

      const result = await operation.run(context, params.variables);
      // Errors (and variables that do not coerce) are yoga's to answer: a query runs again there.
      if (result.errors?.length || !result.data) return { body, context };
      const text = JSON.stringify({ data: result.data });
      res.writeHead(200, { 'content-type': answerType, 'content-length': Buffer.byteLength(text) });
      res.end(text);
      return undefined;
    },
  };
}
