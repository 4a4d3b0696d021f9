import SchemaBuilder from '@pothos/core';
import PrismaPlugin from '@pothos/plugin-prisma';
import RelayPlugin from '@pothos/plugin-relay';
import ScopeAuthPlugin from '@pothos/plugin-scope-auth';
import type { Context } from '../context';
import type PrismaTypes from '../generated/pothos-types';
import { getDatamodel } from '../generated/pothos-types';
import { ForbiddenError } from '../services/errors';
import { DateTimeScalar, JsonObjectScalar, SafeIntScalar } from './scalars';

// The builder only wires plugins and scalars; types live one file per resource.
export const builder = new SchemaBuilder<{
  Context: Context;
  PrismaTypes: PrismaTypes;
  AuthScopes: { admin: boolean; person: boolean; member: boolean };
  DefaultFieldNullability: false;
  Scalars: {
    DateTime: { Input: Date; Output: Date };
    JSONObject: { Input: Record<string, unknown>; Output: object };
    SafeInt: { Input: number; Output: number | bigint };
  };
}>({
  plugins: [ScopeAuthPlugin, PrismaPlugin, RelayPlugin],
  defaultFieldNullability: false,
  scopeAuth: {
    // Refuse a subscription when it starts, not on each event it would deliver.
    authorizeOnSubscribe: true,
    // `member`: anyone of the organization but a sandbox agent (docs/sandboxes.md).
    authScopes: (ctx) => ({ admin: ctx.actor.admin, person: ctx.actor.kind === 'person', member: ctx.actor.kind !== 'sandbox' }),
    unauthorizedError: (_parent, ctx) =>
      ctx.actor.kind === 'sandbox'
        ? new ForbiddenError('a sandbox credential can only read, watch and report on its own sandbox')
        : new ForbiddenError(),
  },
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

// Sandbox agent credentials may use only the fields that opt out with `skipTypeScopes`.
builder.queryType({ authScopes: { member: true } });
builder.mutationType({ authScopes: { member: true } });
builder.subscriptionType({ authScopes: { member: true } });
