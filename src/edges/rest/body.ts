import {
  GraphQLInputObjectType,
  type GraphQLInputType,
  type GraphQLNamedInputType,
  GraphQLNonNull,
  getNamedType,
  getNullableType,
  isEnumType,
  isInputObjectType,
  isListType,
  isNonNullType,
  isScalarType,
} from 'graphql';
import { ValidationError } from '../../kernel/errors';
import type { JsonSchema } from './json-schema';

// The one interpreter of GraphQL input types for REST: it checks a request body (`checkBody`) and
// describes it in the OpenAPI document (`inputSchema`) from the same walk and the same scalar
// table, so what the document promises and what the server accepts cannot drift apart (the Int
// range, enum values, required and unknown fields).
//
// A body is checked before anything runs, strictly (no GraphQL coercion: a bare string is not a
// list, a number is not a string), and the errors speak REST: the field's JSON path and what is
// wrong with it (`restore: must be an array of strings`), never `Variable "$input" got invalid
// value …`.

interface Rule {
  ok(value: unknown): boolean;
  /** "must be …", singular and plural. */
  one: string;
  many: string;
  /** The same rule in JSON Schema. */
  schema: JsonSchema;
}

const INT32 = 2 ** 31;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const string: Rule = { ok: (v) => typeof v === 'string', one: 'a string', many: 'strings', schema: { type: 'string' } };

const SCALARS: Record<string, Rule> = {
  String: string,
  ID: string,
  // graphql-scalars parses the text itself; an unparsable date is refused there, also as a 400.
  DateTime: { ...string, schema: { type: 'string', format: 'date-time' } },
  Int: {
    ok: (v) => typeof v === 'number' && Number.isInteger(v) && v >= -INT32 && v < INT32,
    one: `an integer from ${-INT32} to ${INT32 - 1}`,
    many: 'integers',
    schema: { type: 'integer', minimum: -INT32, maximum: INT32 - 1 },
  },
  SafeInt: {
    ok: (v) => typeof v === 'number' && Number.isSafeInteger(v),
    one: 'an integer',
    many: 'integers',
    schema: { type: 'integer', minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
  },
  Float: { ok: (v) => typeof v === 'number' && Number.isFinite(v), one: 'a number', many: 'numbers', schema: { type: 'number' } },
  Boolean: { ok: (v) => typeof v === 'boolean', one: 'true or false', many: 'booleans', schema: { type: 'boolean' } },
  JSONObject: { ok: isObject, one: 'an object', many: 'objects', schema: { type: 'object' } },
};

function describe(type: GraphQLNamedInputType, plural: boolean): string {
  if (isScalarType(type)) {
    const rule = SCALARS[type.name];
    if (rule) return plural ? rule.many : rule.one;
  }
  if (isEnumType(type))
    return plural
      ? `values of ${type.name}`
      : `one of ${type
          .getValues()
          .map((v) => v.name)
          .join(', ')}`;
  return plural ? 'objects' : 'an object';
}

function fail(field: string, problem: string): never {
  throw new ValidationError(`${field}: ${problem}`, field);
}

/** Checks one value against a GraphQL input type; `field` names it in REST words (`shares.src`, `restore[2]`). */
export function checkInput(value: unknown, type: GraphQLInputType, field: string): void {
  if (value === null) {
    if (isNonNullType(type)) fail(field, 'must not be null');
    return;
  }
  const inner = getNullableType(type);
  if (isListType(inner)) {
    if (!Array.isArray(value)) {
      const item = getNullableType(inner.ofType);
      fail(field, `must be an array of ${isListType(item) ? 'arrays' : describe(getNamedType(item), true)}`);
    }
    value.forEach((item, i) => {
      checkInput(item, inner.ofType, `${field}[${i}]`);
    });
    return;
  }
  if (isInputObjectType(inner)) {
    if (!isObject(value)) fail(field, 'must be an object');
    checkFields(value, inner.getFields(), `${field}.`);
    return;
  }
  if (isEnumType(inner)) {
    if (typeof value !== 'string' || !inner.getValue(value)) fail(field, `must be ${describe(inner, false)}`);
    return;
  }
  const rule = SCALARS[inner.name];
  if (rule && !rule.ok(value)) {
    if (inner.name === 'Int' && typeof value === 'number' && !Number.isInteger(value)) fail(field, 'must be an integer');
    fail(field, `must be ${rule.one}`);
  }
}

function checkFields(
  value: Record<string, unknown>,
  fields: Record<string, { type: GraphQLInputType; defaultValue?: unknown }>,
  prefix: string,
): void {
  for (const key of Object.keys(value)) {
    if (!(key in fields)) fail(`${prefix}${key}`, `unknown field; known: ${Object.keys(fields).join(', ')}`);
  }
  for (const [name, f] of Object.entries(fields)) {
    if (value[name] === undefined) {
      if (isNonNullType(f.type) && f.defaultValue === undefined) fail(`${prefix}${name}`, 'is required');
    } else {
      checkInput(value[name], f.type, `${prefix}${name}`);
    }
  }
}

/**
 * The JSON body of a route with a handler of its own (no GraphQL variable), by the same rules:
 * `fields` names each field's input type (and what it means); any other field is refused.
 * `schema` is its OpenAPI request schema, `check` the server's check.
 */
export function bodyFields(fields: Record<string, { type: GraphQLInputType; description?: string }>) {
  const type = new GraphQLInputObjectType({ name: 'Body', fields });
  return {
    schema: { contentType: 'application/json', ...inputSchema(new GraphQLNonNull(type)) },
    check: (body: Record<string, unknown>) => checkBody(body, type),
  };
}

/** JSON Schema of a GraphQL input type: exactly what `checkInput` accepts. */
export function inputSchema(type: GraphQLInputType): JsonSchema {
  const inner = getNullableType(type);
  if (isListType(inner)) return { type: 'array', items: inputSchema(inner.ofType) };
  if (isEnumType(inner)) {
    return { type: 'string', enum: inner.getValues().map((v) => v.name) };
  }
  if (isScalarType(inner)) return SCALARS[inner.name]?.schema ?? {};
  if (!isInputObjectType(inner)) return {};
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const [name, field] of Object.entries(inner.getFields())) {
    properties[name] = { ...inputSchema(field.type), ...(field.description ? { description: field.description } : {}) };
    if (isNonNullType(field.type) && field.defaultValue === undefined) required.push(name);
  }
  return { type: 'object', properties, required, additionalProperties: false };
}

/** Checks a whole JSON body against the input type of the route's body variable. */
export function checkBody(body: Record<string, unknown>, type: GraphQLInputType): void {
  const inner = getNullableType(type);
  if (isInputObjectType(inner)) checkFields(body, inner.getFields(), '');
  else checkInput(body, type, 'body');
}
