import type { Actor } from '../context';
import { viewer } from '../services/credentials';
import { builder } from './builder';

const Organization = builder.prismaObject('Organization', {
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    created: t.expose('created', { type: 'DateTime' }),
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
