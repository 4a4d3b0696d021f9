import type { Actor } from '../../app/context';
import { builder } from '../../kernel/graphql/builder';
import { viewer } from '../credentials';
import { orgLimits, storageUsed } from './limits';

const OrganizationStorage = builder.objectRef<{ used: number; limit: number }>('OrganizationStorage').implement({
  fields: (t) => ({
    used: t.expose('used', { type: 'SafeInt' }),
    limit: t.expose('limit', { type: 'SafeInt' }),
  }),
});

const Organization = builder.prismaObject('Organization', {
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    created: t.expose('created', { type: 'DateTime' }),
    storage: t.field({
      type: OrganizationStorage,
      description: "Sealed bytes its artifacts and snapshots take, and the operator's limit (413 storage_quota past it)",
      resolve: async (org, _args, ctx) => ({
        used: await storageUsed(ctx.deps.prisma, org.id),
        limit: (await orgLimits(ctx.deps, ctx.deps.prisma, org.id)).storage,
      }),
    }),
    poolShare: t.float({
      description: "The fraction of a shared pool's hot nodes and queue it may hold (429 pool_share past it)",
      resolve: async (org, _args, ctx) => (await orgLimits(ctx.deps, ctx.deps.prisma, org.id)).poolShare,
    }),
  }),
});

const Viewer = builder.objectRef<Actor>('Viewer').implement({
  description: 'Who the credential of this request acts as',
  fields: (t) => ({
    kind: t.exposeString('kind', { description: 'person, apiKey, sandbox or node' }),
    name: t.exposeString('name', { description: 'What createdBy shows for things this caller creates' }),
    admin: t.exposeBoolean('admin'),
    organization: t.prismaField({
      type: Organization,
      resolve: (query, actor, _args, ctx) => ctx.deps.prisma.organization.findUniqueOrThrow({ ...query, where: { id: actor.orgId } }),
    }),
  }),
});

builder.queryField('viewer', (t) => t.field({ type: Viewer, resolve: (_root, _args, ctx) => viewer(ctx.actor) }));
