import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type DocumentNode,
  execute,
  type FragmentDefinitionNode,
  type GraphQLError,
  type GraphQLSchema,
  Kind,
  type OperationDefinitionNode,
  validate,
} from 'graphql';
import type { Context, Deps } from '../context';
import { toClientError } from '../schema/errors';
import { authenticate } from '../services/auth';
import { DomainError, STATUS_BY_CODE } from '../services/errors';
import { clientAddress, readJsonBody, sendError, sendJson, stripNulls } from './http';
import { isStreamRoute, type OperationRoute, type Param, type Route } from './route';

interface CompiledRoute {
  route: Route;
  pattern: RegExp;
  pathParams: string[];
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
      throw new DomainError(`query parameter ${param.name} must be true or false`, 'invalid', 422);
    }
    if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(Number(value))) {
      throw new DomainError(`query parameter ${param.name} must be an integer`, 'invalid', 422);
    }
    return Number(value);
  };
  if (param.list) return raw.map(one);
  if (raw.length > 1) throw new DomainError(`query parameter ${param.name} is given more than once`, 'invalid', 422);
  return one(raw[0]!);
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

function errorStatus(err: GraphQLError): number {
  const http = err.extensions.http as { status?: number } | undefined;
  return http?.status ?? STATUS_BY_CODE[String(err.extensions.code)] ?? 500;
}

function sendClientError(res: ServerResponse, error: unknown): void {
  const err = toClientError(error);
  const http = err.extensions.http as { headers?: Record<string, string> } | undefined;
  sendError(res, errorStatus(err), err.message, String(err.extensions.code ?? 'internal'), http?.headers ?? {});
}

/**
 * The REST edge: every /v1 route is one GraphQL operation, parsed and validated once here at
 * start, then executed directly on the schema per request (no GraphQL-over-HTTP layer between).
 */
export function createRestHandler(deps: Deps, schema: GraphQLSchema, routes: Route[]): RestHandler {
  const compiled: CompiledRoute[] = routes.map((route) => {
    if (!isStreamRoute(route)) {
      const errors = validate(schema, route.document);
      if (errors.length) throw new Error(`route ${route.method} ${route.path}: ${errors.map((e) => e.message).join('; ')}`);
      operationOf(route.document);
    }
    return { route, ...compilePath(route.path) };
  });

  async function run(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const matches = compiled
      .map((c) => ({ c, m: c.pattern.exec(url.pathname) }))
      .filter((x): x is { c: CompiledRoute; m: RegExpExecArray } => x.m !== null);
    if (matches.length === 0) return sendError(res, 404, `no route for ${url.pathname}`, 'not_found');
    const hit = matches.find((x) => x.c.route.method === req.method || (req.method === 'HEAD' && x.c.route.method === 'GET'));
    if (!hit) {
      const allow = [...new Set(matches.map((x) => x.c.route.method))].join(', ');
      return sendError(res, 405, `${req.method} is not allowed on ${url.pathname}; allowed: ${allow}`, 'method_not_allowed', { allow });
    }
    const { route } = hit.c;
    let params: Record<string, string>;
    try {
      params = Object.fromEntries(hit.c.pathParams.map((name, i) => [name, decodeURIComponent(hit.m[i + 1]!)]));
    } catch {
      return sendError(res, 400, 'malformed percent-encoding in the path', 'bad_request');
    }
    const needsAuth = !isStreamRoute(route) || route.auth === 'bearer';
    const ctx: Context | undefined = needsAuth
      ? { deps, actor: await authenticate(deps, req.headers.authorization, clientAddress(req)) }
      : undefined;
    if (isStreamRoute(route)) return route.handle(req, res, { ctx, deps, params, query: url.searchParams });

    const variables: Record<string, unknown> = {};
    for (const name of hit.c.pathParams) variables[name] = params[name];
    for (const param of route.params ?? []) {
      if (param.in !== 'query') continue;
      const raw = url.searchParams.getAll(param.name);
      if (raw.length) variables[param.variable ?? param.name] = coerceParam(param, raw);
    }
    if (route.body) {
      const body = await readJsonBody(req);
      if (Object.keys(body).length || route.body.required) variables[route.body.variable] = body;
    } else {
      req.resume();
    }
    const result = await execute({ schema, document: route.document, variableValues: variables, contextValue: ctx });
    if (result.errors?.length) return sendClientError(res, result.errors[0]);
    sendJson(res, route.status, stripNulls(shapeResult(route, result.data as Record<string, unknown>)));
  }

  return {
    async handle(req, res) {
      const url = new URL(req.url ?? '/', 'http://berth.invalid');
      if (url.pathname !== '/v1' && !url.pathname.startsWith('/v1/')) return false;
      try {
        await run(req, res, url);
      } catch (error) {
        if (res.headersSent) res.destroy(error as Error);
        else sendClientError(res, error);
      }
      return true;
    },
  };
}

export { operationOf };
