import { formatDuration } from '../../kernel/durations';
import { builder } from '../../kernel/graphql/builder';
import {
  type LifecycleCommand,
  NETWORKS,
  type Network as NetworkValue,
  type ResourcesSpec,
  type ServiceSpec,
  type ShareSpec,
} from './catalog';
import { deleteTemplate, getTemplate, listTemplates, putTemplate, type TemplateView, templateLog } from './service';
import { templateInputOf } from './upload';

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

const LifecycleCommandRef = builder.objectRef<LifecycleCommand>('LifecycleCommand').implement({
  description: 'A command run inside when the container is made (onCreate, updateContent, postCreate) or started (postStart)',
  fields: (t) => ({
    phase: t.exposeString('phase', { description: 'onCreateCommand, updateContentCommand, postCreateCommand or postStartCommand' }),
    name: t.exposeString('name', { nullable: true, description: "The object form's key" }),
    argv: t.exposeStringList('argv'),
  }),
});

const TemplateService = builder.objectRef<ServiceSpec>('TemplateService').implement({
  fields: (t) => ({
    service: t.exposeString('service'),
    target: t.exposeString('target'),
  }),
});

const TemplateStatus = builder.enumType('TemplateStatus', {
  description: "ready; building: its image builds on its pool's nodes (leases wait); failed: the build failed (error says why)",
  values: ['ready', 'building', 'failed'] as const,
});

const TemplateSource = builder.enumType('TemplateSource', {
  description: "catalog: the deployment's templates file; api: the organization's own (PUT /v1/templates/{name})",
  values: ['catalog', 'api'] as const,
});

export const Template = builder.objectRef<TemplateView>('Template').implement({
  fields: (t) => ({
    name: t.exposeString('name'),
    version: t.exposeInt('version', { description: '1 when made, one more on every change; a lease records the version it was made from' }),
    source: t.field({ type: TemplateSource, resolve: (s) => s.source }),
    status: t.field({ type: TemplateStatus, resolve: (s) => s.status }),
    error: t.exposeString('error', { nullable: true, description: 'Why its image did not build (status failed)' }),
    warnings: t.exposeStringList('warnings', { description: 'What of its devcontainer.json Berth does not honour, one line each' }),
    user: t.exposeString('user', { nullable: true, description: "Who commands and sessions run as (null: the image's user)" }),
    containerUser: t.exposeString('containerUser', {
      nullable: true,
      description: "The user of the container's own command (null: the image's)",
    }),
    lifecycle: t.field({ type: [LifecycleCommandRef], resolve: (s) => s.lifecycle }),
    log: t.string({
      description: "The build log of its current version, each node's under a header ('' with nothing to build)",
      resolve: (s, _a, ctx) => (s.source === 'api' ? templateLog(ctx.deps, ctx.actor, s.name) : ''),
    }),
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

builder.queryField('template', (t) =>
  t.field({
    type: Template,
    description: "One template: the organization's own, else the catalog's (no_template when neither)",
    args: { name: t.arg.string({ required: true }) },
    resolve: (_r, { name }, ctx) => getTemplate(ctx.deps, ctx.actor, name),
  }),
);

builder.mutationField('putTemplate', (t) =>
  t.field({
    type: Template,
    description:
      "Sets the organization's own version of a template (admins only): `spec` in the catalog file's format, or `devcontainer`, a devcontainer.json's text (an image; a build needs its context: PUT /v1/templates/{name} with a tar)",
    args: {
      name: t.arg.string({ required: true }),
      spec: t.arg({ type: 'JSONObject' }),
      devcontainer: t.arg.string(),
    },
    resolve: async (_root, { name, spec, devcontainer }, ctx) =>
      (await putTemplate(ctx.deps, ctx.actor, name, await templateInputOf(ctx.deps, name, spec, devcontainer))).template,
  }),
);

builder.mutationField('deleteTemplate', (t) =>
  t.boolean({
    description: "Removes the organization's own version of a template (admins only); the catalog's, if any, shows again",
    args: { name: t.arg.string({ required: true }) },
    resolve: async (_root, { name }, ctx) => {
      await deleteTemplate(ctx.deps, ctx.actor, name);
      return true;
    },
  }),
);
