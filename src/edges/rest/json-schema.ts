import {
  type FragmentDefinitionNode,
  type GraphQLOutputType,
  type GraphQLSchema,
  getNullableType,
  isEnumType,
  isListType,
  isNonNullType,
  isObjectType,
  isScalarType,
  Kind,
  type SelectionSetNode,
} from 'graphql';

export type JsonSchema = Record<string, unknown>;

const SCALARS: Record<string, JsonSchema> = {
  String: { type: 'string' },
  ID: { type: 'string' },
  Int: { type: 'integer' },
  SafeInt: { type: 'integer' },
  Float: { type: 'number' },
  Boolean: { type: 'boolean' },
  DateTime: { type: 'string', format: 'date-time' },
  JSONObject: { type: 'object' },
};

function scalar(name: string): JsonSchema {
  return SCALARS[name] ?? {};
}

/**
 * JSON Schema of what a selection returns, as REST shows it: null fields are left out, so only
 * non-null fields are required. This is how the OpenAPI document follows the route table.
 */
export function selectionSchema(
  type: GraphQLOutputType,
  selectionSet: SelectionSetNode | undefined,
  fragments: Map<string, FragmentDefinitionNode>,
): JsonSchema {
  const inner = getNullableType(type);
  if (isListType(inner)) return { type: 'array', items: selectionSchema(inner.ofType, selectionSet, fragments) };
  if (isScalarType(inner)) return scalar(inner.name);
  if (isEnumType(inner)) return { type: 'string', enum: inner.getValues().map((v) => v.value as string) };
  if (!isObjectType(inner) || !selectionSet) return {};
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  const visit = (set: SelectionSetNode) => {
    for (const sel of set.selections) {
      if (sel.kind === Kind.FRAGMENT_SPREAD) {
        const frag = fragments.get(sel.name.value);
        if (frag) visit(frag.selectionSet);
      } else if (sel.kind === Kind.INLINE_FRAGMENT) {
        visit(sel.selectionSet);
      } else {
        const field = inner.getFields()[sel.name.value];
        if (!field) continue;
        const key = sel.alias?.value ?? sel.name.value;
        properties[key] = selectionSchema(field.type, sel.selectionSet, fragments);
        if (isNonNullType(field.type) && !required.includes(key)) required.push(key);
      }
    }
  };
  visit(selectionSet);
  return { type: 'object', properties, required, additionalProperties: false };
}

export type { GraphQLSchema };
