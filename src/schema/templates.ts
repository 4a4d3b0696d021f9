import { formatDuration } from '../services/durations';
import { listTemplates, upsertTemplate } from '../services/templates';
import type { ServiceSpec, ShareSpec, TemplateSpec } from '../services/templates-file';
import { builder } from './builder';

const TemplateShare = builder.objectRef<ShareSpec>('TemplateShare').implement({
  fields: (t) => ({
    name: t.exposeString('name'),
    direction: t.exposeString('direction', { description: 'in or out' }),
    envPath: t.exposeString('envPath'),
  }),
});

const TemplateService = builder.objectRef<ServiceSpec>('TemplateService').implement({
  fields: (t) => ({
    service: t.exposeString('service'),
    target: t.exposeString('target'),
  }),
});

const Template = builder.objectRef<TemplateSpec>('Template').implement({
  fields: (t) => ({
    name: t.exposeString('name'),
    description: t.exposeString('description', { nullable: true }),
    pool: t.exposeString('pool'),
    startMs: t.exposeInt('startMs'),
    idle: t.string({ resolve: (s) => formatDuration(s.idleMs) }),
    hard: t.string({ resolve: (s) => formatDuration(s.hardMs) }),
    shares: t.field({ type: [TemplateShare], resolve: (s) => s.shares }),
    services: t.field({ type: [TemplateService], resolve: (s) => s.services }),
  }),
});

builder.queryField('templates', (t) =>
  t.field({
    type: [Template],
    description: 'Templates this organization can lease',
    resolve: (_r, _a, ctx) => listTemplates(ctx.deps, ctx.actor),
  }),
);

builder.mutationField('putTemplate', (t) =>
  t.field({
    type: Template,
    description: "Sets the organization's own version of a template (admins only); same format as the catalog file",
    args: { name: t.arg.string({ required: true }), spec: t.arg({ type: 'JSONObject', required: true }) },
    resolve: (_root, { name, spec }, ctx) => upsertTemplate(ctx.deps, ctx.actor, name, spec),
  }),
);
