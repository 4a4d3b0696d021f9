// The warm job (docs/environments.md, "Warm templates"): keeps, on the free slots of each pool,
// the started, unclaimed containers templates ask for with `warm: N`, so a lease claims one
// instead of starting a container. The database says which slot keeps which (Node.warm*); the
// job plans under one advisory lock (instances take turns, every one may run it), then has the
// nodes do it over their control channels (`warm`, `warm-drop`; a node answers `warm-ready` or
// `warm-failed`), the built-in node as any other. A slot's `warmSince` names one making of its
// container: an answer about an older one changes nothing.
//
// - A hot node (a slot of the built-in node, which needs an engine) keeps an organization's template
//   only while the organization's leases and warm containers on the hot nodes stay within its pool
//   share (POOL_ORG_SHARE); the catalog's templates are the operator's and count against no organization.
// - Another node keeps its own organization's templates, and the catalog's of its pool that its
//   organization has not replaced with its own: `warm: N` of a catalog template is N on the hot
//   nodes and N on each organization's nodes of the pool (only that organization claims those),
//   an organization's own template N in all. A node without an engine keeps none.
// - A container whose template changed (another spec hash), went away, or asks fewer is removed;
//   one that failed is tried again after a backoff that doubles up to WARM_BACKOFF_MAX_MS, its
//   error kept on the slot (GET /v1/nodes, berth_warm_containers) and logged.
import type { Actor, Deps } from '../../app/context';
import type { BackgroundJob } from '../../kernel/background';
import { CLAIM_JOB, WARM_JOB } from '../../kernel/job-names';
import { lockFor } from '../../platform/db';
import { sendToNode } from '../../protocol/node-bus';
import type { FromNode } from '../../protocol/node-channel';
import { BUILT_IMAGE_PREFIX, builtOn, type TemplateSpec, templateFromJson, warmSpecHash } from '../templates';
import { fits, headroom, NOTHING, needOf, roomsOf, take, warmAllocation } from './placement';
import { LIFECYCLE_START_MS } from './provider';
import { warmEnvironmentSpec } from './specs';
import { NODE_TAKES_WORK } from './takes-work';

/** A slot's warm columns, cleared: it keeps no warm container (now empty, or holding an environment). */
export const NO_WARM = {
  warmTemplate: null,
  warmOrg: null,
  warmSpec: null,
  warmState: null,
  warmSince: null,
  warmError: null,
  warmRetry: null,
  warmFailures: 0,
  warmCpus: null,
  warmMemory: null,
};

/** A making of a warm container not answered within this long is done again (its instance or node died). */
export const WARM_START_MS = 5 * 60_000;
const WARM_BACKOFF_MIN_MS = 5_000;
export const WARM_BACKOFF_MAX_MS = 10 * 60_000;

export type WarmState = 'starting' | 'ready' | 'failed';

interface Wanted {
  orgId: string;
  spec: TemplateSpec;
  hash: string;
}

interface Slot {
  id: string;
  pool: string;
  remoteId: string;
  nodeOrg: string;
  /** A slot of the built-in node (a hot node), and whether that node has a container engine. */
  builtin: boolean;
  hasEngine: boolean;
  warmTemplate: string | null;
  warmOrg: string | null;
  warmSpec: string | null;
  warmState: WarmState | null;
  warmSince: Date | null;
  warmRetry: Date | null;
  warmCpus: number | null;
  warmMemory: bigint | null;
}

/** One container for a node to make: the slot, which making of it, and the template. */
export interface WarmMake {
  slot: string;
  remoteId: string;
  since: Date;
  want: Wanted;
}

const keyOf = (orgId: string, name: string) => `${orgId}\0${name}`;

/** Templates that ask for warm containers, with an image (a files-only template has nothing to keep started). */
async function wantedTemplates(deps: Deps): Promise<Wanted[]> {
  const rows = await deps.prisma.$queryRaw<{ orgId: string; name: string; spec: unknown }[]>`
    SELECT "orgId", name, spec FROM "Template"
     WHERE status = 'ready' AND jsonb_typeof(spec->'warm') = 'number' AND (spec->>'warm')::int > 0
     ORDER BY updated, id`;
  const wanted: Wanted[] = [];
  for (const row of rows) {
    const spec = templateFromJson(row.spec, row.name);
    if (spec.image && spec.warm > 0) wanted.push({ orgId: row.orgId, spec, hash: warmSpecHash(spec) });
  }
  return wanted;
}

/**
 * Decides, in one transaction, what each free slot keeps: clears the warm containers no longer
 * wanted (their removal is returned), and assigns free slots to templates short of their count.
 */
async function plan(deps: Deps): Promise<{ make: WarmMake[]; drop: Slot[] }> {
  const wanted = await wantedTemplates(deps);
  // Nothing asked and nothing kept (most deployments): no transaction every interval.
  if (wanted.length === 0 && (await deps.prisma.node.count({ where: { warmState: { not: null } } })) === 0) return { make: [], drop: [] };
  const byKey = new Map(wanted.map((w) => [keyOf(w.orgId, w.spec.name), w]));
  const catalogNames = [...new Set(wanted.filter((w) => w.orgId === '').map((w) => w.spec.name))];
  return deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, 'berth:warm');
    const now = deps.clock.now();
    // Slots of nodes that cannot take work lose their warm containers (a node that comes back
    // removes what it no longer keeps when it says hello).
    const gone = await tx.$queryRaw<Slot[]>`
      UPDATE "Node" n SET "warmTemplate" = NULL, "warmOrg" = NULL, "warmSpec" = NULL, "warmState" = NULL,
             "warmSince" = NULL, "warmError" = NULL, "warmRetry" = NULL, "warmFailures" = 0
        FROM "RemoteNode" r
       WHERE r.id = n."remoteId" AND n."warmState" IS NOT NULL
         AND NOT ${NODE_TAKES_WORK}
      RETURNING n.id, n."remoteId"`;
    const slots = await tx.$queryRaw<Slot[]>`
      SELECT n.id, n.pool, n."remoteId", r."orgId" AS "nodeOrg", r.builtin, r.engine IS NOT NULL AS "hasEngine",
             n."warmTemplate", n."warmOrg", n."warmSpec", n."warmState", n."warmSince", n."warmRetry", n."warmCpus", n."warmMemory"
        FROM "Node" n JOIN "RemoteNode" r ON r.id = n."remoteId"
       WHERE n."environmentId" IS NULL AND ${NODE_TAKES_WORK}
       ORDER BY n.id FOR UPDATE OF n SKIP LOCKED`;
    // A warm container counts against its node's capacity as a lease does (placement.ts).
    const rooms = await roomsOf(
      tx,
      slots.map((s) => s.remoteId),
    );
    // What each organization holds of each pool's hot nodes: its leases, then its warm containers.
    const held = new Map<string, number>();
    const heldKey = (pool: string, orgId: string) => `${pool}\0${orgId}`;
    const busy = await tx.$queryRaw<{ pool: string; orgId: string; n: number }[]>`
      SELECT h.pool, x."orgId", count(*)::int AS n
        FROM "Node" h JOIN "RemoteNode" hr ON hr.id = h."remoteId" JOIN "Environment" x ON x.id = h."environmentId"
       WHERE hr.builtin GROUP BY h.pool, x."orgId"`;
    for (const b of busy) held.set(heldKey(b.pool, b.orgId), b.n);
    const orgs = new Map<string, number | null>();
    const shareOf = async (orgId: string) => {
      if (!orgs.has(orgId)) orgs.set(orgId, (await tx.organization.findUnique({ where: { id: orgId } }))?.poolShare ?? null);
      return orgs.get(orgId) ?? deps.config.poolOrgShare;
    };
    const hotRoom = async (pool: string, orgId: string) => {
      if (orgId === '') return true;
      const hot = deps.catalog.pools.find((p) => p.name === pool)?.hotNodes ?? 0;
      return (held.get(heldKey(pool, orgId)) ?? 0) < Math.max(1, Math.ceil((await shareOf(orgId)) * hot));
    };

    const drop: Slot[] = gone.map((g) => ({ ...g, warmState: null }) as Slot);
    const make: WarmMake[] = [];
    const clear = async (slot: Slot) => {
      await tx.node.update({
        where: { id: slot.id },
        data: NO_WARM,
      });
      drop.push({ ...slot });
      take(rooms.get(slot.remoteId)!, NOTHING, warmAllocation(slot));
      slot.warmState = null;
    };
    /** Makes the slot's container (again), when its node has room for it; false when it has not. */
    const start = async (slot: Slot, want: Wanted): Promise<boolean> => {
      const room = rooms.get(slot.remoteId)!;
      const need = needOf(want.spec.resources);
      const freed = warmAllocation(slot);
      if (!fits(room, need, freed)) return false;
      take(room, need, freed);
      // Another making of the slot than any answer still under way.
      const since = new Date(Math.max(now.getTime(), (slot.warmSince?.getTime() ?? 0) + 1));
      const warm = {
        warmTemplate: want.spec.name,
        warmOrg: want.orgId,
        warmSpec: want.hash,
        warmState: 'starting' as const,
        warmSince: since,
        warmCpus: need.cpus || null,
        warmMemory: need.memory ? BigInt(need.memory) : null,
      };
      await tx.node.update({ where: { id: slot.id }, data: { ...warm, warmRetry: null } });
      Object.assign(slot, warm);
      make.push({ slot: slot.id, remoteId: slot.remoteId, since, want });
      return true;
    };
    // Catalog templates an organization replaced with its own: its nodes keep only its own.
    const replaced = new Set(
      catalogNames.length === 0
        ? []
        : (
            await tx.$queryRaw<{ orgId: string; name: string }[]>`
              SELECT "orgId", name FROM "Template" WHERE "orgId" <> '' AND name = ANY(${catalogNames}::text[])`
          ).map((t) => keyOf(t.orgId, t.name)),
    );
    // A built image is only on the nodes that built it.
    const built = await builtOn(
      tx,
      wanted.map((w) => w.spec.image ?? null),
    );
    const holds = (slot: Slot, want: Wanted) =>
      !want.spec.image?.startsWith(BUILT_IMAGE_PREFIX) || built.has(`${slot.remoteId}\n${want.spec.image}`);
    const mayKeep = (slot: Slot, want: Wanted) =>
      slot.pool === want.spec.pool &&
      slot.hasEngine &&
      holds(slot, want) &&
      (slot.builtin || slot.nodeOrg === want.orgId || (want.orgId === '' && !replaced.has(keyOf(slot.nodeOrg, want.spec.name))));
    /** Whose count of the template a slot's container is: the hot nodes' ('') or an organization's nodes' for a catalog template, the organization's for its own. */
    const scopeOf = (slot: Slot, want: Wanted) => (want.orgId !== '' || slot.builtin ? want.orgId : slot.nodeOrg);
    const countKey = (scope: string, want: Wanted) => `${scope}\0${keyOf(want.orgId, want.spec.name)}`;

    // Those kept: still wanted, with the same spec, on a slot that may keep them, within the count
    // (ready ones first) and, on hot nodes, within the organization's share.
    const count = new Map<string, number>();
    const rank = { ready: 0, starting: 1, failed: 2 } as const;
    const kept = slots.filter((s) => s.warmState).sort((a, b) => rank[a.warmState!] - rank[b.warmState!]);
    for (const slot of kept) {
      const want = byKey.get(keyOf(slot.warmOrg ?? '', slot.warmTemplate ?? ''));
      const key = want ? countKey(scopeOf(slot, want), want) : '';
      const n = count.get(key) ?? 0;
      const room = !want || !slot.builtin || (await hotRoom(slot.pool, want.orgId));
      if (!want || want.hash !== slot.warmSpec || !mayKeep(slot, want) || n >= want.spec.warm || !room) {
        await clear(slot);
        continue;
      }
      count.set(key, n + 1);
      if (slot.builtin && want.orgId !== '') held.set(heldKey(slot.pool, want.orgId), (held.get(heldKey(slot.pool, want.orgId)) ?? 0) + 1);
      // (one whose template runs lifecycle commands at its making may take as long as a lease's start)
      const makingMs = want.spec.lifecycle.length > 0 ? LIFECYCLE_START_MS : WARM_START_MS;
      const stale = slot.warmState === 'starting' && slot.warmSince!.getTime() < now.getTime() - makingMs;
      const due = slot.warmState === 'failed' && (slot.warmRetry?.getTime() ?? 0) <= now.getTime();
      if (stale || due) await start(slot, want);
    }
    // Each count to fill: an organization's template's; a catalog template's on the hot nodes and
    // on each organization's nodes of its pool.
    const targets = wanted.flatMap((want) => {
      if (want.orgId !== '') return [{ want, scope: want.orgId }];
      const orgs = new Set(slots.filter((s) => !s.builtin && s.pool === want.spec.pool).map((s) => s.nodeOrg));
      return ['', ...orgs].map((scope) => ({ want, scope }));
    });
    // Free slots to templates short of their count, one slot per count in turn (oldest template first).
    let assigned = true;
    while (assigned) {
      assigned = false;
      for (const { want, scope } of targets) {
        const key = countKey(scope, want);
        if ((count.get(key) ?? 0) >= want.spec.warm) continue;
        // On the node left with the most free capacity, as placement puts leases: a rush's leases
        // find warm containers spread as they would be placed.
        const need = needOf(want.spec.resources);
        let slot: Slot | undefined;
        let best = -Infinity;
        for (const s of slots) {
          if (s.warmState || !mayKeep(s, want) || scopeOf(s, want) !== scope) continue;
          // A free slot keeping nothing: nothing of its own is freed for the new container.
          const room = rooms.get(s.remoteId)!;
          if (!fits(room, need)) continue;
          if (s.builtin && !(await hotRoom(s.pool, want.orgId))) continue;
          const left = headroom(room, need);
          if (left > best) [slot, best] = [s, left];
        }
        if (!slot || !(await start(slot, want))) continue;
        count.set(key, (count.get(key) ?? 0) + 1);
        if (slot.builtin && want.orgId !== '')
          held.set(heldKey(slot.pool, want.orgId), (held.get(heldKey(slot.pool, want.orgId)) ?? 0) + 1);
        assigned = true;
      }
    }
    return { make, drop };
  });
}

/**
 * The node made the slot's container (that making of it): it may be claimed now. `remoteId`: only
 * a slot of that node. Its failures still count (a claim or a change of template clears them), so
 * a container whose command keeps ending is made again ever later, not every minute.
 */
async function warmReady(deps: Deps, slot: string, since: Date, remoteId: string): Promise<boolean> {
  const { count } = await deps.prisma.node.updateMany({
    where: { id: slot, remoteId, warmSince: since, warmState: 'starting', environmentId: null },
    data: { warmState: 'ready', warmError: null },
  });
  if (count === 1) deps.background.nudge(CLAIM_JOB);
  return count === 1;
}

/** A warm container that failed, for the log of the instance that heard it (src/edges/channels/node-channel.ts). */
export interface WarmFailure {
  template: string;
  slot: string;
  error: string;
  /** When it is made again, in ms from now. */
  retryMs: number;
}

/**
 * The node could not make the slot's container, or the one it made ended: tried again after a
 * backoff, the error kept for operators. Answers what failed (null: an answer about an older making).
 */
async function warmFailed(deps: Deps, slot: string, since: Date, error: string, remoteId: string): Promise<WarmFailure | null> {
  const row = await deps.prisma.node.findUnique({
    where: { id: slot },
    select: { warmFailures: true, warmTemplate: true, remoteId: true },
  });
  if (!row || row.remoteId !== remoteId) return null;
  const backoff = Math.min(WARM_BACKOFF_MAX_MS, WARM_BACKOFF_MIN_MS * 2 ** row.warmFailures);
  const now = deps.clock.now();
  const { count } = await deps.prisma.node.updateMany({
    where: { id: slot, warmSince: since, warmState: { in: ['starting', 'ready'] }, environmentId: null },
    data: {
      warmState: 'failed',
      warmError: error.slice(0, 1000),
      warmFailures: { increment: 1 },
      warmRetry: new Date(now.getTime() + backoff),
    },
  });
  if (count !== 1) return null;
  deps.background.nudge(WARM_JOB, backoff);
  return { template: row.warmTemplate ?? '', slot, error, retryMs: backoff };
}

/** Asks the slot's node to make its warm container. */
async function tellNode(deps: Deps, make: WarmMake): Promise<void> {
  const spec = {
    ...warmEnvironmentSpec(make.want.spec, make.want.orgId),
    slot: make.slot,
    pool: make.want.spec.pool,
    hash: make.want.hash,
  };
  await sendToNode(deps, make.remoteId, { type: 'warm', warm: { ...spec, since: make.since.toISOString() } });
}

export const warmJob: BackgroundJob = {
  name: WARM_JOB,
  intervalMs: 2000,
  async run(deps) {
    const { make, drop } = await plan(deps);
    for (const slot of drop) await sendToNode(deps, slot.remoteId, { type: 'warm-drop', slot: slot.id });
    for (const m of make) await tellNode(deps, m);
  },
};

/** How long a making the node did not mention yet may be on its way to the node (its message crossed the report). */
const IN_FLIGHT_MS = 30_000;

/** A remote node's making of a warm container was ready (src/agent/node-agent.ts): about a slot of its own only. */
export async function nodeWarmReady(deps: Deps, actor: Actor, message: FromNode<'warm-ready'>): Promise<void> {
  await warmReady(deps, message.slot, new Date(message.since), actor.nodeId!);
}

/** A remote node's making of a warm container failed: about a slot of its own only. */
export async function nodeWarmFailed(deps: Deps, actor: Actor, message: FromNode<'warm-failed'>): Promise<WarmFailure[]> {
  const failed = await warmFailed(deps, message.slot, new Date(message.since), message.error ?? 'unknown error', actor.nodeId!);
  return failed ? [failed] : [];
}

/** The warm containers a remote node holds (after its restart: none): any other of its slots' is made again. */
export async function nodeWarmHeld(deps: Deps, actor: Actor, message: FromNode<'warm-held'>): Promise<WarmFailure[]> {
  const failures: WarmFailure[] = [];
  const holds = new Set(message.slots.map((h) => `${h.slot}@${h.since}`));
  const now = deps.clock.now();
  const slots = await deps.prisma.node.findMany({
    where: { remoteId: actor.nodeId!, environmentId: null, warmState: { in: ['starting', 'ready'] } },
    select: { id: true, warmSince: true, warmState: true },
  });
  for (const slot of slots) {
    if (!slot.warmSince || holds.has(`${slot.id}@${slot.warmSince.toISOString()}`)) continue;
    if (slot.warmState === 'starting' && slot.warmSince.getTime() > now.getTime() - IN_FLIGHT_MS) continue;
    // A ready one that ended (its command exited, or the node restarted) waits its backoff; a
    // making lost with the node's process is done again at once.
    if (slot.warmState === 'ready') {
      const failed = await warmFailed(deps, slot.id, slot.warmSince, 'the node no longer holds it', actor.nodeId!);
      if (failed) failures.push(failed);
      continue;
    }
    await deps.prisma.node.updateMany({
      where: { id: slot.id, warmSince: slot.warmSince },
      data: { warmState: 'failed', warmError: 'the node no longer holds it', warmRetry: now },
    });
  }
  if (slots.length) deps.background.nudge(WARM_JOB);
  return failures;
}
