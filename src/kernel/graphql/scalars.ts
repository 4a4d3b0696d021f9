// The custom scalars, from graphql-scalars; only what Berth promises beyond them is added here.
import { GraphQLScalarType } from 'graphql';
import { GraphQLDateTime, GraphQLJSONObject, GraphQLSafeInt } from 'graphql-scalars';

/**
 * RFC 3339 in UTC with milliseconds, e.g. 2026-11-22T02:14:16.522Z. graphql-scalars serializes a
 * Date object and leaves the text to the JSON encoder; the API promises this exact form.
 */
export const DateTimeScalar = new GraphQLScalarType<Date, string>({
  ...GraphQLDateTime.toConfig(),
  description: 'An RFC 3339 date-time in UTC with milliseconds, such as 2026-11-22T02:14:16.522Z',
  serialize: (value) => (GraphQLDateTime.serialize(value) as Date).toISOString(),
});

/** Integers beyond GraphQL's 32-bit Int (artifact sizes reach 2 GiB); BigInt columns come as bigint. */
export const SafeIntScalar = new GraphQLScalarType({
  ...GraphQLSafeInt.toConfig(),
  serialize: (value) => GraphQLSafeInt.serialize(typeof value === 'bigint' ? Number(value) : value) as number,
});

/** A JSON object (labels, the sandbox configuration, a template). */
export const JsonObjectScalar = GraphQLJSONObject;
