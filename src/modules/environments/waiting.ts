// Why each pending environment still waits (`waiting`, docs/environments.md#why-it-waits): the
// claim's own rule (claimQueued in job.ts) read backwards. A lease is placed, oldest
// first, on a free slot it may take: a free slot of its organization's own online node, or a free
// built-in (hot) node while its organization holds less than its share of the pool's hot nodes. So
// it waits because no node serves its pool for it, because its organization holds its share, or
// because every slot it may take is busy, behind the leases that would be placed before it.
//
// The environment job writes the words after every claim pass, only for leases whose words change
// (each write is a new version in the event log, pushed to subscribers), so every instance shows
// the same and nothing is rewritten while nothing moves. Positions are exact up to EXACT_AHEAD
// and bucketed past it, and busy slots are broken down only near the front: one lease placed
// rewrites a bounded number of rows, not the whole queue. Other organizations' leases count in
// positions and busy slots, never by name.
import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import { LIVE_STATES } from '../../kernel/environment-states';
import { plural } from '../../kernel/words';
import type { Prisma, Tx } from '../../platform/db';
import type { Capacity } from '../../protocol/capacity';
import { describeNeed, fits, NODE_TAKES_WORK, needOf, type Room } from '../nodes';
import { hotNodesFor } from '../organizations';
import type { PoolSpec } from '../templates';
import { announceEnvironment, recordEvent } from './events';

/** The first this many pending leases of a pool (in queue order) are explained by the job. */
export const EXPLAINED = 1000;
/** Positions below this are exact (and the busy slots broken down); past it, a bucket. */
const EXACT_AHEAD = 20;
const BUCKETS = [500, 200, 100, 50, EXACT_AHEAD];

/**
 * What a lease created behind the first EXPLAINED of its pool's queue shows until it moves into
 * them (positions only shrink: a lease created inside them stays inside).
 */
function farBehind(pool: string): string {
  return `pool ${pool}: at least ${EXPLAINED} leases queued before it`;
}

type Db = Prisma | Tx;

/** A lease's words, and what it shows now. */
interface Words {
  env: Pick<Environment, 'id' | 'orgId' | 'waiting'>;
  text: string;
}

interface Busy {
  total: number;
  free: number;
  starting: number;
  stopping: number;
  outSync: number;
}

const noSlots = (): Busy => ({ total: 0, free: 0, starting: 0, stopping: 0, outSync: 0 });

/** Slots of the pool a lease may take: the hot nodes (all organizations), each organization's own online slots. */
interface PoolPicture {
  hot: Busy;
  /** Hot nodes each organization's environments hold (any state), as the claim counts them. */
  hotHeld: Map<string, number>;
  own: Map<string, Busy>;
}

function add(busy: Busy, state: string | null, n: number, outSync: number): void {
  busy.total += n;
  if (state === null) busy.free += n;
  else if (state === 'starting') busy.starting += n;
  else if (state === 'stopping') {
    busy.stopping += n - outSync;
    busy.outSync += outSync;
  }
}

async function pictureOf(db: Db, pool: string, outSync: string[]): Promise<PoolPicture> {
  // Grouped in the database: a pool of thousands of hot nodes is a handful of rows here.
  const rows = await db.$queryRaw<{ nodeOrg: string | null; envOrg: string | null; state: string | null; n: number; outSync: number }[]>`
    SELECT CASE WHEN r.builtin THEN NULL ELSE r."orgId" END AS "nodeOrg", e."orgId" AS "envOrg", e.state, count(*)::int AS n,
           (count(*) FILTER (WHERE e.id = ANY(${outSync}::text[])))::int AS "outSync"
      FROM "Node" n JOIN "RemoteNode" r ON r.id = n."remoteId" LEFT JOIN "Environment" e ON e.id = n."environmentId"
     WHERE n.pool = ${pool} AND ${NODE_TAKES_WORK}
     GROUP BY 1, 2, 3`;
  const picture: PoolPicture = { hot: noSlots(), hotHeld: new Map(), own: new Map() };
  for (const row of rows) {
    if (row.nodeOrg === null) {
      add(picture.hot, row.state, row.n, row.outSync);
      if (row.envOrg) picture.hotHeld.set(row.envOrg, (picture.hotHeld.get(row.envOrg) ?? 0) + row.n);
    } else {
      const own = picture.own.get(row.nodeOrg) ?? noSlots();
      add(own, row.state, row.n, row.outSync);
      picture.own.set(row.nodeOrg, own);
    }
  }
  return picture;
}

function aheadText(ahead: number): string {
  if (ahead === 0) return 'next in line';
  if (ahead < EXACT_AHEAD) return `${plural(ahead, 'lease')} ahead`;
  return `at least ${BUCKETS.find((b) => ahead >= b)} leases ahead`;
}

function busyText(busy: Busy, detail: boolean): string {
  const text = `${busy.total} of ${plural(busy.total, 'node')} busy`;
  if (!detail) return text;
  const parts = [
    busy.starting ? `${busy.starting} starting` : '',
    busy.stopping ? `${busy.stopping} stopping` : '',
    busy.outSync ? `${busy.outSync} waiting for an out-share sync` : '',
  ].filter(Boolean);
  return parts.length ? `${text} (${parts.join(', ')})` : text;
}

function sum(a: Busy, b: Busy): Busy {
  return {
    total: a.total + b.total,
    free: a.free + b.free,
    starting: a.starting + b.starting,
    stopping: a.stopping + b.stopping,
    outSync: a.outSync + b.outSync,
  };
}

interface RegisteredNode {
  orgId: string;
  name: string;
  state: string;
  lastSeen: Date | null;
  draining: Date | null;
  cordoned: Date | null;
  engineError: string | null;
}

/** Why an organization's lease finds no node at all in a pool without hot nodes: its own nodes, by name. */
function noNodeText(pool: string, nodes: RegisteredNode[]): string {
  if (nodes.length === 0) {
    return `no node serves pool ${pool}: it has no built-in nodes and your organization has registered none for it; an admin adds one with POST /v1/nodes and runs berth node there`;
  }
  const said = nodes.slice(0, 3).map((n) => {
    if (n.draining) return `node ${n.name} is draining`;
    if (n.cordoned) return `node ${n.name} is cordoned (no new leases until an admin uncordons it)`;
    if (n.state === 'online' && n.engineError) return `node ${n.name} is degraded: ${n.engineError}`;
    if (n.state === 'leaving') return `node ${n.name} is shutting down`;
    if (n.state === 'offline') return `node ${n.name} is offline: its agent was stopped`;
    if (n.state === 'online') return `node ${n.name} is connecting`;
    return n.lastSeen ? `node ${n.name} is lost` : `node ${n.name} has not connected yet`;
  });
  if (nodes.length > 3) said.push(`${nodes.length - 3} more`);
  return `no online node serves pool ${pool}: ${said.join(', ')}`;
}

/** A node with a free slot of the pool: whose it is, and its room (its live environments; a lease makes room by removing warm containers). */
interface FreeNode {
  builtin: boolean;
  orgId: string;
  room: Room;
}

async function freeNodesOf(db: Db, pool: string): Promise<FreeNode[]> {
  const rows = await db.$queryRaw<{ id: string; builtin: boolean; orgId: string; cpus: number | null; memory: bigint | null }[]>`
    SELECT DISTINCT r.id, r.builtin, r."orgId", r.cpus, r.memory
      FROM "Node" n JOIN "RemoteNode" r ON r.id = n."remoteId"
     WHERE n.pool = ${pool} AND n."environmentId" IS NULL AND ${NODE_TAKES_WORK}`;
  if (rows.length === 0) return [];
  // Its live environments only: the warm containers of its free slots make room for a lease.
  const live = await db.environment.findMany({
    where: { nodeId: { in: rows.map((r) => r.id) }, state: { in: [...LIVE_STATES] } },
    select: { nodeId: true, resources: true },
  });
  return rows.map((r) => {
    const used = live
      .filter((e) => e.nodeId === r.id)
      .reduce<Capacity>(
        (sum, e) => {
          const need = needOf(e.resources as Parameters<typeof needOf>[0]);
          return { cpus: sum.cpus + need.cpus, memory: sum.memory + need.memory };
        },
        { cpus: 0, memory: 0 },
      );
    return {
      builtin: r.builtin,
      orgId: r.orgId,
      room: {
        capacity: r.cpus !== null && r.memory !== null ? { cpus: r.cpus, memory: Number(r.memory) } : null,
        used: { cpus: used.cpus, memory: used.memory },
      },
    };
  });
}

/** What the words of a pool's leases are made of, for the organizations with leases waiting there. */
interface PoolView {
  pool: PoolSpec;
  picture: PoolPicture;
  /** The nodes with a free slot, and their room. */
  free: FreeNode[];
  share(org: string): number;
  /**
   * Whether its leases may take a hot node as one frees: under its share, or with a share of them
   * all (then every busy one is its own, and the next to free is too).
   */
  mayHot(org: string): boolean;
  /** Its own nodes of the pool (by name), when it has no slot at all in a pool without hot nodes. */
  nodesOf(org: string): RegisteredNode[];
  /** Why the built-in node, online, serves none of the pool's hot nodes: its engine's trouble. */
  builtinTrouble: string | null;
}

async function viewPool(deps: Deps, db: Db, pool: PoolSpec, orgIds: string[], outSync: string[]): Promise<PoolView> {
  const picture = await pictureOf(db, pool.name, outSync);
  const shares = new Map(
    (await db.organization.findMany({ where: { id: { in: orgIds } }, select: { id: true, poolShare: true } })).map((o) => [
      o.id,
      o.poolShare ?? deps.config.poolOrgShare,
    ]),
  );
  const share = (org: string) => shares.get(org) ?? deps.config.poolOrgShare;
  const unserved = orgIds.filter((org) => picture.hot.total === 0 && !picture.own.get(org)?.total);
  const registered =
    unserved.length === 0
      ? []
      : await db.remoteNode.findMany({
          where: { pool: pool.name, revoked: null, orgId: { in: unserved } },
          orderBy: [{ created: 'asc' }, { id: 'asc' }],
          select: { orgId: true, name: true, state: true, lastSeen: true, draining: true, cordoned: true, engineError: true },
        });
  // Hot nodes the catalog has and none serving: the built-in node is away, or its engine does not answer.
  const builtin =
    picture.hot.total === 0 && pool.hotNodes > 0
      ? await db.remoteNode.findFirst({ where: { builtin: true, state: 'online' }, select: { engineError: true } })
      : null;
  return {
    pool,
    picture,
    free: picture.hot.free + [...picture.own.values()].reduce((n, b) => n + b.free, 0) > 0 ? await freeNodesOf(db, pool.name) : [],
    share,
    mayHot(org) {
      const cap = hotNodesFor(share(org), pool.hotNodes);
      return picture.hot.total > 0 && ((picture.hotHeld.get(org) ?? 0) < cap || cap >= picture.hot.total);
    },
    nodesOf: (org) => registered.filter((n) => n.orgId === org),
    builtinTrouble: builtin?.engineError ?? null,
  };
}

/**
 * The words of a lease of `org` with `ahead` leases that would be placed before it (its
 * organization's older ones, and, while it may take a hot node, every older one that may take one
 * too), or undefined when a free slot fits it: the claim is placing it.
 */
function wordsFor(view: PoolView, org: string, ahead: number, need: Capacity): string | undefined {
  const { pool, picture } = view;
  const mayHot = view.mayHot(org);
  const own = picture.own.get(org) ?? noSlots();
  const slots = mayHot ? sum(picture.hot, own) : own;
  if (slots.free > 0) {
    // A free slot it may take, on a node with room for it (the claim's rule: placement.ts).
    const mine = view.free.filter((n) => n.orgId === org || (mayHot && n.builtin));
    if (mine.length === 0 || mine.some((n) => fits(n.room, need))) return undefined;
    return `pool ${pool.name}: no node has ${describeNeed(need)} free, ${aheadText(ahead)}`;
  }
  const held = `your organization holds its share of the built-in nodes (${picture.hotHeld.get(org) ?? 0} of ${pool.hotNodes} at pool share ${view.share(org)})`;
  if (slots.total === 0) {
    if (picture.hot.total > 0) return `pool ${pool.name}: ${held}, ${aheadText(ahead)}`;
    // Hot nodes the catalog has, while the built-in node is not connected (its process starting again).
    if (pool.hotNodes > 0 && view.nodesOf(org).length === 0)
      return view.builtinTrouble
        ? `pool ${pool.name}: the built-in node is degraded: ${view.builtinTrouble}, ${aheadText(ahead)}`
        : `pool ${pool.name}: the built-in node is not connected, ${aheadText(ahead)}`;
    return noNodeText(pool.name, view.nodesOf(org));
  }
  const atShare = !mayHot && picture.hot.total > 0 ? `, and ${held}` : '';
  return `pool ${pool.name}: ${busyText(slots, ahead < EXACT_AHEAD)}${atShare}, ${aheadText(ahead)}`;
}

/** The words of each of the pool's first EXPLAINED pending leases (queue order) that a free slot does not fit. */
async function explainPool(deps: Deps, pool: PoolSpec, outSync: string[]): Promise<Words[]> {
  const pending = await deps.prisma.environment.findMany({
    where: { pool: pool.name, state: 'pending' },
    orderBy: { queueSeq: 'asc' },
    take: EXPLAINED,
    select: { id: true, orgId: true, waiting: true, resources: true, template: true },
  });
  if (pending.length === 0) return [];
  const orgs = [...new Set(pending.map((e) => e.orgId))];
  const view = await viewPool(deps, deps.prisma, pool, orgs, outSync);
  // Leases of a template whose image builds wait for the build; the claim passes over them.
  const building = new Map(
    (
      await deps.prisma.template.findMany({
        where: { status: 'building', orgId: { in: orgs }, pool: pool.name },
        select: { orgId: true, name: true, version: true },
      })
    ).map((t) => [`${t.orgId}\n${t.name}`, t]),
  );
  const out: Words[] = [];
  const ownAhead = new Map<string, number>();
  let hotAhead = 0;
  for (const env of pending) {
    const org = env.orgId;
    const build = building.get(`${org}\n${env.template}`);
    if (build) {
      out.push({ env, text: buildingText(build) });
      continue;
    }
    const mayHot = view.mayHot(org);
    const need = needOf(env.resources as Parameters<typeof needOf>[0]);
    const text = wordsFor(view, org, mayHot ? hotAhead : (ownAhead.get(org) ?? 0), need);
    ownAhead.set(org, (ownAhead.get(org) ?? 0) + 1);
    if (mayHot) hotAhead++;
    if (text !== undefined) out.push({ env, text });
  }
  return out;
}

/** The words of a lease whose template's image is being built. */
export function buildingText(template: { name: string; version: number }): string {
  return `template ${template.name} version ${template.version}: its image is building (GET /v1/templates/${template.name}/log)`;
}

/**
 * Inside the transaction that queues a lease of `orgId` (its pool's admissions take turns): the
 * words it starts with, so that it is written once, not created and then explained. Every pending
 * lease of the pool is ahead of it; null when a free slot fits it (the claim places it at once).
 */
export async function waitingOfNew(
  deps: Deps,
  tx: Tx,
  pool: PoolSpec,
  orgId: string,
  queued: number,
  need: Capacity,
): Promise<string | null> {
  if (queued >= EXPLAINED) return farBehind(pool.name);
  // None queued (under the queue's lock, so none came since): nothing to count, not even the new
  // lease itself when its transaction has inserted it already (createEnvironment's claim).
  const pending =
    queued === 0
      ? []
      : await tx.environment.groupBy({ by: ['orgId'], where: { pool: pool.name, state: 'pending' }, _count: { _all: true } });
  const view = await viewPool(deps, tx, pool, [...new Set([orgId, ...pending.map((p) => p.orgId)])], []);
  const mayHot = view.mayHot(orgId);
  const ahead = pending.reduce((n, p) => n + (p.orgId === orgId || (mayHot && view.mayHot(p.orgId)) ? p._count._all : 0), 0);
  return wordsFor(view, orgId, ahead, need) ?? null;
}

/** Pending leases of a pool the catalog no longer has (it changed at a restart): nothing claims them. */
async function explainOrphans(deps: Deps): Promise<Words[]> {
  const orphans = await deps.prisma.environment.findMany({
    where: { state: 'pending', pool: { notIn: deps.catalog.pools.map((p) => p.name) } },
    take: EXPLAINED,
    select: { id: true, orgId: true, waiting: true, pool: true },
  });
  return orphans.map((env) => ({
    env,
    text: `pool ${env.pool} is no longer in the templates catalog: no node will take it; stop it and lease again`,
  }));
}

/** The instances (their Deps) that looked for leases of removed pools: once each, the catalog only changes at a start. */
const orphansLooked = new WeakSet<Deps>();

/**
 * Writes the words of every explained pending lease whose words changed: its own transaction each
 * (the row, then its organization's event log, in the order transitions take them), a new version
 * in the log, one wake-up per organization. A lease claimed meanwhile is left alone.
 */
export async function explainWaiting(deps: Deps, outSync: string[] = []): Promise<void> {
  const words: Words[] = [];
  for (const pool of deps.catalog.pools) words.push(...(await explainPool(deps, pool, outSync)));
  if (!orphansLooked.has(deps)) {
    words.push(...(await explainOrphans(deps)));
    orphansLooked.add(deps);
  }
  const changedOrgs = new Set<string>();
  for (const { env, text } of words) {
    if (env.waiting === text) continue;
    const changed = await deps.prisma.$transaction(async (tx) => {
      const [updated] = await tx.environment.updateManyAndReturn({
        where: { id: env.id, state: 'pending', OR: [{ waiting: null }, { waiting: { not: text } }] },
        data: { waiting: text, version: { increment: 1 } },
      });
      if (updated) await recordEvent(tx, updated);
      return updated;
    });
    if (changed) changedOrgs.add(changed.orgId);
  }
  for (const org of changedOrgs) await announceEnvironment(deps, org);
}
