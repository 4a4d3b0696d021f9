import { GraphQLScalarType, Kind, type ValueNode } from 'graphql';

/** RFC 3339 in UTC, millisecond precision, e.g. 2026-11-22T02:14:16.522Z. */
export const DateTimeScalar = new GraphQLScalarType<Date, string>({
  name: 'DateTime',
  description: 'RFC 3339 date-time in UTC',
  serialize(value) {
    const date = value instanceof Date ? value : new Date(String(value));
    if (Number.isNaN(date.getTime())) throw new TypeError('DateTime cannot represent an invalid date');
    return date.toISOString();
  },
  parseValue(value) {
    if (typeof value !== 'string' || Number.isNaN(Date.parse(value))) throw new TypeError('DateTime must be an RFC 3339 string');
    return new Date(value);
  },
  parseLiteral(ast) {
    if (ast.kind !== Kind.STRING || Number.isNaN(Date.parse(ast.value))) throw new TypeError('DateTime must be an RFC 3339 string');
    return new Date(ast.value);
  },
});

/** Integers beyond GraphQL's 32-bit Int (artifact sizes reach 2 GiB), exact up to 2^53 - 1. */
export const SafeIntScalar = new GraphQLScalarType<number, number>({
  name: 'SafeInt',
  description: 'An integer between -(2^53 - 1) and 2^53 - 1',
  serialize(value) {
    const n = typeof value === 'bigint' ? Number(value) : Number(value);
    if (!Number.isSafeInteger(n)) throw new TypeError('SafeInt cannot represent a non-integer');
    return n;
  },
  parseValue(value) {
    if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw new TypeError('SafeInt must be a safe integer');
    return value;
  },
  parseLiteral(ast) {
    if (ast.kind !== Kind.INT) throw new TypeError('SafeInt must be an integer literal');
    const n = Number(ast.value);
    if (!Number.isSafeInteger(n)) throw new TypeError('SafeInt must be a safe integer');
    return n;
  },
});

function literalToJs(ast: ValueNode, variables?: Record<string, unknown> | null): unknown {
  switch (ast.kind) {
    case Kind.STRING:
    case Kind.BOOLEAN:
      return ast.value;
    case Kind.INT:
    case Kind.FLOAT:
      return Number(ast.value);
    case Kind.NULL:
      return null;
    case Kind.LIST:
      return ast.values.map((v) => literalToJs(v, variables));
    case Kind.OBJECT:
      return Object.fromEntries(ast.fields.map((f) => [f.name.value, literalToJs(f.value, variables)]));
    case Kind.VARIABLE:
      return variables?.[ast.name.value];
    default:
      throw new TypeError(`unsupported literal ${ast.kind}`);
  }
}

/** A JSON object (labels, shares, sandbox configuration). */
export const JsonObjectScalar = new GraphQLScalarType<Record<string, unknown>, object>({
  name: 'JSONObject',
  description: 'A JSON object',
  serialize(value) {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError('JSONObject must be an object');
    return value;
  },
  parseValue(value) {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError('JSONObject must be an object');
    return value as Record<string, unknown>;
  },
  parseLiteral(ast, variables) {
    const value = literalToJs(ast, variables);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError('JSONObject must be an object');
    return value as Record<string, unknown>;
  },
});
