import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream';
import type { GraphQLSchema } from 'graphql';
import { GraphQLNonNull, GraphQLString } from 'graphql';
import { graphql } from '../../../generated/gql';
import { BadRequestError, DomainError, ValidationError } from '../../../kernel/errors';
import {
  authorizeTemplateChange,
  deleteTemplate,
  nodeBuildContext,
  nodeBuildDone,
  putTemplate,
  type TemplateView,
  templateInputOfTar,
  templateLog,
} from '../../../modules/templates';
import { sendJson } from '../../http/respond';
import { bodyFields } from '../body';
import { readJsonBody, UPLOAD_IDLE_MS } from '../http';
import type { Route, StreamRoute } from '../route';
import { shapeOf } from '../shape';

export const TemplateFields = graphql(`
  fragment TemplateFields on Template {
    name version source status error warnings description pool startMs idle hard
    shares { name direction envPath }
    services { service target }
    image resources { cpus memory pids disk } network workdir shell env warm
    user containerUser lifecycle { phase name argv }
  }
`);

const TAR_TYPES = new Set(['application/x-tar', 'application/tar']);
const TEXT = { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' };

function contentType(req: IncomingMessage): string {
  return (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
}

/** A template body that is not JSON at all is refused like any other bad template: 422 naming it. */
async function templateBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  try {
    return await readJsonBody(req);
  } catch (error) {
    if (error instanceof DomainError && error.code === 'invalid_json') throw new ValidationError(`body: ${error.message}`, 'body');
    throw error;
  }
}

const BUILD_DONE_BODY = bodyFields({ log: { type: new GraphQLNonNull(GraphQLString) }, error: { type: GraphQLString } });

/** The template routes: the list and one by GraphQL; the PUT (JSON or a tar), DELETE and log stream; the nodes' build routes. */
export function templateRoutes(schema: GraphQLSchema): Route[] {
  const template = shapeOf<TemplateView>(schema, TemplateFields);
  const wrapped = {
    type: 'object',
    properties: { template: template.schema },
    required: ['template'],
    additionalProperties: false,
  };
  const put: StreamRoute = {
    method: 'PUT',
    path: '/v1/templates/{name}',
    summary: "Set the organization's own version of a template (admins only): a JSON template, or a tar of a .devcontainer folder",
    description:
      "Content-Type application/json: the catalog file's template format. Content-Type application/x-tar: a .devcontainer folder (devcontainer.json and the build context it names), its entries under .devcontainer/ or at the root; at most 100 MiB (413). " +
      '201 when the organization had no template of that name of its own, 200 when it changed one: {template}. 403 for members, 422 invalid naming the field.',
    auth: 'bearer',
    openapi: {
      requestBody: { contentType: 'application/json', type: 'object' },
      responses: {
        '201': { description: 'Made', schema: wrapped },
        '200': { description: 'Changed', schema: wrapped },
      },
    },
    async handle(req, res, { ctx, params }) {
      const { deps, actor } = ctx!;
      const name = params.name!;
      // A member's upload is refused before its body is read.
      await authorizeTemplateChange(deps, actor, name, 'template.set');
      const type = contentType(req);
      let stored: Awaited<ReturnType<typeof putTemplate>>;
      if (TAR_TYPES.has(type)) {
        req.setTimeout(UPLOAD_IDLE_MS);
        stored = await putTemplate(deps, actor, name, await templateInputOfTar(deps, name, req));
      } else if (type === 'application/json' || type.endsWith('+json') || type === '') {
        stored = await putTemplate(deps, actor, name, { kind: 'json', template: await templateBody(req) });
      } else {
        throw new BadRequestError(`expected Content-Type application/json or application/x-tar, got "${type}"`, 'bad_content_type');
      }
      sendJson(res, stored.created ? 201 : 200, { template: await template.json(stored.template, ctx) });
    },
  };
  const remove: StreamRoute = {
    method: 'DELETE',
    path: '/v1/templates/{name}',
    summary: "Remove the organization's own version of a template (admins only); a catalog template of that name shows again",
    description:
      "204. 409 conflict when the organization has no template of that name of its own (only the catalog's); 404 no_template when neither. Live environments go on.",
    auth: 'bearer',
    openapi: { responses: { '204': { description: 'Removed' } } },
    async handle(_req, res, { ctx, params }) {
      await deleteTemplate(ctx!.deps, ctx!.actor, params.name!);
      res.writeHead(204).end();
    },
  };
  const log: StreamRoute = {
    method: 'GET',
    path: '/v1/templates/{name}/log',
    summary: "The build log of the template's current version: each node's build under a header naming it (empty with nothing to build)",
    auth: 'bearer',
    openapi: { responses: { '200': { description: 'The log', contentType: 'text/plain', schema: { type: 'string' } } } },
    async handle(_req, res, { ctx, params }) {
      const text = await templateLog(ctx!.deps, ctx!.actor, params.name!);
      res.writeHead(200, TEXT).end(text);
    },
  };
  const buildContext: StreamRoute = {
    method: 'GET',
    path: '/v1/template-builds/{id}/context',
    summary: "A template build's context (a tar), for the node building it",
    description: 'Node credentials (bnd_) only, for a build sent to that node and still under way (409 otherwise).',
    auth: 'bearer',
    openapi: {
      responses: { '200': { description: 'The context', contentType: 'application/x-tar', schema: { type: 'string', format: 'binary' } } },
    },
    async handle(_req, res: ServerResponse, { ctx, params }) {
      const stream = await nodeBuildContext(ctx!.deps, ctx!.actor, params.id!);
      res.writeHead(200, { 'content-type': 'application/x-tar' });
      pipeline(stream, res, () => undefined);
    },
  };
  const buildDone: StreamRoute = {
    method: 'POST',
    path: '/v1/template-builds/{id}',
    summary: "A node reports a template build's outcome: its log, and `error` when it failed",
    description: 'Node credentials (bnd_) only, for a build sent to that node. 204.',
    auth: 'bearer',
    openapi: {
      requestBody: BUILD_DONE_BODY.schema,
      responses: { '204': { description: 'Recorded' } },
    },
    async handle(req, res, { ctx, params }) {
      const body = await readJsonBody(req);
      BUILD_DONE_BODY.check(body);
      const outcome = { log: body.log as string, ...(typeof body.error === 'string' ? { error: body.error } : {}) };
      await nodeBuildDone(ctx!.deps, ctx!.actor, params.id!, outcome);
      res.writeHead(204).end();
    },
  };
  return [
    {
      method: 'GET',
      path: '/v1/templates',
      summary: 'Templates the organization can lease',
      document: graphql(`query RestTemplates { templates { ...TemplateFields } }`),
      result: { kind: 'wrap', field: 'templates', key: 'templates' },
      status: 200,
    },
    {
      method: 'GET',
      path: '/v1/templates/{name}',
      summary: "One template: the organization's own, else the catalog's (404 no_template)",
      document: graphql(`query RestTemplate($name: String!) { template(name: $name) { ...TemplateFields } }`),
      result: { kind: 'wrap', field: 'template', key: 'template' },
      status: 200,
    },
    put,
    remove,
    log,
    buildContext,
    buildDone,
  ];
}
