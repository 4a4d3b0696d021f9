import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import type { BackgroundJob } from '../../kernel/background';
import { formatDuration } from '../../kernel/durations';
import { isEnded, pushedIdleUntil, type SourceOf, STOPPABLE } from '../../kernel/environment-states';
import { CLAIM_JOB, ENVIRONMENT_JOB, WARM_JOB } from '../../kernel/job-names';
import { lockFor } from '../../platform/db';
import type { Capacity } from '../../protocol/capacity';
import { EnvironmentFaultError, QuestionAbandonedError, sendToNode } from '../../protocol/node-bus';
import {
  fits,
  headroom,
  NO_WARM,
  NODE_TAKES_WORK,
  NOTHING,
  type NodeProvider,
  needOf,
  type Room,
  roomsOf,
  startBound,
  warmAllocation,
} from '../nodes';
import { notifySandboxConfig } from '../sandboxes';
import { BUILT_IMAGE_PREFIX, builtOn } from '../templates';
import { nudgeWebhooks } from '../webhooks';
import { announceEnvironment } from './events';
import { pruneEnvironmentLogs } from './log';
import { awaitingOutSync } from './relay';
import { transition, transitionIn } from './service';
import { HISTORY_MS } from './usage';
import { explainWaiting } from './waiting';

/**
 * Claims queued environments onto free slots, oldest first per pool; SKIP LOCKED keeps instances
 * apart. A hot node (a slot of the built-in node) serves every organization; another node's slot
 * only its own organization's leases. Only while its node takes work (NODE_TAKES_WORK).
 */
async function claimQueued(deps: Deps, onClaim?: (env: Environment) => Promise<void>): Promise<Environment[]> {
  const claimed: Environment[] = [];
  const evicted: Slot[] = [];
  let hooked = false;
  for (const pool of deps.catalog.pools) {
    for (;;) {
      const env = await deps.prisma.$transaction(async (tx) => {
        // One claim of a pool at a time (across jobs and instances): the share of the hot nodes an
        // organization holds is counted from committed claims, which two at once would each miss.
        await lockFor(tx, `berth:claim:${pool.name}`);
        // Only leases a free slot could take, oldest first: their organization's own free node,
        // or a free hot node while the organization holds less than its share of the pool's hot
        // nodes (POOL_ORG_SHARE). Leases no slot fits never hold back those behind them.
        const share = deps.config.poolOrgShare;
        const envs = await tx.$queryRaw<Pending[]>`
          SELECT e.id, e."orgId", e.template, e."specHash", e.resources, e.image, hot.room AS "hotRoom"
            FROM "Environment" e JOIN "Organization" o ON o.id = e."orgId"
           CROSS JOIN LATERAL (
                 SELECT count(*) < GREATEST(1, ceil(COALESCE(o."poolShare", ${share}::float8) * ${pool.hotNodes})) AS room
                    FROM "Node" h JOIN "RemoteNode" hr ON hr.id = h."remoteId" JOIN "Environment" x ON x.id = h."environmentId"
                  WHERE h.pool = e.pool AND hr.builtin AND x."orgId" = e."orgId") hot
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
          // change together. The lock taken above keeps it pending until then. A warm claim is
          // readied at once by this instance (readyNow), so its node work is taken here too.
          const moved = await transitionIn(deps, tx, pending.id, ['pending'], 'starting', (_at, current) => ({
            node: slot.name,
            nodeId: slot.remoteId,
            starting: now,
            warmSlot: slot.warmState ? slot.id : null,
            warmClaimed: slot === warm,
            ...(slot === warm && current.startMs === 0 ? { workClaim: now } : {}),
          }));
          if (!moved) continue;
          await tx.node.update({ where: { id: slot.id }, data: { environmentId: pending.id, updated: now, ...NO_WARM } });
          // Warm containers of its node's other free slots that had to make room: their node removes them.
          for (const other of placed.evict) await tx.node.update({ where: { id: other.id }, data: NO_WARM });
          evicted.push(...placed.evict);
          hooked = moved.hooked || hooked;
          return moved.env;
        }
        return null;
      });
      for (const slot of evicted.splice(0)) await sendToNode(deps, slot.remoteId, { type: 'warm-drop', slot: slot.id });
      if (!env) break;
      claimed.push(env);
      await announceEnvironment(deps, env.orgId);
      await notifySandboxConfig(deps, env.orgId, env.sandboxId);
      await onClaim?.(env);
    }
  }
  nudgeWebhooks(deps, hooked);
  return claimed;
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

/** A node's work on one environment (prepare, release) takes minutes at most; older claims are from a dead instance. */
const CLAIM_MS = 10 * 60_000;

/**
 * Takes the environment's node work for this instance, so two instances never prepare or
 * release the same environment at once (a release saves snapshots). Transitions clear it.
 */
async function claimWork(deps: Deps, id: string, state: string): Promise<Date | null> {
  const now = deps.clock.now();
  const { count } = await deps.prisma.environment.updateMany({
    where: { id, state, OR: [{ workClaim: null }, { workClaim: { lt: new Date(now.getTime() - CLAIM_MS) } }] },
    data: { workClaim: now },
  });
  return count === 1 ? now : null;
}

/**
 * Gives the work back (this instance stops while its node has not answered): the next instance
 * to look takes it at once, instead of after CLAIM_MS. The environment stays as it was.
 */
async function giveBackWork(deps: Deps, id: string, claimed: Date): Promise<void> {
  await deps.prisma.environment.updateMany({ where: { id, workClaim: claimed }, data: { workClaim: null } });
}

/** Starting environments whose start time has passed: prepared, then ready; or failed past the bound. */
async function advanceStarting(deps: Deps, provider: NodeProvider): Promise<void> {
  const now = deps.clock.now();
  const due = await deps.prisma.$queryRaw<{ id: string; nodeId: string | null }[]>`
    SELECT id, "nodeId" FROM "Environment"
     WHERE state = 'starting' AND starting + ("startMs" * interval '1 millisecond') <= ${now}
     ORDER BY starting`;
  // Each node prepares on its own: one waiting for a slow node holds up no other. A prepare
  // still under way after PREPARE_WAIT_MS (lifecycle commands, a pull) goes on without holding up
  // the job's other work (time-outs, stops); it keeps its environment's work claim meanwhile.
  const prepares = Promise.all(
    due.map(({ id }) =>
      prepareOne(deps, provider, id, now).catch((error: unknown) => deps.log(`preparing environment ${id} failed`, error)),
    ),
  );
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([prepares, new Promise<void>((resolve) => (timer = setTimeout(resolve, PREPARE_WAIT_MS)))]);
  clearTimeout(timer);
}

/** How long the environment job waits for the prepares it started before going on with its other work. */
const PREPARE_WAIT_MS = 5_000;

/** `taken`: the environment as its claim left it, its work already taken (a warm claim). */
async function prepareOne(deps: Deps, provider: NodeProvider, id: string, now: Date, taken?: Environment): Promise<void> {
  const env = taken ?? (await deps.prisma.environment.findUnique({ where: { id } }));
  if (env?.state !== 'starting' || !env.starting) return;
  const bound = startBound(env);
  if (now.getTime() - env.starting.getTime() > bound) {
    await fail(deps, provider, env, `did not become ready within ${formatDuration(bound)} on node ${env.node}`, 'starting');
    return;
  }
  const claimed = taken?.workClaim ?? (await claimWork(deps, id, 'starting'));
  if (!claimed) return;
  let runtime: string;
  try {
    runtime = await provider.prepare(deps, env);
  } catch (error) {
    if (error instanceof QuestionAbandonedError) return giveBackWork(deps, id, claimed);
    // A lifecycle command that failed says so itself (`postCreateCommand exited 3`): not the node's fault.
    const why =
      error instanceof EnvironmentFaultError
        ? error.message
        : `node ${env.node} could not prepare the environment: ${(error as Error).message}`;
    await fail(deps, provider, env, why, 'starting');
    return;
  }
  const ready = await transition(deps, id, ['starting'], 'ready', (at, current) => ({
    ready: at,
    runtime,
    readyMs: at.getTime() - current.created.getTime(),
    idleUntil: pushedIdleUntil(current, at),
  }));
  if (ready?.readyMs != null) deps.metrics.environmentStart.observe({ template: ready.template, pool: ready.pool }, ready.readyMs / 1000);
  // A claimed or evicted warm container is made again on another free slot: only now, so making it
  // does not compete with the claim for the engine.
  if (env.warmSlot) deps.background.nudge(WARM_JOB);
  // Stopped while it was being prepared: what the preparation wrote after the release is wiped.
  if (!ready) await discardIfEnded(deps, provider, id);
}

/** Ends an environment as failed, then wipes what its node holds of it. */
async function fail(deps: Deps, provider: NodeProvider, env: Environment, error: string, from: SourceOf<'failed'>): Promise<void> {
  await transition(deps, env.id, [from], 'failed', (at) => ({ error, stopped: at }));
  await discardIfEnded(deps, provider, env.id);
}

async function discardIfEnded(deps: Deps, provider: NodeProvider, id: string): Promise<void> {
  const env = await deps.prisma.environment.findUnique({ where: { id } });
  if (env && isEnded(env.state)) await provider.discard(deps, env);
}

/** Hard time-outs end any live lease; idle time-outs end ready ones. Both say so in `error`. */
async function enforceTimeouts(deps: Deps): Promise<void> {
  const now = deps.clock.now();
  const hard = await deps.prisma.environment.findMany({
    where: { state: { in: [...STOPPABLE] }, expires: { lte: now } },
    select: { id: true, hardMs: true },
  });
  for (const env of hard) {
    await transition(deps, env.id, STOPPABLE, 'stopping', () => ({
      error: `hard time-out: the ${formatDuration(env.hardMs)} lease ended`,
    }));
  }
  const idle = await deps.prisma.environment.findMany({
    where: { state: 'ready', idleUntil: { lte: now } },
    select: { id: true, idleMs: true },
  });
  for (const env of idle) {
    await transition(deps, env.id, ['ready'], 'stopping', () => ({
      error: `idle time-out: no activity for ${formatDuration(env.idleMs)}`,
    }));
  }
}

/**
 * Stopping environments: released by their node, then stopped and the node freed. Answers the
 * ones still waiting for their sandbox agent's last `out` pass (a reason leases wait: waiting.ts).
 */
async function finishStopping(deps: Deps, provider: NodeProvider): Promise<string[]> {
  const stopping = await deps.prisma.environment.findMany({ where: { state: 'stopping' }, orderBy: { created: 'asc' } });
  const outSync: string[] = [];
  const release = async (env: Environment) => {
    if (await releaseOne(deps, provider, env)) outSync.push(env.id);
  };
  await Promise.all(stopping.map(release));
  return outSync;
}

/** Releases one stopping environment; true while it waits for its out shares instead. */
async function releaseOne(deps: Deps, provider: NodeProvider, env: Environment): Promise<boolean> {
  // A sandbox agent that runs gets its chance to bring the out shares home first (bounded).
  if (await awaitingOutSync(deps, env)) return true;
  const claimed = await claimWork(deps, env.id, 'stopping');
  if (!claimed) return false;
  try {
    await provider.release(deps, env);
  } catch (error) {
    if (error instanceof QuestionAbandonedError) {
      await giveBackWork(deps, env.id, claimed);
      return false;
    }
    await fail(deps, provider, env, `node ${env.node} could not release the environment: ${(error as Error).message}`, 'stopping');
    return false;
  }
  // A system end for a fault of the environment's own (its disk limit) ends failed; `error` says why.
  await transition(deps, env.id, ['stopping'], env.endsAs === 'failed' ? 'failed' : 'stopped', (at) => ({ stopped: at }));
  return false;
}

/**
 * Deletes event-log rows nobody can still be catching up on, usage samples past the hour of
 * history (those of ended environments: a live one's are thinned as its samples arrive), and the
 * logs of environments ended a week ago.
 */
async function pruneEvents(deps: Deps): Promise<void> {
  const now = deps.clock.now().getTime();
  await deps.prisma.environmentEvent.deleteMany({ where: { at: { lt: new Date(now - 24 * 60 * 60 * 1000) } } });
  await deps.prisma.usageSample.deleteMany({ where: { sampled: { lt: new Date(now - HISTORY_MS) } } });
  await pruneEnvironmentLogs(deps);
}

/** A claimed warm container is ready in milliseconds: its claim took the node work to ready it at once. */
const readyNow = (env: Environment) => env.workClaim !== null && env.warmClaimed && env.startMs === 0;

export function environmentJob(provider: NodeProvider): BackgroundJob {
  return {
    name: ENVIRONMENT_JOB,
    intervalMs: 1000,
    async run(deps) {
      await enforceTimeouts(deps);
      const outSync = await finishStopping(deps, provider);
      const claimed = await claimQueued(deps);
      // A claimed warm container is ready in milliseconds: before anything else waits on it.
      for (const env of claimed) if (readyNow(env)) await prepareOne(deps, provider, env.id, deps.clock.now(), env);
      // Before the (possibly long) preparations: what still waits says why at once.
      await explainWaiting(deps, outSync);
      await advanceStarting(deps, provider);
      // The database holds every deadline; this only wakes the job near the next one.
      for (const env of claimed) deps.background.nudge(ENVIRONMENT_JOB, env.startMs);
    },
  };
}

/**
 * Claims queued leases the moment one is created or a warm container is ready, and readies at once
 * those that took a warm container: apart from the environment job, whose release of another lease
 * (seconds on a busy engine) would otherwise hold up a claim of milliseconds. A claim is the same
 * SKIP LOCKED transaction as between instances, a preparation is taken with claimWork; the
 * environment job still claims every second, so this interval is only a backstop.
 */
export function claimJob(provider: NodeProvider): BackgroundJob {
  return {
    name: CLAIM_JOB,
    intervalMs: 60_000,
    async run(deps) {
      // Each one as it is claimed: a warm container is ready before the next claim is looked for.
      await claimQueued(deps, async (env) => {
        if (readyNow(env)) await prepareOne(deps, provider, env.id, deps.clock.now(), env);
        else deps.background.nudge(ENVIRONMENT_JOB, env.startMs);
      });
    },
  };
}

export const eventPruneJob: BackgroundJob = { name: 'environment-events', intervalMs: 60 * 60 * 1000, run: pruneEvents };
