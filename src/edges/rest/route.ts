import type { IncomingMessage, ServerResponse } from 'node:http';
import type { DocumentNode } from 'graphql';
import type { Context, Deps } from '../../app/context';
import type { JsonSchema } from './json-schema';

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** A path or query parameter, passed to the operation as the variable of the same name unless renamed. */
export interface Param {
  name: string;
  in: 'path' | 'query';
  type: 'string' | 'integer' | 'boolean';
  /** Repeatable query parameter (`?label=a=b&label=c=d`). */
  list?: boolean;
  variable?: string;
  description?: string;
}

/** Cursor paging shared by every list: `limit` and `cursor` become the connection's `first` and `after`. */
export const PAGE_PARAMS: Param[] = [
  { name: 'limit', in: 'query', type: 'integer', variable: 'first', description: 'page size, 1-500 (default 50)' },
  { name: 'cursor', in: 'query', type: 'string', variable: 'after', description: 'the `next` of the previous page' },
];

/** How the operation's root field becomes the REST body. */
export type Result =
  /** The field's value is the body (e.g. an unwrapped Environment). */
  | { kind: 'field'; field: string }
  /** `{ [key]: value }`. */
  | { kind: 'wrap'; field: string; key: string }
  /** A connection becomes `{ [key]: nodes, next?: cursor }`. */
  | { kind: 'list'; field: string; key: string };

interface RouteBase {
  method: Method;
  /** OpenAPI-style path, e.g. /v1/environments/{id}. */
  path: string;
  summary: string;
  description?: string;
  params?: Param[];
}

/** A route answered by executing one GraphQL operation on the shared schema. */
export interface OperationRoute extends RouteBase {
  document: DocumentNode;
  /** The JSON body becomes this variable (an input object). */
  body?: { variable: string; required?: boolean };
  result: Result;
  status: number;
}

/** A route that streams bytes (artifact bodies) and calls services itself. */
export interface StreamRoute extends RouteBase {
  /** 'none' when the route authenticates its own way (signed links, join keys). */
  auth: 'bearer' | 'none';
  /** `ctx` is set when `auth` is 'bearer'; `deps` always (routes that authenticate their own way need it). */
  handle(
    req: IncomingMessage,
    res: ServerResponse,
    args: { ctx?: Context; deps: Deps; params: Record<string, string>; query: URLSearchParams; clientAddress: string },
  ): Promise<void>;
  openapi: {
    requestBody?: JsonSchema & { contentType: string };
    responses: Record<string, { description: string; contentType?: string; schema?: JsonSchema }>;
  };
}

export type Route = OperationRoute | StreamRoute;

export function isStreamRoute(route: Route): route is StreamRoute {
  return 'handle' in route;
}
