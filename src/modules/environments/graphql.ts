import type { Environment } from '../../generated/prisma/client';
import { formatDuration } from '../../kernel/durations';
import { STATES, type EnvironmentState as State } from '../../kernel/environment-states';
import { builder } from '../../kernel/graphql/builder';
import { connectionOf } from '../../kernel/graphql/paging';
import {
  type Export as ExportShape,
  exportsOf,
  labelsOf,
  type Restored as RestoredShape,
  resourcesOf,
  restoredOf,
  sharesOf,
  type WiredShare,
} from '../../kernel/json-columns';
import { Network, networkOf, Resources } from '../templates/graphql';
import { createEnvironment, findEnvironment, keepAlive, listEnvironments, stopEnvironment } from './service';
import { shareEnvironments, watchEnvironment, watchEnvironments } from './watch';

const EnvironmentState = builder.enumType('EnvironmentState', { values: STATES });

function stateOf(env: Environment): State {
  const state = STATES.find((s) => s === env.state);
  if (!state) throw new Error(`environment ${env.id} has an unknown state ${env.state}`);
  return state;
}

const Export = builder.objectRef<ExportShape>('Export').implement({
  description: 'A service of the environment reachable on the sandbox',
  fields: (t) => ({
    service: t.exposeString('service'),
    listen: t.exposeString('listen', { description: 'host:port on the sandbox' }),
    target: t.exposeString('target', { description: 'host:port inside the environment' }),
  }),
});

const ShareDirection = builder.enumType('ShareDirection', { values: ['in', 'out'] as const });

const Share = builder.objectRef<WiredShare>('Share').implement({
  fields: (t) => ({
    name: t.exposeString('name'),
    direction: t.field({ type: ShareDirection, resolve: (s) => s.direction }),
    envPath: t.exposeString('envPath'),
    localPath: t.exposeString('localPath', { description: 'On the sandbox, relative to its folder' }),
    files: t.exposeStringList('files', { description: 'Destinations of extra files' }),
  }),
});

const Restored = builder.objectRef<RestoredShape>('Restored').implement({
  description: 'The snapshot the environment was started from',
  fields: (t) => ({
    key: t.exposeString('key'),
    root: t.exposeString('root'),
    files: t.exposeInt('files'),
    created: t.field({ type: 'DateTime', resolve: (r) => new Date(r.created) }),
  }),
});

export const EnvironmentRef = builder.prismaObject('Environment', {
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    template: t.exposeString('template'),
    templateVersion: t.exposeInt('templateVersion', {
      nullable: true,
      description: 'The version of its template it was leased from (null: leased before versions were kept)',
    }),
    state: t.field({ type: EnvironmentState, resolve: (e) => stateOf(e) }),
    node: t.exposeString('node', { nullable: true }),
    sandbox: t.exposeString('sandboxId', { nullable: true }),
    pool: t.exposeString('pool'),
    labels: t.field({ type: 'JSONObject', resolve: (e) => labelsOf(e) }),
    project: t.exposeString('project'),
    readyMs: t.exposeInt('readyMs', { nullable: true, description: 'Milliseconds from request to ready' }),
    error: t.exposeString('error', { nullable: true, description: 'Why it failed or ended, when not asked to' }),
    waiting: t.string({
      nullable: true,
      description:
        'Why it is still pending, e.g. "pool default: 4 of 4 nodes busy, 2 leases ahead" (a Berth extension); null once it left pending',
      resolve: (e) => (e.state === 'pending' ? e.waiting : null),
    }),
    createdBy: t.exposeString('createdBy'),
    stoppedBy: t.exposeString('stoppedBy', {
      nullable: true,
      description: "Who ended it with a DELETE: a person's email or an API key's name. Absent when it ended on its own (see error)",
    }),
    created: t.expose('created', { type: 'DateTime' }),
    ready: t.expose('ready', { type: 'DateTime', nullable: true }),
    stopped: t.expose('stopped', { type: 'DateTime', nullable: true }),
    expires: t.expose('expires', { type: 'DateTime' }),
    idleUntil: t.expose('idleUntil', { type: 'DateTime' }),
    idle: t.string({ description: 'Idle time-out, long form (30m0s)', resolve: (e) => formatDuration(e.idleMs) }),
    hard: t.string({ description: 'Hard time-out, long form (6h0m0s)', resolve: (e) => formatDuration(e.hardMs) }),
    exports: t.field({ type: [Export], resolve: (e) => exportsOf(e) }),
    shares: t.field({ type: [Share], resolve: (e) => sharesOf(e) }),
    snapshot: t.exposeString('snapshot', { nullable: true }),
    restored: t.field({ type: Restored, nullable: true, resolve: (e) => restoredOf(e) }),
    image: t.exposeString('image', { nullable: true, description: "The template's OCI image when it was leased" }),
    resources: t.field({ type: Resources, description: "The template's limits when it was leased", resolve: (e) => resourcesOf(e) }),
    network: t.field({ type: Network, resolve: (e) => networkOf(e.network) }),
    workdir: t.exposeString('workdir', { description: 'Working directory of its processes' }),
    runtime: t.exposeString('runtime', {
      nullable: true,
      description: 'How its node runs it (container or files), once it is ready',
    }),
  }),
});

const CreateEnvironmentInput = builder.inputType('CreateEnvironmentInput', {
  fields: (t) => ({
    template: t.string({ required: true }),
    sandbox: t.string({ description: 'Sandbox to wire it to (id or name)' }),
    shares: t.field({ type: 'JSONObject', description: 'Template share name to a folder on the sandbox' }),
    labels: t.field({ type: 'JSONObject' }),
    idle: t.string({ description: 'Idle time-out, e.g. 30m' }),
    hard: t.string({ description: 'Hard time-out, at most 24h' }),
    project: t.string({ description: 'Whose key seals its files (default: default)' }),
    snapshot: t.string({ description: 'Key its synced files are saved under when it ends' }),
    restore: t.stringList({ description: 'Snapshot keys to start from, in order (default: snapshot)' }),
    include: t.stringList({ description: 'Paths or globs sent even when ignored' }),
    noIgnore: t.boolean({ description: 'Do not apply .gitignore files and the default ignores' }),
    files: t.field({ type: 'JSONObject', description: 'Extra files: destination in a share to source on the sandbox' }),
  }),
});

const EnvironmentFilterInput = builder.inputType('EnvironmentFilter', {
  fields: (t) => ({
    state: t.string({ description: 'A state, or live / ended' }),
    template: t.string(),
    label: t.stringList({ description: 'key=value, all must match' }),
    sandbox: t.string({ description: 'A sandbox id, or the name of a sandbox not removed' }),
    project: t.string(),
  }),
});

const CreatedEnvironment = builder.objectRef<{ environment: Environment; sandboxConfig: object | null }>('CreatedEnvironment').implement({
  fields: (t) => ({
    environment: t.field({ type: EnvironmentRef, resolve: (p) => p.environment }),
    sandboxConfig: t.field({
      type: 'JSONObject',
      nullable: true,
      description: "The sandbox's new configuration, when a sandbox is given",
      resolve: (p) => p.sandboxConfig,
    }),
  }),
});

builder.queryFields((t) => ({
  environment: t.field({
    type: EnvironmentRef,
    description: 'An environment by id or by name',
    args: { id: t.arg.string({ required: true }) },
    resolve: (_root, { id }, ctx) => findEnvironment(ctx.deps, ctx.actor, id),
  }),
  environments: t.connection({
    type: EnvironmentRef,
    description: 'Newest first; pages of 1-500 (default 50)',
    args: { filter: t.arg({ type: EnvironmentFilterInput }) },
    resolve: async (_root, args, ctx) => connectionOf(await listEnvironments(ctx.deps, ctx.actor, args), args),
  }),
}));

builder.mutationFields((t) => ({
  createEnvironment: t.field({
    type: CreatedEnvironment,
    args: { input: t.arg({ type: CreateEnvironmentInput, required: true }) },
    resolve: (_root, { input }, ctx) => createEnvironment(ctx.deps, ctx.actor, input),
  }),
  stopEnvironment: t.field({
    type: EnvironmentRef,
    description: 'Ends an environment (stopping, then stopped); idempotent',
    args: { id: t.arg.string({ required: true }) },
    resolve: (_root, { id }, ctx) => stopEnvironment(ctx.deps, ctx.actor, id),
  }),
  keepEnvironmentAlive: t.field({
    type: EnvironmentRef,
    description: 'Counts as activity: moves idleUntil to now + idle',
    args: { id: t.arg.string({ required: true }) },
    resolve: (_root, { id }, ctx) => keepAlive(ctx.deps, ctx.actor, id),
  }),
}));

builder.subscriptionFields((t) => ({
  environment: t.field({
    type: EnvironmentRef,
    description:
      'One environment (by id or name): as it is now, then every change, each with the whole environment; ends after it stopped or failed',
    args: { id: t.arg.string({ required: true }) },
    subscribe: (_root, { id }, ctx) => watchEnvironment(ctx.deps, ctx.actor, id),
    resolve: (env: Environment) => env,
  }),
  environments: t.field({
    type: EnvironmentRef,
    description: 'Every change of every environment of the organization from now on, optionally filtered',
    args: { filter: t.arg({ type: EnvironmentFilterInput }) },
    // Subscribers with the same organization, filter, document and variables share each delivery (src/edges/graphql/fanout.ts).
    extensions: { sharedSource: true },
    subscribe: (_root, { filter }, ctx) =>
      ctx.shareSubscription ? shareEnvironments(ctx.deps, ctx.actor, filter ?? {}) : watchEnvironments(ctx.deps, ctx.actor, filter ?? {}),
    resolve: (env: Environment) => env,
  }),
}));
