import { formatDuration } from '../../kernel/durations';
import { builder } from '../../kernel/graphql/builder';
import { NETWORKS, type Network as NetworkValue, type ResourcesSpec, type ServiceSpec, type ShareSpec, type TemplateSpec } from './catalog';
import { listTemplates, upsertTemplate } from './service';

export const Network = builder.enumType('Network', {
  description: 'What an environment can reach: none (loopback only) or egress (outbound, never the node or link-local addresses)',
  values: NETWORKS,
});

/** A stored network name as the enum (anything unknown is a bug, not a value to show). */
export function networkOf(value: string): NetworkValue {
  const network = NETWORKS.find((n) => n === value);
  if (!network) throw new Error(`unknown network ${value}`);
  return network;
}

export const Resources = builder.objectRef<ResourcesSpec>('Resources').implement({
  description: 'Limits of an environment; only those set are present',
  fields: (t) => ({
    cpus: t.exposeFloat('cpus', { nullable: true, description: 'CPUs, 0.1-64' }),
    memory: t.exposeString('memory', { nullable: true, description: 'Memory, as written (512MiB, 4GiB)' }),
    pids: t.exposeInt('pids', { nullable: true, description: 'Most processes and threads at once' }),
    disk: t.exposeString('disk', { nullable: true, description: 'Disk space, as written (8GiB)' }),
  }),
});

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

export const Template = builder.objectRef<TemplateSpec>('Template').implement({
  fields: (t) => ({
    name: t.exposeString('name'),
    description: t.exposeString('description', { nullable: true }),
    pool: t.exposeString('pool'),
    startMs: t.exposeInt('startMs'),
    idle: t.string({ resolve: (s) => formatDuration(s.idleMs) }),
    hard: t.string({ resolve: (s) => formatDuration(s.hardMs) }),
    shares: t.field({ type: [TemplateShare], resolve: (s) => s.shares }),
    services: t.field({ type: [TemplateService], resolve: (s) => s.services }),
    image: t.exposeString('image', { nullable: true, description: 'OCI image, normalised (docker.io/library/node:20)' }),
    resources: t.field({ type: Resources, resolve: (s) => s.resources }),
    network: t.field({ type: Network, resolve: (s) => s.network }),
    workdir: t.exposeString('workdir', { description: 'Working directory of its processes' }),
    shell: t.exposeString('shell', { description: 'What an interactive session runs when it names no command (berth shell)' }),
    env: t.field({ type: 'JSONObject', description: 'Variables of its processes', resolve: (s) => s.env }),
    warm: t.exposeInt('warm', { description: "Started, unclaimed containers its pool's nodes keep for its leases, 0-32" }),
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
