import {
  type DocumentNode,
  execute,
  type FragmentDefinitionNode,
  GraphQLSchema,
  isObjectType,
  Kind,
  type OperationDefinitionNode,
  OperationTypeNode,
  validate,
} from 'graphql';
import type { Context } from '../../app/context';
import { fragmentsOf } from './adapter';
import { stripNulls } from './http';
import { type JsonSchema, selectionSchema } from './json-schema';

/** A record a stream route answers with, in the shape GraphQL gives its type. */
export interface Shape<T> {
  /** The JSON Schema of `json`'s result, for the OpenAPI document. */
  schema: JsonSchema;
  /** The record as REST shows it: the fragment's fields, null ones left out. */
  json(record: T, ctx?: Context): Promise<unknown>;
}

/**
 * The shape of a fragment's type for routes that get the record from a service rather than from a
 * GraphQL field (uploads, node calls, the join). The fragment runs on a schema rooted at its type
 * with the record as the root value, so its resolvers make the JSON and `selectionSchema` its
 * description: the same definition as every operation route spreading that fragment.
 */
export function shapeOf<T>(schema: GraphQLSchema, fragment: DocumentNode): Shape<T> {
  const fragments = fragmentsOf(fragment);
  // A generated fragment document holds the fragment first, then the fragments it spreads.
  const own = fragment.definitions[0] as FragmentDefinitionNode;
  const type = schema.getType(own.typeCondition.name.value);
  if (!isObjectType(type)) throw new Error(`fragment ${own.name.value}: ${own.typeCondition.name.value} is not an object type`);
  const rooted = new GraphQLSchema({ query: type });
  const operation: OperationDefinitionNode = {
    kind: Kind.OPERATION_DEFINITION,
    operation: OperationTypeNode.QUERY,
    selectionSet: {
      kind: Kind.SELECTION_SET,
      selections: [{ kind: Kind.FRAGMENT_SPREAD, name: own.name }],
    },
  };
  const document: DocumentNode = { kind: Kind.DOCUMENT, definitions: [operation, ...fragment.definitions] };
  const errors = validate(rooted, document);
  if (errors.length) throw new Error(`fragment ${own.name.value}: ${errors.map((e) => e.message).join('; ')}`);
  return {
    schema: selectionSchema(type, own.selectionSet, fragments),
    async json(record, ctx) {
      const result = await execute({ schema: rooted, document, rootValue: record, contextValue: ctx });
      if (result.errors?.length) throw result.errors[0]!.originalError ?? result.errors[0];
      return stripNulls(result.data);
    },
  };
}
