import type { GraphQLSchema } from 'graphql';
import { sendJson } from '../../http/respond';
import { buildOpenApi } from '../openapi';
import type { Route } from '../route';
import { artifactRoutes } from './artifacts';
import { auditRoutes } from './audit';
import { credentialRoutes } from './credentials';
import { environmentLogRoute } from './environment-log';
import { environmentRoutes } from './environments';
import { execRoute, nodeRoutes } from './nodes';
import { sandboxRoutes } from './sandboxes';
import { snapshotRoutes } from './snapshots';
import { templateRoutes } from './templates';
import { webhookRoutes } from './webhooks';

/**
 * The /v1 route table: the one place to check against the interface specification, row by row
 * (method, path, operation, success status, response shape). The OpenAPI document comes from it.
 */
export function buildRoutes(schema: GraphQLSchema): Route[] {
  const routes: Route[] = [
    ...credentialRoutes,
    ...artifactRoutes(schema),
    ...environmentRoutes,
    ...templateRoutes(schema),
    environmentLogRoute,
    ...sandboxRoutes(schema),
    ...snapshotRoutes,
    ...nodeRoutes(schema),
    execRoute,
    ...webhookRoutes,
    ...auditRoutes,
  ];
  const openapi = {
    method: 'GET' as const,
    path: '/v1/openapi.json',
    summary: 'This API as an OpenAPI 3.1 document',
    auth: 'bearer' as const,
    openapi: { responses: { '200': { description: 'OpenAPI 3.1 document', schema: { type: 'object' } } } },
    handle: async (_req: unknown, res: Parameters<typeof sendJson>[0]) => sendJson(res, 200, document),
  };
  routes.push(openapi);
  const document = buildOpenApi(schema, routes);
  return routes;
}
