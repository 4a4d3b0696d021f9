import SchemaBuilder from '@pothos/core';
import PrismaPlugin from '@pothos/plugin-prisma';
import RelayPlugin from '@pothos/plugin-relay';
import type { Context } from '../../app/context';
import type PrismaTypes from '../../generated/pothos-types';
import { getDatamodel } from '../../generated/pothos-types';
import { DateTimeScalar, JsonObjectScalar, SafeIntScalar } from './scalars';

// The builder only wires plugins and scalars; types live one file per resource.
export const builder = new SchemaBuilder<{
  Context: Context;
  PrismaTypes: PrismaTypes;
  DefaultFieldNullability: false;
  Scalars: {
    DateTime: { Input: Date; Output: Date };
    JSONObject: { Input: Record<string, unknown>; Output: object };
    SafeInt: { Input: number; Output: number | bigint };
  };
}>({
  plugins: [PrismaPlugin, RelayPlugin],
  defaultFieldNullability: false,
  relay: {
    // Berth ids (env_…, sb_…) are already global; no Relay node/nodes root fields.
    nodeQueryOptions: false,
    nodesQueryOptions: false,
    cursorType: 'String',
    nodesOnConnection: true,
  },
  prisma: {
    client: (ctx) => ctx.deps.prisma,
    dmmf: getDatamodel(),
    exposeDescriptions: false,
    filterConnectionTotalCount: true,
    onUnusedQuery: process.env.NODE_ENV === 'production' ? null : 'warn',
  },
});

builder.addScalarType('DateTime', DateTimeScalar);
builder.addScalarType('JSONObject', JsonObjectScalar);
builder.addScalarType('SafeInt', SafeIntScalar);

// Who may call what is checked by the services each resolver calls (src/kernel/access.ts).
builder.queryType({});
builder.mutationType({});
builder.subscriptionType({});
