// Remote nodes: build machines running `berth node` (docs/agents.md).
//
// An admin creates a node credential (`bnd_…`, stored as a Credential of kind "node", only its
// SHA-256 kept) for one pool; the node serves only its organization's leases of that pool. The
// agent opens the control channel with it (src/edges/channels/node-channel.ts), says hello with its slots,
// and heartbeats; everything about a node is in the database (RemoteNode, its Node slot rows, the
// environments' `nodeId`), so any instance can claim onto it, fail it or revoke it. Every change
// of a node's state is announced on its organization's topic (`nodesChanged`).

import type { Readable } from 'node:stream';
import { map, Repeater } from 'graphql-yoga';
import { z } from 'zod';
import type { Actor, Deps } from '../../app/context';
import type { Environment, RemoteNode, Snapshot } from '../../generated/prisma/client';
import { requireAdmin, requireMember, requireNodeAgent } from '../../kernel/access';
import { formatDuration } from '../../kernel/durations';
import { isLive, LIVE_STATES, ON_NODE, RUNNING } from '../../kernel/environment-states';
import { ConflictError, ForbiddenError, NotFoundError, UnauthorizedError, ValidationError } from '../../kernel/errors';
import { newId } from '../../kernel/names';
import { hashSecret, newSecret, secretPrefix } from '../../kernel/secrets';
import { parseSize } from '../../kernel/sizes';
import { lockFor } from '../../platform/db';
import { topics } from '../../platform/events';
import { checkAudited, recordAudit } from '../audit';
import { SANDBOX_NAME } from '../sandboxes';
import { openSnapshotShare, planRestore, type RestorePlan, recordRestored, savedShares, saveSnapshotShare } from '../snapshots';
import { findTemplate, poolImages } from '../templates';
import { actsForEveryOrg, BUILTIN_NAME, builtinSlots } from './builtin-node';
import { resourcesOf } from './specs';
import { warmOrgsSeenBy } from './warm';

export { MAX_SLOTS } from '../../protocol/dataplane';

import { CLAIM_JOB, ENVIRONMENT_JOB, NODE_JOB, WARM_JOB } from '../../kernel/job-names';
import { sendToNode } from '../../protocol/node-bus';
import type { FromNode } from '../../protocol/node-channel';

/**
 * online: heard from within the liveness bound; degraded: online, but its container engine does
 * not answer (no new work; commands answer engine_unavailable); lost: not heard from (or never
 * connected); draining: removed by an admin, or its agent is shutting down: no new environments;
 * offline: its agent shut down cleanly, nothing runs on it, online again when it says hello.
 */
export type NodeState = 'online' | 'degraded' | 'lost' | 'draining' | 'offline';

export interface NodeRecord {
  id: string;
  name: string;
  /** The pool it serves; the built-in node serves every pool with hot nodes: '' here, its slots say which. */
  pool: string;
  /** The server's own node (docs/agents.md, "The built-in node"): every organization's, not removable. */
  builtin: boolean;
  /** The container engine it runs containers with, as its hello said; null: files only, or not heard from. */
  engine: string | null;
  state: NodeState;
  /** Why it is in that state, in words (null while online): the engine's trouble, since when it was last heard from. */
  reason: string | null;
  /** The slots its agent holds (`--slots`), as it said when it last connected. */
  slots: number;
  /** Of its pool's images, those its engine holds, as its agent last said (placement prefers it for them). */
  images: string[];
  /** The live environments on it, oldest first (each holds one of its slots); of the built-in node, the caller's organization's only. */
  environments: Environment[];
  /** The machine's CPUs and memory (bytes) as its agent said when it last connected; null before. */
  capacity: { cpus: number; memory: number } | null;
  /** What its live environments' limits add up to (see allocationOf). */
  allocated: Allocation;
  /** When an admin cordoned it (no new leases) and who; null while it takes work. */
  cordoned: { at: Date; by: string } | null;
  lastSeen: Date | null;
  createdBy: string;
  created: Date;
}

export interface CreateNodeInput {
  pool: string;
  name: string;
}

/**
 * The `state` column is the node's liveness: `online`, `leaving` (online, its agent shutting down:
 * the claim, which takes only `online` nodes, places nothing on it), `offline` (left cleanly) or
 * `lost`. Removal is its own column, `draining`.
 */
export const LIVE_NODE = ['online', 'leaving'];

function stateOf(node: RemoteNode): NodeState {
  if (node.draining || node.state === 'leaving') return 'draining';
  if (node.state === 'online') return node.engineError ? 'degraded' : 'online';
  return node.state === 'offline' ? 'offline' : 'lost';
}

function reasonOf(node: RemoteNode): string | null {
  const lastSeen = node.lastSeen ? `; last heard from ${node.lastSeen.toISOString()}` : '';
  switch (stateOf(node)) {
    case 'online':
      return null;
    case 'degraded':
      return `${node.engineError} (since ${node.engineErrorSince?.toISOString() ?? 'its hello'})`;
    case 'draining':
      return node.draining ? 'removed by an admin: its environments end, then it goes' : 'its agent is shutting down';
    case 'offline':
      return 'its agent was stopped cleanly';
    case 'lost':
      return node.lastSeen ? `not heard from within the liveness bound${lastSeen}` : 'it has not connected yet';
  }
}

export interface Allocation {
  /** The sum of their CPU limits. */
  cpus: number;
  /** The sum of their memory limits, bytes. */
  memory: number;
  /** How many of them lack a CPU or a memory limit: what they use of the missing one is in no sum. */
  unlimited: number;
}

/** The limits of live environments, added up (their templates' `resources`, kept on each environment). */
export function allocationOf(envs: Environment[]): Allocation {
  let cpus = 0;
  let memory = 0;
  let unlimited = 0;
  for (const env of envs) {
    const limits = resourcesOf(env);
    if (limits.cpus) cpus += limits.cpus;
    if (limits.memory) memory += parseSize(limits.memory);
    if (!limits.cpus || !limits.memory) unlimited++;
  }
  // Hundredths, as templates write them: no 0.30000000000000004.
  return { cpus: Math.round(cpus * 100) / 100, memory, unlimited };
}

/** The records of `nodes` as `orgId` sees them: of the built-in node, only its own environments. */
async function records(deps: Deps, nodes: RemoteNode[], orgId: string): Promise<NodeRecord[]> {
  const envs = await deps.prisma.environment.findMany({
    where: { nodeId: { in: nodes.map((n) => n.id) }, orgId, state: { in: [...LIVE_STATES] } },
    orderBy: [{ created: 'asc' }, { id: 'asc' }],
  });
  return nodes.map((n) => {
    const environments = envs.filter((e) => e.nodeId === n.id);
    return {
      id: n.id,
      name: n.name,
      pool: n.pool,
      builtin: n.builtin,
      engine: n.engine,
      state: stateOf(n),
      reason: reasonOf(n),
      slots: n.slots,
      images: n.images ?? [],
      environments,
      capacity: n.cpus !== null && n.memory !== null ? { cpus: n.cpus, memory: Number(n.memory) } : null,
      allocated: allocationOf(environments),
      cordoned: n.cordoned ? { at: n.cordoned, by: n.cordonedBy ?? '' } : null,
      lastSeen: n.lastSeen,
      createdBy: n.createdBy,
      created: n.created,
    };
  });
}

const NodeEvent = z.object({
  id: z.string(),
  name: z.string(),
  state: z.enum(['online', 'degraded', 'lost', 'draining', 'offline', 'removed']),
});
/** A node's state after a change; `removed` once it is revoked (gone from the list). */
export type NodeEvent = z.infer<typeof NodeEvent>;

function announce(deps: Deps, node: { orgId: string; id: string; name: string }, state: NodeEvent['state']): Promise<void> {
  const event: NodeEvent = { id: node.id, name: node.name, state };
  return deps.events.publish(topics.nodes(node.orgId), event);
}

/**
 * Every change of the organization's nodes and of the built-in node (whose topic is organization
 * '') from now on (members): registered (lost: not heard from yet), online (it said hello), lost,
 * draining, removed.
 */
export function watchNodes(deps: Deps, actor: Actor): AsyncIterable<NodeEvent> {
  requireMember(actor);
  const own = deps.events.subscribe(topics.nodes(actor.orgId));
  const builtin = deps.events.subscribe(topics.nodes(''));
  return map((event) => NodeEvent.parse(event))(Repeater.merge([own, builtin]));
}

/** A node of the caller's organization that is not revoked; any other id is simply unknown (404). */
async function findNode(deps: Deps, orgId: string, id: string): Promise<RemoteNode> {
  const node = await deps.prisma.remoteNode.findFirst({ where: { id, OR: [{ orgId }, { builtin: true }], revoked: null } });
  if (!node) throw new NotFoundError(`node ${id}`);
  return node;
}

function validateNodeName(value: unknown): string {
  if (typeof value !== 'string') throw new ValidationError('name: must be a string', 'name');
  const name = value.trim().toLowerCase();
  if (name === BUILTIN_NAME) throw new ValidationError(`name: ${BUILTIN_NAME} is the built-in node's`, 'name');
  if (!SANDBOX_NAME.test(name)) {
    throw new ValidationError(
      `name: ${JSON.stringify(value)} must be a DNS label: 1-63 letters, digits and "-", starting and ending with a letter or digit`,
      'name',
    );
  }
  return name;
}

/** POST /v1/nodes (admins): a node credential for one pool; the secret is shown once. */
export async function createNode(deps: Deps, actor: Actor, input: CreateNodeInput): Promise<{ node: NodeRecord; secret: string }> {
  await checkAudited(deps, actor, { action: 'node.create', target: { kind: 'node', id: String(input.name).slice(0, 100) } }, () =>
    requireAdmin(actor, 'only admins can create node credentials'),
  );
  const name = validateNodeName(input.name);
  if (typeof input.pool !== 'string' || !deps.catalog.pools.some((p) => p.name === input.pool)) {
    const pools = deps.catalog.pools.map((p) => p.name).join(', ');
    throw new ValidationError(`pool: ${JSON.stringify(input.pool)} is not a pool of the templates catalog (${pools})`, 'pool');
  }
  const secret = newSecret('bnd');
  const id = newId('nod');
  const node = await deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, `berth:node-names:${actor.orgId}`);
    if (await tx.remoteNode.findFirst({ where: { orgId: actor.orgId, name, revoked: null }, select: { id: true } })) {
      throw new ConflictError(`a node named ${name} already exists; remove it first or choose another name`, 'name_taken');
    }
    const created = await tx.remoteNode.create({
      data: { id, orgId: actor.orgId, name, pool: input.pool, createdBy: actor.name, created: deps.clock.now() },
    });
    await tx.credential.create({
      data: {
        id: newId('cred'),
        kind: 'node',
        orgId: actor.orgId,
        nodeId: id,
        name,
        secretHash: hashSecret(secret),
        prefix: secretPrefix(secret),
        createdBy: actor.name,
        created: deps.clock.now(),
      },
    });
    await recordAudit(deps, tx, actor, { action: 'node.create', target: { kind: 'node', id }, detail: { name, pool: input.pool } });
    return created;
  });
  const [record] = await records(deps, [node], actor.orgId);
  await announce(deps, node, record!.state);
  return { node: record!, secret };
}

/** GET /v1/nodes: the built-in node, then the organization's nodes (revoked ones are gone), oldest first. */
/** The nodes an organization sees: the built-in node and its own, until revoked. */
const seenNodes = (orgId: string) => ({ OR: [{ orgId }, { builtin: true }], revoked: null });

export async function listNodes(deps: Deps, actor: Actor): Promise<NodeRecord[]> {
  requireMember(actor);
  const nodes = await deps.prisma.remoteNode.findMany({
    where: seenNodes(actor.orgId),
    orderBy: [{ builtin: 'desc' }, { created: 'asc' }, { id: 'asc' }],
  });
  return records(deps, nodes, actor.orgId);
}

/**
 * The warm containers ready for a lease, by template name: the `warm` entries in state ready of
 * the nodes GET /v1/nodes lists (what `berth template ls` counts; a Template's `warmReady`).
 */
export async function readyWarmCounts(deps: Deps, actor: Actor): Promise<Map<string, number>> {
  requireMember(actor);
  const nodes = await deps.prisma.remoteNode.findMany({ where: seenNodes(actor.orgId), select: { id: true } });
  const rows = await deps.prisma.node.groupBy({
    by: ['warmTemplate'],
    where: { remoteId: { in: nodes.map((n) => n.id) }, warmState: 'ready', warmOrg: { in: warmOrgsSeenBy(actor.orgId) } },
    _count: { _all: true },
  });
  return new Map(rows.map((r) => [r.warmTemplate ?? '', r._count._all]));
}

/**
 * DELETE /v1/nodes/{id} (admins): drains the node at once (no new environments; the live ones
 * run to their end), then the node job revokes it when none is left (its secret then answers 401).
 */
export async function removeNode(deps: Deps, actor: Actor, id: string): Promise<NodeRecord> {
  await checkAudited(deps, actor, { action: 'node.remove', target: { kind: 'node', id } }, () =>
    requireAdmin(actor, 'only admins can remove nodes'),
  );
  const node = await findNode(deps, actor.orgId, id);
  if (node.builtin)
    throw new ConflictError(
      "the built-in node is the server's: it runs and stops with it (hotNodes: 0 in the catalog empties it)",
      'conflict',
    );
  const drained = node.draining
    ? node
    : await deps.prisma.$transaction(async (tx) => {
        const row = await tx.remoteNode.update({ where: { id: node.id }, data: { draining: deps.clock.now() } });
        await recordAudit(deps, tx, actor, { action: 'node.remove', target: { kind: 'node', id: node.id }, detail: { name: node.name } });
        return row;
      });
  if (!node.draining) await announce(deps, drained, 'draining');
  const [record] = await records(deps, [drained], actor.orgId);
  await revokeDrained(deps);
  return record!;
}

/**
 * POST /v1/nodes/{id}/cordon and /uncordon (admins): a cordoned node takes no new leases and keeps
 * no warm containers (NODE_TAKES_WORK); its live environments go on. Asking twice changes nothing
 * (a cordon keeps its first time and admin). The built-in node serves every organization: no one
 * organization's admin cordons it (409).
 */
export async function setNodeCordon(deps: Deps, actor: Actor, id: string, cordon: boolean): Promise<NodeRecord> {
  const action = cordon ? 'node.cordon' : 'node.uncordon';
  await checkAudited(deps, actor, { action, target: { kind: 'node', id } }, () =>
    requireAdmin(actor, `only admins can ${cordon ? 'cordon' : 'uncordon'} nodes`),
  );
  const node = await findNode(deps, actor.orgId, id);
  if (node.builtin) {
    throw new ConflictError(
      'the built-in node serves every organization: it cannot be cordoned by one (hotNodes: 0 in the catalog empties it)',
      'conflict',
    );
  }
  if (Boolean(node.cordoned) === cordon) return (await records(deps, [node], actor.orgId))[0]!;
  const changed = await deps.prisma.$transaction(async (tx) => {
    const row = await tx.remoteNode.update({
      where: { id: node.id },
      data: cordon ? { cordoned: deps.clock.now(), cordonedBy: actor.name } : { cordoned: null, cordonedBy: null },
    });
    await recordAudit(deps, tx, actor, { action, target: { kind: 'node', id: node.id }, detail: { name: node.name } });
    return row;
  });
  const [record] = await records(deps, [changed], actor.orgId);
  await announce(deps, changed, record!.state);
  // Waiting leases are placed on it (or say why they wait), its warm containers go (or come back).
  for (const job of [CLAIM_JOB, ENVIRONMENT_JOB, WARM_JOB]) deps.background.nudge(job);
  return record!;
}

// ---------------------------------------------------------------------------------------------
// The agent's side (its bnd_ credential)

/** The agent's hello: its slots, the environments it still holds, its capacity, whether it is leaving. */
export type HelloInput = Omit<FromNode<'hello'>, 'type'>;

export interface Welcome {
  node: { id: string; name: string; pool: string };
  heartbeatMs: number;
  /** How often it samples its environments' usage (the server's USAGE_SAMPLE_MS). */
  usageSampleMs: number;
  /** The live environments on the node: the agent wipes any other root it holds. */
  environments: string[];
  /** Its pool's templates' images: the agent pulls those its engine lacks (later changes come as `images` messages). */
  images: string[];
}

/**
 * The agent's hello on the control channel: the node is online with `slots` free slots (plus
 * those holding the environments it still has). Live environments on the node that the agent
 * no longer holds (it restarted) fail, naming the node.
 */
export async function nodeHello(deps: Deps, actor: Actor, input: HelloInput): Promise<Welcome> {
  const nodeId = requireNodeAgent(actor);
  const { capacity } = input;
  const builtin = actsForEveryOrg(actor);
  const now = heardAt(deps, builtin);
  const { node, stale } = await deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, `berth:node:${nodeId}`);
    const found = await tx.remoteNode.findUnique({ where: { id: nodeId } });
    if (!found || found.revoked) throw new UnauthorizedError('this node was removed');
    const state = input.leaving ? 'leaving' : 'online';
    // The built-in node's slots are the catalog's hot nodes; another node's, as many as it says.
    const wanted = builtin
      ? builtinSlots(deps.catalog)
      : Array.from({ length: input.slots }, (_, i) => ({ id: `${nodeId}-${i + 1}`, pool: found.pool }));
    const node = await tx.remoteNode.update({
      where: { id: nodeId },
      data: {
        state,
        lastSeen: now,
        slots: wanted.length,
        engine: input.engine ?? null,
        ...engineTrouble(found, input.engineError ?? null, now),
        ...(capacity ? { cpus: capacity.cpus, memory: BigInt(capacity.memory) } : {}),
      },
    });
    const ids = wanted.map((w) => w.id);
    if (!found.draining) {
      await tx.node.createMany({ data: wanted.map((w) => ({ ...w, remoteId: nodeId })), skipDuplicates: true });
    }
    await tx.node.deleteMany({ where: { remoteId: nodeId, environmentId: null, id: found.draining ? undefined : { notIn: ids } } });
    const stale = await tx.environment.findMany({
      where: { nodeId, state: { in: [...LIVE_STATES] }, id: { notIn: input.environments } },
      select: { id: true },
    });
    // A node credential coming online, and from where: on record like a sign-in.
    await recordAudit(deps, tx, actor, {
      action: 'node.connect',
      target: { kind: 'node', id: nodeId },
      detail: { slots: input.slots, leaving: input.leaving === true },
    });
    return { node, stale };
  });
  await announce(deps, node, stateOf(node));
  for (const env of stale) await deps.ends.fail(env.id, ON_NODE, `node ${node.name} restarted and no longer holds the environment`);
  if (input.leaving) await endForLeaving(deps, node);
  const live = await deps.prisma.environment.findMany({ where: { nodeId, state: { in: [...LIVE_STATES] } }, select: { id: true } });
  return {
    node: { id: node.id, name: node.name, pool: node.pool },
    heartbeatMs: deps.config.nodeHeartbeatMs,
    usageSampleMs: deps.config.usageSampleMs,
    environments: live.map((e) => e.id),
    images: builtin
      ? await poolImages(deps.prisma, [...new Set(builtinSlots(deps.catalog).map((s) => s.pool))], null)
      : await poolImages(deps.prisma, [node.pool], node.orgId),
  };
}

/** The engine columns for what the node says of its engine: the trouble's start kept while it lasts. */
function engineTrouble(node: RemoteNode, error: string | null, now: Date) {
  return { engineError: error, engineErrorSince: error ? (node.engineError ? node.engineErrorSince : now) : null };
}

/**
 * The node says its engine stopped answering, or answers again (src/agent/node-agent.ts): while
 * it does not, the node is `degraded` and takes no new work (NODE_TAKES_WORK); its warm containers
 * go (the warm job) and commands in its environments answer 503 engine_unavailable.
 */
export async function nodeEngine(deps: Deps, actor: Actor, error: string | null): Promise<void> {
  const nodeId = requireNodeAgent(actor);
  const changed = await deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, `berth:node:${nodeId}`);
    const found = await tx.remoteNode.findUnique({ where: { id: nodeId } });
    if (!found || found.revoked || (found.engineError ?? null) === error) return null;
    return tx.remoteNode.update({ where: { id: nodeId }, data: engineTrouble(found, error, heardAt(deps, found.builtin)) });
  });
  if (!changed) return;
  await announce(deps, changed, stateOf(changed));
  deps.background.nudge(WARM_JOB);
  if (!error) deps.background.nudge(CLAIM_JOB);
}

/** Of its pool's images, those the node's engine holds (src/agent/node-agent.ts): a hint for placement. */
export async function nodeImagesHeld(deps: Deps, actor: Actor, images: string[]): Promise<void> {
  const nodeId = requireNodeAgent(actor);
  await deps.prisma.remoteNode.updateMany({ where: { id: nodeId, revoked: null }, data: { images: [...new Set(images)] } });
}

/**
 * When a node is heard from. The built-in node's liveness is a process's, in real time: a test's
 * clock moving hours ahead must not declare the server's own node lost.
 */
function heardAt(deps: Deps, builtin: boolean): Date {
  return builtin ? new Date() : deps.clock.now();
}

/**
 * A heartbeat: the node was heard from. Answers 'online', 'lost' (the node was declared lost
 * meanwhile: the agent must say hello again), 'offline' (it left: the agent is told `drained`
 * again, as a heartbeat may cross the first one) or 'revoked' (the channel closes).
 */
export async function nodeHeartbeat(deps: Deps, nodeId: string): Promise<'online' | 'lost' | 'offline' | 'revoked'> {
  const now = heardAt(deps, nodeId === deps.builtin.id);
  const { count } = await deps.prisma.remoteNode.updateMany({
    where: { id: nodeId, revoked: null, state: { in: LIVE_NODE } },
    data: { lastSeen: now },
  });
  if (count === 1) return 'online';
  const node = await deps.prisma.remoteNode.findUnique({ where: { id: nodeId }, select: { revoked: true, state: true } });
  if (!node || node.revoked) return 'revoked';
  return node.state === 'offline' ? 'offline' : 'lost';
}

/**
 * The agent is shutting down (`berth node` got SIGTERM or SIGINT): the node is `leaving`, so no new
 * environment is placed on it, and its live environments end now with the reason in `error`, each
 * released by the node as any end (its out shares brought home first, its shares saved). Once none
 * is left, the node job marks it offline and tells the agent `drained` (markLeftNodes).
 */
export async function nodeLeaving(deps: Deps, actor: Actor): Promise<void> {
  const nodeId = requireNodeAgent(actor);
  // The row lock orders this against a claim onto the node (which reads it FOR SHARE): a claim
  // that came first is among the environments ended below; one that comes later finds it leaving.
  const node = await deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, `berth:node:${nodeId}`);
    const { count } = await tx.remoteNode.updateMany({ where: { id: nodeId, revoked: null, state: 'online' }, data: { state: 'leaving' } });
    if (count > 0) await recordAudit(deps, tx, actor, { action: 'node.leave', target: { kind: 'node', id: nodeId } });
    return tx.remoteNode.findUnique({ where: { id: nodeId } });
  });
  // Lost meanwhile: its heartbeat asks for a hello, which says it is leaving.
  if (node?.state !== 'leaving') return;
  await announce(deps, node, 'draining');
  await endForLeaving(deps, node);
}

/** Ends the live environments of a leaving node (their release is the environment job's, as for any end). */
async function endForLeaving(deps: Deps, node: RemoteNode): Promise<void> {
  const live = await deps.prisma.environment.findMany({
    where: { nodeId: node.id, state: { in: [...RUNNING] } },
    select: { id: true },
  });
  for (const env of live) await deps.ends.stop(env.id, RUNNING, `node ${node.name} shut down: its agent was stopped`);
  deps.background.nudge(ENVIRONMENT_JOB);
  // With nothing left to end, the agent hears `drained` at once.
  deps.background.nudge(NODE_JOB);
}

/** What a node credential may look up: its organization's, or every organization's for the built-in node's. */
function orgScope(actor: Actor): { orgId?: string } {
  return actsForEveryOrg(actor) ? {} : { orgId: actor.orgId };
}

/**
 * The environment `envId` if it is on the caller's node and in one of `states`. Another
 * organization's or an unknown id is 404; one of the organization not on this node 403.
 */
async function envOnNode(deps: Deps, actor: Actor, envId: string, states: readonly string[]): Promise<Environment> {
  const nodeId = requireNodeAgent(actor);
  const env = await deps.prisma.environment.findFirst({ where: { id: envId, ...orgScope(actor) } });
  if (!env) throw new NotFoundError(`environment ${envId}`);
  if (env.nodeId !== nodeId || !isLive(env.state)) {
    throw new ForbiddenError('a node credential can only act on the environments currently on its node');
  }
  if (!states.includes(env.state)) throw new ConflictError(`environment ${env.name} is ${env.state}`, 'invalid_transition');
  return env;
}

/**
 * The agent's word that an environment's container ended on its own (its main process died, or was
 * killed for memory): the environment fails with the reason, prefixed by the node's name.
 */
export async function nodeEnvironmentEnded(deps: Deps, actor: Actor, envId: string, reason: string): Promise<void> {
  const env = await envOnNode(deps, actor, envId, RUNNING);
  await deps.ends.fail(env.id, RUNNING, `${reason} (node ${env.node})`);
  await sendToNode(deps, env.nodeId!, { type: 'discard', environment: { id: env.id } });
}

/** GET /v1/environments/{id}/restore: what the starting environment restores (null: nothing). */
export async function nodeRestorePlan(deps: Deps, actor: Actor, envId: string): Promise<RestorePlan | null> {
  const env = await envOnNode(deps, actor, envId, ['starting']);
  return planRestore(deps, env);
}

/** POST /v1/environments/{id}/restored {root, files}: records what was restored (only while starting). */
export async function nodeRecordRestored(deps: Deps, actor: Actor, envId: string, input: { root?: unknown; files?: unknown }) {
  const env = await envOnNode(deps, actor, envId, ['starting']);
  if (!Number.isSafeInteger(input.files) || (input.files as number) < 0)
    throw new ValidationError('files: must be an integer >= 0', 'files');
  const plan = await planRestore(deps, env);
  if (!plan || plan.root !== input.root) {
    throw new ConflictError(`root: ${JSON.stringify(input.root)} is not the save this environment restores`, 'conflict');
  }
  await recordRestored(deps, env.id, plan, input.files as number);
  return deps.prisma.environment.findUniqueOrThrow({ where: { id: env.id } });
}

/**
 * GET /v1/snapshots/{snapshot}/archive: a share's archive, for a node with an environment of the
 * snapshot's project starting on it.
 */
export async function nodeOpenArchive(deps: Deps, actor: Actor, snapshotId: string): Promise<Readable> {
  const nodeId = requireNodeAgent(actor);
  const snapshot = await deps.prisma.snapshot.findFirst({ where: { id: snapshotId, ...orgScope(actor) } });
  if (!snapshot) throw new NotFoundError(`snapshot ${snapshotId}`);
  const starting = await deps.prisma.environment.count({
    where: { nodeId, state: 'starting', orgId: snapshot.orgId, project: snapshot.project },
  });
  if (starting === 0) throw new ForbiddenError('a node credential can only read snapshots for an environment starting on its node');
  return openSnapshotShare(deps, snapshot);
}

/**
 * PUT /v1/snapshots/{lease}/{share}: saves one share of an environment stopping on the node.
 * Answers the snapshot and whether it was created now (false: that share was already saved).
 */
export async function nodeSaveShare(
  deps: Deps,
  actor: Actor,
  lease: string,
  share: string,
  body: Readable,
): Promise<{ snapshot: Snapshot; created: boolean }> {
  const env = await envOnNode(deps, actor, lease, ['stopping']);
  if (!env.snapshot) throw new ConflictError(`environment ${env.name} has no snapshot key`, 'no_snapshot');
  const template = await findTemplate(deps.prisma, env.orgId, env.template);
  if (!template.shares.some((s) => s.name === share)) {
    throw new ValidationError(`share: ${JSON.stringify(share)} is not a share of template ${template.name}`, 'share');
  }
  const existed = (await savedShares(deps, env)).includes(share);
  const snapshot = await saveSnapshotShare(deps, env, share, body);
  if (!snapshot) throw new ConflictError(`project ${env.project} was shredded since the environment began: nothing is saved`, 'shredded');
  return { snapshot, created: !existed };
}

// ---------------------------------------------------------------------------------------------
// Liveness and draining (the node job)

/** Nodes not heard from within the bound become lost; their live environments fail, naming the node. */
export async function markLostNodes(deps: Deps): Promise<void> {
  const now = deps.clock.now();
  const bound = deps.config.nodeLostMs;
  const cutoff = new Date(now.getTime() - bound);
  const realCutoff = new Date(Date.now() - bound);
  const lost = await deps.prisma.remoteNode.updateManyAndReturn({
    where: {
      state: { in: LIVE_NODE },
      revoked: null,
      OR: [{ lastSeen: null }, { builtin: false, lastSeen: { lt: cutoff } }, { builtin: true, lastSeen: { lt: realCutoff } }],
    },
    data: { state: 'lost' },
    select: { id: true, orgId: true, name: true, draining: true },
  });
  for (const node of lost) await announce(deps, node, node.draining ? 'draining' : 'lost');
  // Apart from the update, so an instance that stops between the two leaves nothing behind.
  const stranded = await deps.prisma.$queryRaw<{ id: string; name: string }[]>`
    SELECT e.id, r.name FROM "Environment" e JOIN "RemoteNode" r ON r.id = e."nodeId"
     WHERE r.state = 'lost' AND e.state = ANY(${[...LIVE_STATES]}::text[])`;
  for (const env of stranded)
    await deps.ends.fail(env.id, ON_NODE, `node ${env.name} was lost: not heard from for ${formatDuration(bound)}`);
}

/** Draining nodes with no live environment left are revoked: credential, slots and channel. */
export async function revokeDrained(deps: Deps): Promise<void> {
  const done = await deps.prisma.$queryRaw<{ id: string; orgId: string; name: string }[]>`
    SELECT r.id, r."orgId", r.name FROM "RemoteNode" r
     WHERE r.draining IS NOT NULL AND r.revoked IS NULL
       AND NOT EXISTS (SELECT 1 FROM "Environment" e WHERE e."nodeId" = r.id AND e.state = ANY(${[...LIVE_STATES]}::text[]))`;
  for (const node of done) {
    const { id } = node;
    const now = deps.clock.now();
    const revoked = await deps.prisma.$transaction(async (tx) => {
      await lockFor(tx, `berth:node:${id}`);
      // Another run (the node job, another instance) may have revoked it since the query.
      const { count } = await tx.remoteNode.updateMany({ where: { id, revoked: null }, data: { revoked: now } });
      if (count === 0) return null;
      const credentials = await tx.credential.findMany({ where: { nodeId: id, revoked: null }, select: { id: true } });
      await tx.credential.updateMany({ where: { nodeId: id, revoked: null }, data: { revoked: now } });
      await tx.node.deleteMany({ where: { remoteId: id, environmentId: null } });
      return credentials.map((c) => c.id);
    });
    if (!revoked) continue;
    // Remembered node credentials are forgotten on every instance before the channel is told.
    await deps.credentials.publish({ credentials: revoked });
    await sendToNode(deps, id, { type: 'revoked' });
    await announce(deps, node, 'removed');
  }
}

/** Leaving nodes with no live environment left are offline; their agents are told `drained` (and stop). */
export async function markLeftNodes(deps: Deps): Promise<void> {
  const done = await deps.prisma.$queryRaw<{ id: string; orgId: string; name: string }[]>`
    SELECT r.id, r."orgId", r.name FROM "RemoteNode" r
     WHERE r.state = 'leaving' AND r.revoked IS NULL
       AND NOT EXISTS (SELECT 1 FROM "Environment" e WHERE e."nodeId" = r.id AND e.state = ANY(${[...LIVE_STATES]}::text[]))`;
  for (const node of done) {
    // Only from leaving: an agent that said hello since (restarted) is online and stays so.
    const { count } = await deps.prisma.remoteNode.updateMany({ where: { id: node.id, state: 'leaving' }, data: { state: 'offline' } });
    if (count === 0) continue;
    await sendToNode(deps, node.id, { type: 'drained' });
    await announce(deps, node, 'offline');
  }
}
