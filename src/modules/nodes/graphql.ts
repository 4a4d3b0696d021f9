import DataLoader from 'dataloader';
import { builder } from '../../kernel/graphql/builder';
import { perRequest } from '../../kernel/graphql/per-request';
import { EnvironmentRef } from '../environments/graphql';
import { Template } from '../templates/graphql';
import {
  type Allocation,
  createNode,
  listNodes,
  type NodeEvent,
  type NodeRecord,
  readyWarmCounts,
  removeNode,
  setNodeCordon,
  watchNodes,
} from './service';
import { type WarmContainer, warmContainersLoader, warmOrgsSeenBy } from './warm';

const NodeCapacityRef = builder.objectRef<{ cpus: number; memory: number }>('NodeCapacity').implement({
  description: "A node's machine, as its agent said when it last connected: its engine's, else the host's",
  fields: (t) => ({
    cpus: t.exposeInt('cpus'),
    memory: t.expose('memory', { type: 'SafeInt', description: 'Bytes' }),
  }),
});

const NodeAllocationRef = builder.objectRef<Allocation>('NodeAllocation').implement({
  description: "What the limits (templates' `resources`) of the live environments on a node add up to",
  fields: (t) => ({
    cpus: t.exposeFloat('cpus', { description: 'The sum of their CPU limits' }),
    memory: t.expose('memory', { type: 'SafeInt', description: 'The sum of their memory limits, bytes' }),
    unlimited: t.exposeInt('unlimited', {
      description: 'How many of them lack a CPU or a memory limit (what they use of the missing one is in no sum)',
    }),
  }),
});

const WarmContainerRef = builder.objectRef<WarmContainer>('WarmContainer').implement({
  description: "A started, unclaimed container a slot keeps for a template's leases (a template's `warm`)",
  fields: (t) => ({
    slot: t.exposeString('slot'),
    template: t.exposeString('template'),
    state: t.exposeString('state', {
      description: 'starting (being made), ready (a lease claims it) or failed (tried again after a backoff; `error` says why)',
    }),
    since: t.expose('since', { type: 'DateTime', nullable: true, description: 'When its making started' }),
    error: t.exposeString('error', { nullable: true, description: 'Why its last making failed' }),
  }),
});

/** One loader per request: a list of nodes asks for their warm containers in one query. */
const warmLoader = perRequest((ctx) => warmContainersLoader(ctx.deps.prisma));

const NodeCordonRef = builder.objectRef<{ at: Date; by: string }>('NodeCordon').implement({
  description: 'A cordon of a node: no new leases go to it until an admin uncordons it',
  fields: (t) => ({
    at: t.expose('at', { type: 'DateTime' }),
    by: t.exposeString('by', { description: 'The admin who cordoned it' }),
  }),
});

export const NodeRef = builder.objectRef<NodeRecord>('Node').implement({
  description:
    "A build machine running `berth node`: the built-in node the server runs, or one of the organization's with its credential (docs/agents.md)",
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name', {
      description:
        "What an environment's `node` field shows (a DNS label); the built-in node's environments show their hot node (`<pool>-<n>`)",
    }),
    pool: t.exposeString('pool', { description: "The pool it serves; '' for the built-in node, which serves every pool with hot nodes" }),
    builtin: t.exposeBoolean('builtin', {
      description: "The server's own node (every organization's leases of the pools with hot nodes); it cannot be removed",
    }),
    engine: t.exposeString('engine', {
      nullable: true,
      description: 'The container engine it runs containers with, as it said when it connected; null: files only',
    }),
    state: t.exposeString('state', {
      description:
        'online (heard from within the liveness bound), degraded (online, but its container engine does not answer: no new work, commands answer engine_unavailable), lost (not heard from), draining (removed, or its agent is shutting down: no new environments), offline (its agent shut down cleanly; online again when it connects)',
    }),
    reason: t.exposeString('reason', {
      nullable: true,
      description: "Why it is in its state, in words (the engine's trouble when degraded); null while online",
    }),
    images: t.stringList({
      description:
        "Of its pool's templates' images, those its engine holds, as its agent last said: placement prefers it for leases of them",
      resolve: (n) => n.images,
    }),
    slots: t.exposeInt('slots', { description: 'The slots its agent holds (`--slots`), as it said when it last connected' }),
    environments: t.stringList({
      description: "Ids of the live environments on it (the organization's)",
      resolve: (n) => n.environments.map((e) => e.id),
    }),
    liveEnvironments: t.field({
      type: [EnvironmentRef],
      description: 'The live environments on it (each holds one of its slots), oldest first',
      resolve: (n) => n.environments,
    }),
    capacity: t.field({
      type: NodeCapacityRef,
      nullable: true,
      description: 'Its CPUs and memory; null until its agent connected once',
      resolve: (n) => n.capacity,
    }),
    allocated: t.field({ type: NodeAllocationRef, description: 'What its live environments are allowed', resolve: (n) => n.allocated }),
    cordoned: t.field({
      type: NodeCordonRef,
      nullable: true,
      description: 'When an admin cordoned it (it takes no new leases; its live environments go on) and who; null while it takes work',
      resolve: (n) => n.cordoned,
    }),
    warm: t.field({
      type: [WarmContainerRef],
      description: "The warm containers its free slots keep for the organization's templates (and the catalog's)",
      resolve: async (n, _args, ctx) => (await warmLoader(ctx).load(n.id)).filter((w) => warmOrgsSeenBy(ctx.actor.orgId).includes(w.org)),
    }),
    lastSeen: t.expose('lastSeen', { type: 'DateTime', nullable: true, description: 'Its last hello or heartbeat' }),
    createdBy: t.exposeString('createdBy'),
    created: t.expose('created', { type: 'DateTime' }),
  }),
});

/** One count per request: a list of templates asks once. */
const readyWarmLoader = perRequest(
  (ctx) =>
    new DataLoader<string, number>(
      async (names) => {
        const counts = await readyWarmCounts(ctx.deps, ctx.actor);
        return names.map((name) => counts.get(name) ?? 0);
      },
      { cache: false },
    ),
);

builder.objectField(Template, 'warmReady', (t) =>
  t.int({
    description:
      'Its warm containers ready for a lease now (of the `warm` it asks for): the `warm` entries in state ready on the nodes `nodes` lists',
    resolve: (template, _args, ctx) => readyWarmLoader(ctx).load(template.name),
  }),
);

const CreatedNode = builder.objectRef<{ node: NodeRecord; secret: string }>('CreatedNode').implement({
  fields: (t) => ({
    node: t.field({ type: NodeRef, resolve: (r) => r.node }),
    secret: t.exposeString('secret', {
      description: 'The node credential (bnd_…) for `berth node --token`; shown once, only its hash is kept',
    }),
  }),
});

const CreateNodeInput = builder.inputType('CreateNodeInput', {
  fields: (t) => ({
    pool: t.string({ required: true, description: 'A pool of the templates catalog' }),
    name: t.string({ required: true, description: "The node's name (a DNS label, unique among the organization's nodes)" }),
  }),
});

builder.queryFields((t) => ({
  nodes: t.field({
    type: [NodeRef],
    description: "The built-in node, then the organization's nodes (revoked ones are gone), oldest first",
    resolve: (_root, _args, ctx) => listNodes(ctx.deps, ctx.actor),
  }),
}));

builder.mutationFields((t) => ({
  createNode: t.field({
    type: CreatedNode,
    description: 'A node credential for one pool (admins)',
    args: { input: t.arg({ type: CreateNodeInput, required: true }) },
    resolve: (_root, { input }, ctx) => createNode(ctx.deps, ctx.actor, input),
  }),
  removeNode: t.field({
    type: NodeRef,
    description: 'Drains the node at once (no new environments); it is revoked when its live environments have ended (admins)',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => removeNode(ctx.deps, ctx.actor, String(id)),
  }),
  cordonNode: t.field({
    type: NodeRef,
    description: 'No new leases go to the node (its live environments go on, its warm containers go) until it is uncordoned (admins)',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => setNodeCordon(ctx.deps, ctx.actor, String(id), true),
  }),
  uncordonNode: t.field({
    type: NodeRef,
    description: 'The node takes new leases again (admins)',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => setNodeCordon(ctx.deps, ctx.actor, String(id), false),
  }),
}));

const NodeEventRef = builder.objectRef<NodeEvent>('NodeEvent').implement({
  description: 'A node of the organization (or the built-in node) changed: its state now, or removed once it is revoked',
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    state: t.exposeString('state', {
      description: 'online, degraded, lost (also: registered, not heard from yet), draining, offline or removed',
    }),
  }),
});

builder.subscriptionField('nodesChanged', (t) =>
  t.field({
    type: NodeEventRef,
    description:
      "Every change of the organization's nodes and of the built-in node from now on: registered, online, lost, draining, offline, removed",
    subscribe: (_root, _args, ctx) => watchNodes(ctx.deps, ctx.actor),
    resolve: (event: NodeEvent) => event,
  }),
);
