import type { Credential } from '../../generated/prisma/client';
import { builder } from '../../kernel/graphql/builder';
import { type CredentialEvent, createApiKey, createCliToken, keyFilter, revokeCredential, tokenFilter, watchCredentials } from './service';

export const CliToken = builder.prismaObject('Credential', {
  variant: 'CliToken',
  description: 'A CLI token: acts as the person it belongs to. The secret is shown only at creation.',
  select: { personId: true },
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    person: t.string({
      description: "The member's email",
      select: { person: { select: { email: true } } },
      resolve: (c) => c.person?.email ?? '',
    }),
    admin: t.boolean({
      description: 'Whether the member is an admin',
      select: { person: { select: { admin: true } } },
      resolve: (c) => c.person?.admin === true,
    }),
    prefix: t.exposeString('prefix', { description: 'The start of the secret, to tell tokens apart' }),
    createdBy: t.exposeString('createdBy'),
    created: t.expose('created', { type: 'DateTime' }),
    expires: t.expose('expires', { type: 'DateTime', nullable: true }),
    revoked: t.expose('revoked', { type: 'DateTime', nullable: true }),
    lastUsed: t.expose('lastUsed', { type: 'DateTime', nullable: true, description: 'Updated at most once a minute' }),
  }),
});

export const ApiKey = builder.prismaObject('Credential', {
  variant: 'ApiKey',
  description: "An organization API key. Things it creates show the key's name as createdBy.",
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    admin: t.exposeBoolean('admin', { description: 'An admin key may do what an admin may' }),
    prefix: t.exposeString('prefix'),
    createdBy: t.exposeString('createdBy'),
    created: t.expose('created', { type: 'DateTime' }),
    expires: t.expose('expires', { type: 'DateTime', nullable: true }),
    revoked: t.expose('revoked', { type: 'DateTime', nullable: true }),
    lastUsed: t.expose('lastUsed', { type: 'DateTime', nullable: true }),
  }),
});

type Created = { secret: string; credential: Credential };

const CreatedToken = builder.objectRef<Created>('CreatedToken').implement({
  fields: (t) => ({
    secret: t.exposeString('secret', { description: 'Shown once; only its hash is kept' }),
    token: t.field({ type: CliToken, resolve: (p) => p.credential }),
  }),
});

const CreatedApiKey = builder.objectRef<Created>('CreatedApiKey').implement({
  fields: (t) => ({
    secret: t.exposeString('secret', { description: 'Shown once; only its hash is kept' }),
    key: t.field({ type: ApiKey, resolve: (p) => p.credential }),
  }),
});

const CreateTokenInput = builder.inputType('CreateTokenInput', {
  fields: (t) => ({
    email: t.string({ required: false, description: "Member's email; omitted: the caller. Admins may name any member (added if new)." }),
    name: t.string({ required: false, description: 'A label for the token (default "cli")' }),
    expiresIn: t.string({ required: false, description: 'Lifetime as a duration, e.g. 90d; omitted: no expiry' }),
    admin: t.boolean({ required: false, description: 'For a new member: make them an admin (admins only)' }),
  }),
});

const CreateApiKeyInput = builder.inputType('CreateApiKeyInput', {
  fields: (t) => ({
    name: t.string({ required: true }),
    expiresIn: t.string({ required: false }),
    admin: t.boolean({ required: false, description: 'Allow admin-only operations with this key' }),
  }),
});

builder.queryFields((t) => ({
  tokens: t.prismaField({
    type: [CliToken],
    description: "CLI tokens: an admin sees the organization's, others their own. Newest first.",
    resolve: (query, _root, _args, ctx) =>
      ctx.deps.prisma.credential.findMany({ ...query, where: tokenFilter(ctx.actor), orderBy: { created: 'desc' } }),
  }),
  apiKeys: t.prismaField({
    type: [ApiKey],
    description: "The organization's API keys (admins only). Newest first.",
    resolve: (query, _root, _args, ctx) =>
      ctx.deps.prisma.credential.findMany({ ...query, where: keyFilter(ctx.actor), orderBy: { created: 'desc' } }),
  }),
}));

builder.mutationFields((t) => ({
  createToken: t.field({
    type: CreatedToken,
    args: { input: t.arg({ type: CreateTokenInput, required: false }) },
    resolve: (_root, { input }, ctx) => createCliToken(ctx.deps, ctx.actor, input ?? {}),
  }),
  createApiKey: t.field({
    type: CreatedApiKey,
    args: { input: t.arg({ type: CreateApiKeyInput, required: true }) },
    resolve: (_root, { input }, ctx) => createApiKey(ctx.deps, ctx.actor, input),
  }),
  revokeToken: t.prismaField({
    type: CliToken,
    args: { id: t.arg.id({ required: true }) },
    resolve: async (query, _root, { id }, ctx) => {
      await revokeCredential(ctx.deps, ctx.actor, 'cli', String(id));
      return ctx.deps.prisma.credential.findUniqueOrThrow({ ...query, where: { id: String(id) } });
    },
  }),
  revokeApiKey: t.prismaField({
    type: ApiKey,
    args: { id: t.arg.id({ required: true }) },
    resolve: async (query, _root, { id }, ctx) => {
      await revokeCredential(ctx.deps, ctx.actor, 'api', String(id));
      return ctx.deps.prisma.credential.findUniqueOrThrow({ ...query, where: { id: String(id) } });
    },
  }),
}));

const CredentialEventRef = builder.objectRef<CredentialEvent>('CredentialEvent').implement({
  description: 'A CLI token or API key of the organization was created or revoked',
  fields: (t) => ({
    kind: t.exposeString('kind', { description: 'token or key' }),
    action: t.exposeString('action', { description: 'created or revoked' }),
    id: t.exposeID('id'),
  }),
});

builder.subscriptionField('credentialsChanged', (t) =>
  t.field({
    type: CredentialEventRef,
    description: "Every creation and revocation of the organization's tokens and keys (admins only)",
    subscribe: (_root, _args, ctx) => watchCredentials(ctx.deps, ctx.actor),
    resolve: (event: CredentialEvent) => event,
  }),
);
