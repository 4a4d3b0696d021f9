import { GraphQLNonNull, type GraphQLSchema, isInputObjectType } from 'graphql';
import { fragmentsOf, operationOf } from './adapter';
import { inputSchema } from './body';
import { type JsonSchema, selectionSchema } from './json-schema';
import { isStreamRoute, type OperationRoute, type Route } from './route';

const ERROR: JsonSchema = {
  type: 'object',
  properties: { error: { type: 'string' }, code: { type: 'string' } },
  required: ['error'],
};

function responseSchema(schema: GraphQLSchema, route: OperationRoute): JsonSchema {
  const op = operationOf(route.document);
  const root = op.operation === 'mutation' ? schema.getMutationType() : schema.getQueryType();
  const fragments = fragmentsOf(route.document);
  const fieldNode = op.selectionSet.selections.find((s) => s.kind === 'Field' && (s.alias?.value ?? s.name.value) === route.result.field);
  if (!root || !fieldNode || fieldNode.kind !== 'Field') throw new Error(`route ${route.path}: no root field ${route.result.field}`);
  const field = root.getFields()[fieldNode.name.value]!;
  const value = selectionSchema(field.type, fieldNode.selectionSet, fragments);
  switch (route.result.kind) {
    case 'field':
      return value;
    case 'wrap':
      return { type: 'object', properties: { [route.result.key]: value }, required: [route.result.key], additionalProperties: false };
    case 'list': {
      const nodes = (value.properties as Record<string, JsonSchema>).nodes!;
      return {
        type: 'object',
        properties: { [route.result.key]: nodes, next: { type: 'string', description: 'cursor of the next page; absent on the last' } },
        required: [route.result.key],
        additionalProperties: false,
      };
    }
  }
}

function requestBody(schema: GraphQLSchema, route: OperationRoute): JsonSchema | undefined {
  if (!route.body) return undefined;
  const op = operationOf(route.document);
  const def = op.variableDefinitions?.find((v) => v.variable.name.value === route.body!.variable);
  const typeName = def && (def.type.kind === 'NonNullType' ? def.type.type : def.type);
  const type = typeName && typeName.kind === 'NamedType' ? schema.getType(typeName.name.value) : undefined;
  if (!isInputObjectType(type)) return undefined;
  return {
    required: route.body.required === true,
    content: { 'application/json': { schema: inputSchema(new GraphQLNonNull(type)) } },
  };
}

/** OpenAPI 3.1 for the /v1 API, derived from the same route table the server answers with. */
export function buildOpenApi(schema: GraphQLSchema, routes: Route[]): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const route of routes) {
    const params = [
      ...[...route.path.matchAll(/\{(\w+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } })),
      ...(route.params ?? [])
        .filter((p) => p.in === 'query')
        .map((p) => ({
          name: p.name,
          in: 'query',
          required: false,
          ...(p.description ? { description: p.description } : {}),
          schema: p.list ? { type: 'array', items: { type: p.type } } : { type: p.type },
          ...(p.list ? { style: 'form', explode: true } : {}),
        })),
    ];
    const errors = { default: { description: 'Error', content: { 'application/json': { schema: ERROR } } } };
    let operation: JsonSchema;
    if (isStreamRoute(route)) {
      const { requestBody, responses } = route.openapi;
      operation = {
        ...(requestBody
          ? {
              requestBody: {
                required: true,
                content: { [requestBody.contentType]: { schema: { ...requestBody, contentType: undefined } } },
              },
            }
          : {}),
        responses: {
          ...Object.fromEntries(
            Object.entries(responses).map(([status, r]) => [
              status,
              {
                description: r.description,
                ...(r.schema ? { content: { [r.contentType ?? 'application/json']: { schema: r.schema } } } : {}),
              },
            ]),
          ),
          ...errors,
        },
      };
    } else {
      const body = requestBody(schema, route);
      operation = {
        ...(body ? { requestBody: body } : {}),
        responses: {
          [String(route.status)]: {
            description: route.summary,
            content: { 'application/json': { schema: responseSchema(schema, route) } },
          },
          ...errors,
        },
      };
    }
    paths[route.path] ??= {};
    paths[route.path]![route.method.toLowerCase()] = {
      summary: route.summary,
      ...(route.description ? { description: route.description } : {}),
      ...(params.length ? { parameters: params } : {}),
      ...operation,
      ...(isStreamRoute(route) && route.auth === 'none' ? { security: [] } : {}),
    };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Berth', version: '1.0.0', description: 'Build environment leasing service: the /v1 REST API.' },
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    security: [{ bearer: [] }],
    paths,
  };
}
