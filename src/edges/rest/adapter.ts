import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type DocumentNode,
  execute,
  type FragmentDefinitionNode,
  GraphQLError,
  type GraphQLInputType,
  type GraphQLSchema,
  Kind,
  type OperationDefinitionNode,
  typeFromAST,
  validate,
} from 'graphql';
import type { Context, Deps, Log } from '../../app/context';
import { BadRequestError, ValidationError } from '../../kernel/errors';
import { show } from '../../kernel/show';
import { authenticate } from '../../modules/credentials';
import { noteRoute } from '../../observability/requests';
import { clientAddress } from '../http/client-address';
import { sendError, sendJson } from '../http/respond';
import { queryEncodingProblem, textProblem } from '../http/text';
import { type CompiledOperation, compileOperations } from '../schema/compiled';
import { clientCodeOf, toClientError } from '../schema/errors';
import { checkBody } from './body';
import { readJsonBody, stripNulls } from './http';
import { isStreamRoute, type OperationRoute, type Param, type Route } from './route';

interface CompiledRoute {
  route: Route;
  /** A query route's operation, compiled once (src/edges/graphql/compiled.ts). */
  query?: CompiledOperation;
  pattern: RegExp;
  pathParams: string[];
  /** The GraphQL input type the JSON body is checked against (operation routes with a body). */
  bodyType?: GraphQLInputType;
}

export interface RestHandler {
  /** Answers a /v1 request; returns false when the path is not under /v1. */
  handle(req: IncomingMessage, res: ServerResponse): Promise<boolean>;
}

function compilePath(path: string): { pattern: RegExp; pathParams: string[] } {
  const pathParams: string[] = [];
  const source = path
    .split('/')
    .map((part) => {
      const m = /^\{(\w+)\}$/.exec(part);
      if (!m) return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      pathParams.push(m[1]!);
      return '([^/]+)';
    })
    .join('/');
  return { pattern: new RegExp(`^${source}/?$`), pathParams };
}

function operationOf(doc: DocumentNode): OperationDefinitionNode {
  const op = doc.definitions.find((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION);
  if (!op) throw new Error('route document has no operation');
  return op;
}

export function fragmentsOf(doc: DocumentNode): Map<string, FragmentDefinitionNode> {
  return new Map(
    doc.definitions.filter((d): d is FragmentDefinitionNode => d.kind === Kind.FRAGMENT_DEFINITION).map((d) => [d.name.value, d]),
  );
}

function coerceParam(param: Param, raw: string[]): unknown {
  const one = (value: string): unknown => {
    if (param.type === 'string') return value;
    if (param.type === 'boolean') {
      if (value === 'true' || value === '') return true;
      if (value === 'false') return false;
      throw new ValidationError(`${param.name}: must be true or false`, param.name);
    }
    if (!/^-?\d{1,16}$/.test(value) || !Number.isSafeInteger(Number(value))) {
      throw new ValidationError(`${param.name}: must be an integer`, param.name);
    }
    return Number(value);
  };
  return param.list ? raw.map(one) : one(raw[0]!);
}

/**
 * The query string, by one policy for every route: only the route's parameters, each once unless
 * it is repeatable, every value storable. A typo must not silently fall back to a default.
 */
function checkQuery(route: Route, query: URLSearchParams): void {
  const params = (route.params ?? []).filter((p) => p.in === 'query');
  for (const key of new Set(query.keys())) {
    const param = params.find((p) => p.name === key);
    if (!param) {
      const known = params.length ? `known: ${params.map((p) => p.name).join(', ')}` : 'this route takes none';
      throw new ValidationError(`unknown query parameter ${show(key)}; ${known}`, key);
    }
    const values = query.getAll(key);
    if (!param.list && values.length > 1) throw new ValidationError(`${key}: given more than once`, key);
    for (const value of values) {
      const problem = textProblem(value);
      if (problem) throw new ValidationError(`${key}: ${problem}`, key);
    }
  }
}

/** Path parameters, percent-decoded; every value storable. */
function pathParams(names: string[], match: RegExpExecArray): Record<string, string> {
  const params: Record<string, string> = {};
  names.forEach((name, i) => {
    let value: string;
    try {
      value = decodeURIComponent(match[i + 1]!);
    } catch {
      throw new BadRequestError(`${name}: malformed percent-encoding in the path (or not UTF-8)`);
    }
    const problem = textProblem(value);
    if (problem) throw new ValidationError(`${name}: ${problem}`, name);
    params[name] = value;
  });
  return params;
}

/** Maps the operation's data to the REST body the route promises. */
function shapeResult(route: OperationRoute, data: Record<string, unknown>): unknown {
  const value = data[route.result.field];
  switch (route.result.kind) {
    case 'field':
      return value;
    case 'wrap':
      return { [route.result.key]: value };
    case 'list': {
      const conn = value as { nodes: unknown[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } };
      return { [route.result.key]: conn.nodes, next: conn.pageInfo.hasNextPage ? conn.pageInfo.endCursor : null };
    }
  }
}

/**
 * A route may give a GraphQL variable a REST name (`limit` for `first`): an error about the
 * variable is told in the parameter's name, so REST clients read their own words.
 */
function inRestWords(error: GraphQLError, route: Route): GraphQLError {
  const field = error.extensions.field;
  const param = (route.params ?? []).find((p) => p.variable !== undefined && p.variable === field);
  if (!param || !error.message.startsWith(`${param.variable}:`)) return error;
  return new GraphQLError(`${param.name}${error.message.slice(param.variable!.length)}`, {
    extensions: { ...error.extensions, field: param.name },
  });
}

/** The REST answer to an error: `{error, code}`, with the status of its code (src/kernel/error-codes.ts). */
function sendClientError(res: ServerResponse, error: unknown, log: Log, route?: Route): void {
  const converted = toClientError(error, log);
  const err = route ? inRestWords(converted, route) : converted;
  const code = clientCodeOf(err);
  const retryAfter = err.extensions.retryAfter;
  sendError(res, code, err.message, typeof retryAfter === 'number' ? { 'retry-after': String(retryAfter) } : {});
}

/**
 * The REST edge: every /v1 route is one GraphQL operation, parsed and validated once here at
 * start, then executed directly on the schema per request (no GraphQL-over-HTTP layer between).
 * Before anything runs, the request is checked by the rules every route shares: known query
 * parameters only, storable strings in the path, the query and the body, and a body of the
 * route's input type (src/edges/rest/body.ts).
 */
export function createRestHandler(deps: Deps, schema: GraphQLSchema, routes: Route[], log: Log): RestHandler {
  const compiled: CompiledRoute[] = routes.map((route) => {
    let bodyType: GraphQLInputType | undefined;
    if (!isStreamRoute(route)) {
      const errors = validate(schema, route.document);
      if (errors.length) throw new Error(`route ${route.method} ${route.path}: ${errors.map((e) => e.message).join('; ')}`);
      const op = operationOf(route.document);
      if (route.body) {
        const def = op.variableDefinitions?.find((v) => v.variable.name.value === route.body!.variable);
        bodyType = def && (typeFromAST(schema, def.type as never) as GraphQLInputType | undefined);
        if (!bodyType) throw new Error(`route ${route.method} ${route.path}: no variable $${route.body.variable}`);
      }
    }
    const operation = isStreamRoute(route) ? undefined : compileOperations(schema, route.document).get('');
    return { route, bodyType, query: operation?.kind === 'query' ? operation : undefined, ...compilePath(route.path) };
  });

  async function run(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const matches: { c: CompiledRoute; m: RegExpExecArray }[] = [];
    let hit: { c: CompiledRoute; m: RegExpExecArray } | undefined;
    for (const c of compiled) {
      const m = c.pattern.exec(url.pathname);
      if (!m) continue;
      matches.push({ c, m });
      if (c.route.method === req.method || (req.method === 'HEAD' && c.route.method === 'GET')) {
        hit = { c, m };
        break;
      }
    }
    if (matches.length === 0) return sendError(res, 'not_found', `no route for ${url.pathname}`);
    if (!hit) {
      noteRoute(matches[0]!.c.route.path);
      const allow = [...new Set(matches.map((x) => x.c.route.method))].join(', ');
      return sendError(res, 'method_not_allowed', `${req.method} is not allowed on ${url.pathname}; allowed: ${allow}`, { allow });
    }
    const { route, bodyType } = hit.c;
    noteRoute(route.path);
    const params = pathParams(hit.c.pathParams, hit.m);
    const encoding = queryEncodingProblem(url.search);
    if (encoding) throw new BadRequestError(encoding);
    checkQuery(route, url.searchParams);
    const address = clientAddress(req, deps.config.trustProxy);
    const needsAuth = !isStreamRoute(route) || route.auth === 'bearer';
    const ctx: Context | undefined = needsAuth
      ? { deps, clientAddress: address, actor: await authenticate(deps, req.headers.authorization, address) }
      : undefined;
    if (isStreamRoute(route)) return route.handle(req, res, { ctx, deps, params, query: url.searchParams, clientAddress: address });

    const variables: Record<string, unknown> = {};
    for (const name of hit.c.pathParams) variables[name] = params[name];
    for (const param of route.params ?? []) {
      if (param.in !== 'query') continue;
      const raw = url.searchParams.getAll(param.name);
      if (raw.length) variables[param.variable ?? param.name] = coerceParam(param, raw);
    }
    if (route.body) {
      const body = await readJsonBody(req);
      if (Object.keys(body).length || route.body.required) {
        checkBody(body, bodyType!);
        variables[route.body.variable] = body;
      }
    } else {
      req.resume();
    }
    let result = hit.c.query ? await hit.c.query.run(ctx!, variables) : undefined;
    // An answer with errors comes from graphql-js, whose errors the REST answers are made of (a
    // query reads again, changing nothing); mutations always run there.
    if (!result || result.errors?.length) {
      result = await execute({ schema, document: route.document, variableValues: variables, contextValue: ctx });
    }
    if (result.errors?.length) return sendClientError(res, result.errors[0], log, route);
    sendJson(res, route.status, stripNulls(shapeResult(route, result.data as Record<string, unknown>)));
  }

  return {
    async handle(req, res) {
      const url = new URL(req.url ?? '/', 'http://berth.invalid');
      if (url.pathname !== '/v1' && !url.pathname.startsWith('/v1/')) return false;
      try {
        await run(req, res, url);
      } catch (error) {
        // The client went away mid-request (a reset, a stalled body cut): nobody to answer.
        if (req.destroyed && !req.complete) res.destroy();
        else if (res.headersSent) res.destroy(error as Error);
        // Answered before the whole body was read, the connection closes after it (src/edges/http/early-answer.ts).
        else sendClientError(res, error, log);
      }
      return true;
    },
  };
}

export { operationOf };
