import type { AuditEvent } from '../../generated/prisma/client';
import { builder } from '../../kernel/graphql/builder';
import { connectionOf } from '../../kernel/graphql/paging';
import { listAuditEvents } from './service';

const AuditActor = builder.objectRef<AuditEvent>('AuditActor').implement({
  description: 'Who did it',
  fields: (t) => ({
    kind: t.exposeString('actorKind', { description: 'person, apiKey, node or sandbox' }),
    id: t.exposeString('actorId', { description: "The person's id (usr_…), else the API key's, node's or sandbox's" }),
    name: t.exposeString('actorName', { description: "The person's email, else the key's, node's or sandbox's name, as it was then" }),
  }),
});

const AuditTarget = builder.objectRef<AuditEvent>('AuditTarget').implement({
  description: 'What it was done to',
  fields: (t) => ({
    kind: t.exposeString('targetKind', {
      description: 'environment, token, key, sandbox, node, artifact, project, quota, template, webhook',
    }),
    id: t.exposeString('targetId', { description: "The record's id (a quota's or template's name, a project's name)" }),
  }),
});

const AuditEventRef = builder.prismaObject('AuditEvent', {
  description: 'One change or command of the organization (docs/operations.md#audit-log)',
  fields: (t) => ({
    id: t.exposeID('id'),
    time: t.expose('created', { type: 'DateTime' }),
    action: t.exposeString('action', { description: 'environment.create, exec.run, token.revoke…' }),
    actor: t.field({ type: AuditActor, resolve: (e) => e }),
    target: t.field({ type: AuditTarget, resolve: (e) => e }),
    address: t.exposeString('address', { description: 'The client address, as the 429 lock counts it' }),
    outcome: t.exposeString('outcome', { description: 'success, or denied (refused with 403)' }),
    detail: t.field({
      type: 'JSONObject',
      nullable: true,
      description: 'A few facts (a command, a name); never a secret',
      resolve: (e) => (e.detail as object | null) ?? null,
    }),
  }),
});

const AuditFilter = builder.inputType('AuditFilter', {
  fields: (t) => ({
    action: t.string({ description: 'One action, such as environment.create' }),
    actor: t.string({ description: "An actor's id (usr_…, key_…, sb_…, a node's id) or a person's email" }),
    target: t.string({ description: "A target's id" }),
    since: t.string({ description: 'RFC 3339: events at or after this time' }),
    until: t.string({ description: 'RFC 3339: events before this time' }),
  }),
});

builder.queryField('auditEvents', (t) =>
  t.connection({
    type: AuditEventRef,
    description: "The organization's audit events, newest first; pages of 1-500 (default 50). Admins only",
    args: { filter: t.arg({ type: AuditFilter }) },
    resolve: async (_root, args, ctx) => connectionOf(await listAuditEvents(ctx.deps, ctx.actor, args), args),
  }),
);
