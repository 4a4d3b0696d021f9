import {
  type GraphQLInputType,
  type GraphQLNamedInputType,
  getNamedType,
  getNullableType,
  isEnumType,
  isInputObjectType,
  isListType,
  isNonNullType,
  isScalarType,
} from 'graphql';
import { ValidationError } from '../services/errors';

// A REST body is checked against the GraphQL input type of its route's variable before anything
// runs, strictly (no GraphQL coercion: a bare string is not a list, a number is not a string), and
// the errors speak REST: the field's JSON path and what is wrong with it (`restore: must be an
// array of strings`), never `Variable "$input" got invalid value …`. The types are the route's
// own, so there is no second schema to keep in step.

interface Rule {
  ok(value: unknown): boolean;
  /** "must be …", singular and plural. */
  one: string;
  many: string;
}

const INT32 = 2 ** 31;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const string: Rule = { ok: (v) => typeof v === 'string', one: 'a string', many: 'strings' };

const SCALARS: Record<string, Rule> = {
  String: string,
  ID: string,
  DateTime: string,
  Int: {
    ok: (v) => typeof v === 'number' && Number.isInteger(v) && v >= -INT32 && v < INT32,
    one: `an integer from ${-INT32} to ${INT32 - 1}`,
    many: 'integers',
  },
  SafeInt: { ok: (v) => typeof v === 'number' && Number.isSafeInteger(v), one: 'an integer', many: 'integers' },
  Float: { ok: (v) => typeof v === 'number' && Number.isFinite(v), one: 'a number', many: 'numbers' },
  Boolean: { ok: (v) => typeof v === 'boolean', one: 'true or false', many: 'booleans' },
  JSONObject: { ok: isObject, one: 'an object', many: 'objects' },
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
 * Checks the JSON body of a route with a handler of its own (no GraphQL variable) by the same rules:
 * `fields` names each field's input type; any other field is refused.
 */
export function checkBodyFields(body: Record<string, unknown>, fields: Record<string, GraphQLInputType>): void {
  checkFields(body, Object.fromEntries(Object.entries(fields).map(([name, type]) => [name, { type }])), '');
}

/** Checks a whole JSON body against the input type of the route's body variable. */
export function checkBody(body: Record<string, unknown>, type: GraphQLInputType): void {
  const inner = getNullableType(type);
  if (isInputObjectType(inner)) checkFields(body, inner.getFields(), '');
  else checkInput(body, type, 'body');
}
