import type { Webhook as WebhookRow } from '../../generated/prisma/client';
import { WEBHOOK_EVENTS } from '../../kernel/event-names';
import { builder } from '../../kernel/graphql/builder';
import { connectionOf } from '../../kernel/graphql/paging';
import { createWebhook, deleteWebhook, listDeliveries, type WebhookSettings, webhookFilter, webhookSettings } from './service';

export const Webhook = builder.prismaObject('Webhook', {
  description:
    "An endpoint that receives the organization's events, signed the Standard Webhooks way. The secret is shown only at creation.",
  fields: (t) => ({
    id: t.exposeID('id'),
    url: t.exposeString('url'),
    events: t.exposeStringList('events', { description: `Event types it receives: ${WEBHOOK_EVENTS.join(', ')}` }),
    createdBy: t.exposeString('createdBy'),
    created: t.expose('created', { type: 'DateTime' }),
    failing: t.boolean({
      description: 'Its deliveries keep failing (several in a row); a success clears it',
      resolve: (w) => w.failingSince !== null,
    }),
    failingSince: t.expose('failingSince', { type: 'DateTime', nullable: true }),
    consecutiveFailures: t.exposeInt('consecutiveFailures', { description: 'Failed attempts since the last success' }),
  }),
});

export const WebhookDelivery = builder.prismaObject('WebhookDelivery', {
  description: 'One event for one endpoint; its id is the `webhook-id` header of every attempt',
  fields: (t) => ({
    id: t.exposeID('id'),
    event: t.exposeString('event'),
    attempts: t.exposeInt('attempts'),
    lastStatus: t.exposeInt('lastStatus', { nullable: true, description: "The endpoint's HTTP status at the last attempt" }),
    lastError: t.exposeString('lastError', { nullable: true, description: 'Why the last attempt failed (the start of the answer)' }),
    created: t.expose('created', { type: 'DateTime' }),
    lastAttempt: t.expose('lastAttempt', { type: 'DateTime', nullable: true }),
    nextAttempt: t.expose('nextAttempt', {
      type: 'DateTime',
      nullable: true,
      description: 'When it is tried next; null once delivered or given up',
    }),
    delivered: t.expose('delivered', { type: 'DateTime', nullable: true }),
    gaveUp: t.expose('gaveUp', { type: 'DateTime', nullable: true, description: 'When retries ran out (about a day of them)' }),
    history: t.relation('history', {
      description: 'Every attempt so far, the first first: what the endpoint answered each time (at most 11)',
      query: { orderBy: { attempt: 'asc' } },
    }),
  }),
});

export const WebhookAttempt = builder.prismaObject('WebhookAttempt', {
  description: "One attempt of a delivery: the endpoint's answer, or why there was none",
  fields: (t) => ({
    attempt: t.exposeInt('attempt', { description: '1 for the first' }),
    at: t.expose('at', { type: 'DateTime' }),
    status: t.exposeInt('status', { nullable: true, description: "The endpoint's HTTP status; null when it did not answer" }),
    error: t.exposeString('error', {
      nullable: true,
      description: 'Why it failed: the start of the answer, or the connection error; null when it succeeded',
    }),
  }),
});

const CreatedWebhook = builder.objectRef<{ webhook: WebhookRow; secret: string }>('CreatedWebhook').implement({
  fields: (t) => ({
    webhook: t.field({ type: Webhook, resolve: (p) => p.webhook }),
    secret: t.exposeString('secret', { description: 'whsec_…: shown once; verify signatures with it' }),
  }),
});

const WebhookSettingsRef = builder.objectRef<WebhookSettings>('WebhookSettings').implement({
  description: "How this server checks webhook endpoints' addresses (its configuration)",
  fields: (t) => ({
    allowPrivate: t.exposeBoolean('allowPrivate', {
      description:
        'URLs may resolve to internal addresses (loopback, private, link-local): the server runs with WEBHOOK_ALLOW_PRIVATE=1; otherwise they are refused',
    }),
  }),
});

const CreateWebhookInput = builder.inputType('CreateWebhookInput', {
  fields: (t) => ({
    url: t.string({ required: true, description: 'http(s) URL; internal addresses are refused unless WEBHOOK_ALLOW_PRIVATE=1' }),
    events: t.stringList({ required: true, description: `One or more of ${WEBHOOK_EVENTS.join(', ')}` }),
  }),
});

builder.queryFields((t) => ({
  webhooks: t.prismaField({
    type: [Webhook],
    description: "The organization's webhook endpoints (admins only), newest first",
    resolve: (query, _root, _args, ctx) =>
      ctx.deps.prisma.webhook.findMany({ ...query, where: webhookFilter(ctx.actor), orderBy: [{ created: 'desc' }, { id: 'desc' }] }),
  }),
  webhookSettings: t.field({
    type: WebhookSettingsRef,
    description: "How this server checks endpoints' addresses (admins only)",
    resolve: (_root, _args, ctx) => webhookSettings(ctx.deps, ctx.actor),
  }),
  webhookDeliveries: t.connection({
    type: WebhookDelivery,
    description: "An endpoint's deliveries (admins only), newest first",
    args: { id: t.arg.id({ required: true, description: 'The webhook' }) },
    resolve: async (_root, args, ctx) => connectionOf(await listDeliveries(ctx.deps, ctx.actor, String(args.id), args), args),
  }),
}));

builder.mutationFields((t) => ({
  createWebhook: t.field({
    type: CreatedWebhook,
    description: 'Registers an endpoint (admins only); at most 20 per organization',
    args: { input: t.arg({ type: CreateWebhookInput, required: true }) },
    resolve: (_root, { input }, ctx) => createWebhook(ctx.deps, ctx.actor, input),
  }),
  deleteWebhook: t.id({
    description: 'Removes an endpoint and its pending deliveries (admins only); answers its id',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => deleteWebhook(ctx.deps, ctx.actor, String(id)),
  }),
}));
