// Claims: a queued lease takes a free slot of its pool (a warm container of its template, else a
// place by capacity, docs/agents.md "Capacity and placement"), pending → starting with its node in
// one transaction. The claim job claims what waits; a new lease is claimed in its own create's
// transaction when nothing waits ahead of it (createEnvironment).
import type { Deps } from '../../app/context';
import { type Environment, Prisma as P } from '../../generated/prisma/client';
import { ENVIRONMENT_JOB, WARM_CLAIM_JOB } from '../../kernel/job-names';
import { lockFor, type Tx } from '../../platform/db';
import type { Capacity } from '../../protocol/capacity';
import { sendToNode } from '../../protocol/node-bus';
import { fits, headroom, NO_WARM, NODE_TAKES_WORK, NOTHING, needOf, type Room, roomsOf, warmAllocation } from '../nodes';
import { notifySandboxConfig } from '../sandboxes';
import { BUILT_IMAGE_PREFIX, builtOn } from '../templates';
import { nudgeWebhooks } from '../webhooks';
import { announceEnvironment } from './events';
import { transitionIn } from './transitions';

/** A claim made in a transaction: what is done once it commits (afterClaim). */
export interface Claim {
  env: Environment;
  /** A webhook delivery was queued. */
  hooked: boolean;
  /** Warm containers of other free slots removed to make room: their nodes are told once committed. */
  evicted: { id: string; remoteId: string }[];
  /** Other leases were waiting: the claim job looks again. */
  more: boolean;
}

/**
 * Claims one queued lease of `pool` in `tx`, the oldest a free slot fits; SKIP LOCKED keeps
 * instances apart. A hot node (a slot of the built-in node) serves every organization; another
 * node's slot only its own organization's leases. Only while its node takes work
 * (NODE_TAKES_WORK). A claim takes no node work: once committed, the warm-claim job readies a
 * warm claim and the environment job prepares the rest (afterClaim), and both find it again in the
 * database after a restart.
 *
 * `only`: the lease this transaction has just inserted (createEnvironment), claimed or not; the
 * caller logs the new version after the lease's own first one (logTransition).
 */
export async function claimIn(deps: Deps, tx: Tx, pool: { name: string; hotNodes: number }, only?: Environment): Promise<Claim | null> {
  // One claim of a pool at a time (across jobs and instances): the share of the hot nodes an
  // organization holds is counted from committed claims, which two at once would each miss.
  await lockFor(tx, `berth:claim:${pool.name}`);
  // Whether the lease's organization (its row `o`) holds less than its share of the pool's hot nodes.
  const hotRoom = P.sql`
      SELECT count(*) < GREATEST(1, ceil(COALESCE(o."poolShare", ${deps.config.poolOrgShare}::float8) * ${pool.hotNodes})) AS room
        FROM "Node" h JOIN "RemoteNode" hr ON hr.id = h."remoteId" JOIN "Environment" x ON x.id = h."environmentId"
       WHERE h.pool = ${pool.name} AND hr.builtin AND x."orgId" = o.id`;
  // A create's own lease is not building (the create checked) and is its own row: only its
  // organization's room is read. Placement below finds whether any slot fits it.
  const envs = only
    ? (
        await tx.$queryRaw<{ hotRoom: boolean }[]>`
          SELECT hot.room AS "hotRoom" FROM "Organization" o CROSS JOIN LATERAL (${hotRoom}) hot WHERE o.id = ${only.orgId}`
      ).map(({ hotRoom }): Pending => {
        const { id, orgId, template, specHash, image } = only;
        return { id, orgId, template, specHash, image, resources: only.resources as Pending['resources'], hotRoom };
      })
    : // Only leases a free slot could take, oldest first: their organization's own free node,
      // or a free hot node while the organization holds less than its share of the pool's hot
      // nodes (POOL_ORG_SHARE). Leases no slot fits never hold back those behind them.
      await tx.$queryRaw<Pending[]>`
      SELECT e.id, e."orgId", e.template, e."specHash", e.resources, e.image, hot.room AS "hotRoom"
        FROM "Environment" e JOIN "Organization" o ON o.id = e."orgId"
       CROSS JOIN LATERAL (${hotRoom}) hot
       WHERE e.pool = ${pool.name} AND e.state = 'pending'
         -- (a lease of a template whose image is being built waits for the build)
         AND NOT EXISTS (SELECT 1 FROM "Template" t WHERE t."orgId" = e."orgId" AND t.name = e.template AND t.status = 'building')
         AND EXISTS (SELECT 1 FROM "Node" n JOIN "RemoteNode" r ON r.id = n."remoteId"
                      WHERE n.pool = e.pool AND n."environmentId" IS NULL
                        AND ${NODE_TAKES_WORK}
                        AND ((r.builtin AND hot.room) OR r."orgId" = e."orgId"))
       ORDER BY e."queueSeq" LIMIT 50 FOR UPDATE OF e SKIP LOCKED`;
  if (envs.length === 0) return null;
  // Every free slot of the pool whose node may take work; row locks keep other instances off them.
  const slots = await tx.$queryRaw<Slot[]>`
      SELECT n.id, n."remoteId", CASE WHEN r.builtin THEN n.id ELSE r.name END AS name, r."orgId", r.builtin, r.images,
             n."warmTemplate", n."warmOrg", n."warmSpec", n."warmState", n."warmCpus", n."warmMemory"
        FROM "Node" n JOIN "RemoteNode" r ON r.id = n."remoteId"
       WHERE n.pool = ${pool.name} AND n."environmentId" IS NULL
         AND ${NODE_TAKES_WORK}
       ORDER BY n.id FOR UPDATE OF n SKIP LOCKED`;
  // What each of their nodes has free, under the nodes' locks (placement.ts).
  const rooms = await roomsOf(
    tx,
    slots.map((n) => n.remoteId),
  );
  // Built images (a devcontainer's build) are on the nodes that built them, never pulled.
  const built = await builtOn(
    tx,
    envs.map((e) => e.image),
  );
  for (const pending of envs) {
    const need = needOf(pending.resources);
    const holdsBuilt = (n: Slot) => !pending.image?.startsWith(BUILT_IMAGE_PREFIX) || built.has(`${n.remoteId}\n${pending.image}`);
    const mayTake = (n: Slot) => (n.orgId === pending.orgId || (pending.hotRoom && n.builtin)) && holdsBuilt(n);
    // A ready warm container of its template and spec (the catalog's, or its organization's own)...
    const warm = slots.find(
      (n) =>
        mayTake(n) &&
        n.warmState === 'ready' &&
        pending.specHash !== null &&
        n.warmSpec === pending.specHash &&
        n.warmTemplate === pending.template &&
        (n.warmOrg === '' || n.warmOrg === pending.orgId) &&
        fits(rooms.get(n.remoteId)!, need, warmAllocation(n)),
    );
    // ...else its organization's own nodes before the hot ones, where it fits (placeOn).
    const placed = warm
      ? { slot: warm, evict: [] }
      : (placeOn(
          slots.filter((n) => n.orgId === pending.orgId && holdsBuilt(n)),
          need,
          rooms,
          pending.image,
        ) ??
        (pending.hotRoom
          ? placeOn(
              slots.filter((n) => n.builtin && holdsBuilt(n)),
              need,
              rooms,
              pending.image,
            )
          : undefined));
    if (!placed) continue;
    const { slot } = placed;
    // Its node is read again under a share lock: a drain, a cordon or a lost mark that
    // committed meanwhile is seen, and one that comes later waits for this claim.
    const takes = await tx.$queryRaw<{ id: string }[]>`
        SELECT r.id FROM "RemoteNode" r WHERE r.id = ${slot.remoteId} AND ${NODE_TAKES_WORK} FOR SHARE`;
    if (takes.length === 0) {
      slots.splice(slots.indexOf(slot), 1);
      continue;
    }
    const now = deps.clock.now();
    // The state machine's pending → starting, in this transaction: the lease and its node
    // change together. The lock taken above keeps it pending until then.
    const moved = await transitionIn(
      deps,
      tx,
      pending.id,
      ['pending'],
      'starting',
      () => ({
        node: slot.name,
        nodeId: slot.remoteId,
        starting: now,
        warmSlot: slot.warmState ? slot.id : null,
        warmClaimed: slot === warm,
      }),
      only ? { current: only, deferLog: true } : {},
    );
    if (!moved) continue;
    await tx.node.update({ where: { id: slot.id }, data: { environmentId: pending.id, updated: now, ...NO_WARM } });
    // Warm containers of its node's other free slots that had to make room: their node removes them.
    for (const other of placed.evict) await tx.node.update({ where: { id: other.id }, data: NO_WARM });
    return {
      env: moved.env,
      hooked: moved.hooked,
      evicted: placed.evict.map((n) => ({ id: n.id, remoteId: n.remoteId })),
      more: envs.length > 1,
    };
  }
  return null;
}

/** Claims queued environments onto free slots, oldest first per pool (claimIn), each in a transaction of its own. */
export async function claimQueued(deps: Deps): Promise<void> {
  for (const pool of deps.catalog.pools) {
    // One indexed read instead of a transaction, its lock and the queue scan, for a pool nothing
    // waits in (most, most of the time): a lease created after it claims itself or wakes this job.
    const waits = await deps.prisma.environment.findFirst({ where: { pool: pool.name, state: 'pending' }, select: { id: true } });
    if (!waits) continue;
    for (;;) {
      const claim = await deps.prisma.$transaction((tx) => claimIn(deps, tx, pool));
      if (!claim) break;
      await afterClaim(deps, claim);
      // Another look only while others were waiting: a lease created since nudges this job itself.
      if (!claim.more) break;
    }
  }
}

/**
 * What follows a committed claim: its preparation woken (a warm container is readied at once by
 * its own job, apart from the environment job's longer work; a lease placed cold once its start
 * time is due), the evicted warm containers' nodes told, watchers and webhooks woken.
 */
export async function afterClaim(deps: Deps, claim: Claim): Promise<void> {
  const { env } = claim;
  if (env.warmClaimed && env.startMs === 0) deps.background.nudge(WARM_CLAIM_JOB);
  else deps.background.nudge(ENVIRONMENT_JOB, env.startMs);
  for (const slot of claim.evicted) await sendToNode(deps, slot.remoteId, { type: 'warm-drop', slot: slot.id });
  await announceEnvironment(deps, env.orgId);
  await notifySandboxConfig(deps, env.orgId, env.sandboxId);
  nudgeWebhooks(deps, claim.hooked);
}

interface Slot {
  id: string;
  remoteId: string;
  name: string;
  orgId: string;
  /** A slot of the built-in node: a hot node, for every organization. */
  builtin: boolean;
  /** Of its pool's images, those its node's engine holds, as the node last said. */
  images: string[] | null;
  warmTemplate: string | null;
  warmOrg: string | null;
  warmSpec: string | null;
  warmState: string | null;
  warmCpus: number | null;
  warmMemory: bigint | null;
}

interface Pending {
  id: string;
  orgId: string;
  template: string;
  specHash: string | null;
  resources: Parameters<typeof needOf>[0];
  image: string | null;
  /** It may take a hot node: its organization holds less than its share of them. */
  hotRoom: boolean;
}

const warmRank = (n: Slot) => (n.warmState === null ? 0 : n.warmState === 'ready' ? 2 : 1);

/** Of `slots`, one keeping no warm container, else a failed or starting one, else a ready one. */
function leastWarm(slots: Slot[]): Slot | undefined {
  return slots.reduce<Slot | undefined>((best, n) => (!best || warmRank(n) < warmRank(best) ? n : best), undefined);
}

/** A place for a lease: the slot, the warm containers removed to make room, whether its engine holds the image, what is left free. */
interface Option {
  slot: Slot;
  evict: Slot[];
  holds: boolean;
  headroom: number;
}

/**
 * Where among `slots` a lease needing `need` goes (docs/agents.md, "Capacity and placement"): on a
 * node whose free capacity fits it, on its slot keeping the least (whose warm container it
 * replaces). A node full only of warm containers makes room by removing some of them (a lease never
 * waits for warm containers), but a node that fits without removing any comes first; then one whose
 * engine holds the lease's `image` (no pull); then the node left with the most free capacity (the
 * scarcer of CPU and memory, as a share); ties at random.
 */
function placeOn(slots: Slot[], need: Capacity, rooms: Map<string, Room>, image: string | null): { slot: Slot; evict: Slot[] } | undefined {
  const byNode = new Map<string, Slot[]>();
  for (const n of slots) byNode.set(n.remoteId, [...(byNode.get(n.remoteId) ?? []), n]);
  let best: Option[] = [];
  for (const [remoteId, free] of byNode) {
    const room = rooms.get(remoteId)!;
    const slot = leastWarm(free)!;
    let freed = warmAllocation(slot);
    const evict: Slot[] = [];
    // Starting ones before ready ones, as leastWarm ranks them.
    for (const other of free.filter((n) => n !== slot && warmAllocation(n) !== NOTHING).sort((a, b) => warmRank(a) - warmRank(b))) {
      if (fits(room, need, freed)) break;
      evict.push(other);
      const w = warmAllocation(other);
      freed = { cpus: freed.cpus + w.cpus, memory: freed.memory + w.memory };
    }
    if (!fits(room, need, freed)) continue;
    const option = { slot, evict, holds: image !== null && (slot.images ?? []).includes(image), headroom: headroom(room, need, freed) };
    const better = best.length === 0 ? 1 : compare(option, best[0]!);
    if (better > 0) best = [option];
    else if (better === 0) best.push(option);
  }
  return best.length ? best[Math.floor(Math.random() * best.length)] : undefined;
}

/** > 0: `a` is the better place (fewer warm containers removed, then holding the image, then more left free); 0: as good. */
function compare(a: Option, b: Option): number {
  if (a.evict.length !== b.evict.length) return b.evict.length - a.evict.length;
  if (a.holds !== b.holds) return a.holds ? 1 : -1;
  return Math.abs(a.headroom - b.headroom) < 1e-9 ? 0 : a.headroom - b.headroom;
}
