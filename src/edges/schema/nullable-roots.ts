import { type GraphQLFieldConfigMap, GraphQLObjectType, GraphQLSchema, getNullableType } from 'graphql';

/**
 * Makes every root query and mutation field nullable. A field that fails (not found, forbidden,
 * a bad argument) is then null with its error beside it, and its siblings keep their data; a
 * non-null root field would null the whole answer (GraphQL over HTTP: execution errors are 200
 * with `errors` and the other fields' data). One rule here, for every root field to come.
 */
export function withNullableRoots(schema: GraphQLSchema): GraphQLSchema {
  const config = schema.toConfig();
  const relax = (type: GraphQLObjectType | undefined | null) => {
    if (!type) return undefined;
    const { fields, ...rest } = type.toConfig();
    const nullable: GraphQLFieldConfigMap<unknown, unknown> = {};
    for (const [name, field] of Object.entries(fields)) nullable[name] = { ...field, type: getNullableType(field.type) };
    return new GraphQLObjectType({ ...rest, fields: nullable });
  };
  const query = relax(config.query);
  const mutation = relax(config.mutation);
  const roots = new Set([config.query, config.mutation]);
  return new GraphQLSchema({
    ...config,
    query,
    mutation,
    types: config.types.filter((t) => !roots.has(t as GraphQLObjectType)),
  });
}
