import type { Actor, Deps } from '../../app/context';
import type { Quota } from '../../generated/prisma/client';
import { requireAdmin, requireMember } from '../../kernel/access';
import { formatDuration, parseDuration } from '../../kernel/durations';
import { LIVE_STATES } from '../../kernel/environment-states';
import { QuotaExceededError, ValidationError } from '../../kernel/errors';
import { plural } from '../../kernel/words';
import { lockFor, type Prisma, type Tx } from '../../platform/db';
import { checkAudited, recordAudit } from '../audit';
import { hotNodesFor, orgLimits } from '../organizations';
import { findTemplate, MAX_HARD_MS, type PoolSpec } from '../templates';

export const ALL_TEMPLATES = '*';

export interface QuotaView {
  template: string;
  maxLeases: number;
  running: number;
  idle: string;
  hard: string;
  /** Why the quota cannot be reached as set (above what its pool can ever run at once); often none. */
  warnings: string[];
}

export interface QuotaInput {
  maxLeases: number;
  idle?: string | null;
  hard?: string | null;
}

async function running(prisma: Prisma | Tx, orgId: string, template: string): Promise<number> {
  return prisma.environment.count({
    where: { orgId, state: { in: [...LIVE_STATES] }, ...(template === ALL_TEMPLATES ? {} : { template }) },
  });
}

function view(quota: Quota, count: number, warnings: string[]): QuotaView {
  return {
    template: quota.template,
    maxLeases: quota.maxLeases,
    running: count,
    idle: formatDuration(quota.idleMs),
    hard: formatDuration(quota.hardMs),
    warnings,
  };
}

interface Capacity {
  pool: string;
  /** The pool's built-in nodes, and how many the organization may hold at once (its pool share). */
  hotNodes: number;
  hot: number;
  share: number;
  /** The organization's own nodes of the pool that take work (not removed) and their slots. */
  nodes: number;
  slots: number;
  total: number;
}

/**
 * What a pool can run of an organization's environments at once, the same rule the claim follows:
 * its share of the built-in nodes plus the slots of its own nodes (as each said when it last
 * connected; a node that never did holds none yet).
 */
async function capacityOf(deps: Deps, orgId: string, share: number, pool: PoolSpec): Promise<Capacity> {
  const own = await deps.prisma.remoteNode.findMany({
    where: { orgId, pool: pool.name, revoked: null, draining: null },
    select: { slots: true },
  });
  const hot = hotNodesFor(share, pool.hotNodes);
  const slots = own.reduce((n, node) => n + node.slots, 0);
  return { pool: pool.name, hotNodes: pool.hotNodes, hot, share, nodes: own.length, slots, total: hot + slots };
}

/** The organization's capacity per pool, each asked for once (a list's quotas share them). */
function capacities(deps: Deps, orgId: string): (pool: PoolSpec) => Promise<Capacity> {
  const share = orgLimits(deps, deps.prisma, orgId).then((limits) => limits.poolShare);
  const pools = new Map<string, Promise<Capacity>>();
  return (pool) => {
    const known = pools.get(pool.name);
    if (known) return known;
    const capacity = share.then((s) => capacityOf(deps, orgId, s, pool));
    pools.set(pool.name, capacity);
    return capacity;
  };
}

function capacityText(c: Capacity): string {
  const hot =
    c.hotNodes === 0
      ? 'no built-in nodes'
      : c.hot === c.hotNodes
        ? `its ${plural(c.hotNodes, 'built-in node')}`
        : `${c.hot} of its ${c.hotNodes} built-in nodes at pool share ${c.share}`;
  const own =
    c.nodes === 0 ? 'no node of your organization' : `${plural(c.slots, 'slot')} on ${plural(c.nodes, 'node')} of your organization`;
  return `${hot}; ${own}`;
}

/**
 * Why a quota of `maxLeases` cannot be reached: leases past what the pools can run at once only
 * queue. The quota is kept as set (nodes may be added later); this is said, not refused.
 */
async function quotaWarnings(
  deps: Deps,
  orgId: string,
  template: string,
  maxLeases: number,
  capacity: (pool: PoolSpec) => Promise<Capacity>,
): Promise<string[]> {
  if (template === ALL_TEMPLATES) {
    const all = await Promise.all(deps.catalog.pools.map(capacity));
    const total = all.reduce((n, c) => n + c.total, 0);
    if (maxLeases <= total) return [];
    return [
      `your organization can run at most ${total} environments at once across all pools (${all.map((c) => `${c.pool} ${c.total}`).join(', ')}): leases past ${total} wait in the queues`,
    ];
  }
  const spec = await findTemplate(deps.prisma, orgId, template).catch(() => undefined);
  const pool = spec && deps.catalog.pools.find((p) => p.name === spec.pool);
  if (!pool) return [];
  const c = await capacity(pool);
  if (maxLeases <= c.total) return [];
  if (c.total === 0) {
    return [
      `pool ${c.pool} can run none of your organization's environments (${capacityText(c)}): leases of ${template} wait until an admin adds a node with POST /v1/nodes and runs berth node there`,
    ];
  }
  return [
    `pool ${c.pool} can run at most ${c.total} of your organization's environments at once (${capacityText(c)}): leases of ${template} past ${c.total} wait in its queue`,
  ];
}

/** PUT /v1/quotas/{template} (admins). Omitted durations default to the template's (24h for `*`). */
export async function setQuota(deps: Deps, actor: Actor, template: string, input: QuotaInput): Promise<QuotaView> {
  await checkAudited(deps, actor, { action: 'quota.set', target: { kind: 'quota', id: template } }, () =>
    requireAdmin(actor, 'only admins can set quotas'),
  );
  const spec = template === ALL_TEMPLATES ? undefined : await findTemplate(deps.prisma, actor.orgId, template);
  if (!Number.isInteger(input.maxLeases) || input.maxLeases < 0) {
    throw new ValidationError('maxLeases must be an integer >= 0', 'maxLeases');
  }
  const hardMs = input.hard ? parseDuration(input.hard, 'hard') : (spec?.hardMs ?? MAX_HARD_MS);
  const idleMs = input.idle ? parseDuration(input.idle, 'idle') : Math.min(spec?.idleMs ?? MAX_HARD_MS, hardMs);
  if (hardMs <= 0 || hardMs > MAX_HARD_MS) throw new ValidationError(`hard: "${input.hard}" must be more than 0 and at most 24h`, 'hard');
  if (idleMs <= 0 || idleMs > hardMs) throw new ValidationError('idle must be more than 0 and at most hard', 'idle');
  const quota = await deps.prisma.$transaction(async (tx) => {
    const row = await tx.quota.upsert({
      where: { orgId_template: { orgId: actor.orgId, template } },
      create: { orgId: actor.orgId, template, maxLeases: input.maxLeases, idleMs, hardMs },
      update: { maxLeases: input.maxLeases, idleMs, hardMs, updated: deps.clock.now() },
    });
    await recordAudit(deps, tx, actor, {
      action: 'quota.set',
      target: { kind: 'quota', id: template },
      detail: { maxLeases: row.maxLeases, idleMs, hardMs },
    });
    return row;
  });
  const warnings = await quotaWarnings(deps, actor.orgId, template, quota.maxLeases, capacities(deps, actor.orgId));
  return view(quota, await running(deps.prisma, actor.orgId, template), warnings);
}

export async function listQuotas(deps: Deps, actor: Actor): Promise<QuotaView[]> {
  requireMember(actor);
  const quotas = await deps.prisma.quota.findMany({ where: { orgId: actor.orgId }, orderBy: { template: 'asc' } });
  const counts = await deps.prisma.environment.groupBy({
    by: ['template'],
    where: { orgId: actor.orgId, state: { in: [...LIVE_STATES] } },
    _count: { _all: true },
  });
  const byTemplate = new Map(counts.map((c) => [c.template, c._count._all]));
  const total = counts.reduce((sum, c) => sum + c._count._all, 0);
  const capacity = capacities(deps, actor.orgId);
  return Promise.all(
    quotas.map(async (q) =>
      view(
        q,
        q.template === ALL_TEMPLATES ? total : (byTemplate.get(q.template) ?? 0),
        await quotaWarnings(deps, actor.orgId, q.template, q.maxLeases, capacity),
      ),
    ),
  );
}

/** The quotas that apply to a lease of this template: its own and `*`. */
export function quotasFor(prisma: Prisma | Tx, orgId: string, template: string): Promise<Quota[]> {
  return prisma.quota.findMany({ where: { orgId, template: { in: [template, ALL_TEMPLATES] } } });
}

/**
 * Inside the creating transaction: refuses a lease past any applicable `maxLeases`. Creates of
 * one organization take turns on an advisory lock, so racing creates are counted exactly.
 */
export async function admitUnderQuota(tx: Tx, orgId: string, template: string, quotas: Quota[]): Promise<void> {
  if (quotas.length === 0) return;
  await lockFor(tx, `berth:quota:${orgId}`);
  for (const quota of quotas) {
    const count = await running(tx, orgId, quota.template);
    if (count >= quota.maxLeases) {
      const scope = quota.template === ALL_TEMPLATES ? 'across all templates' : `for template ${template}`;
      throw new QuotaExceededError(`over quota: ${count} of ${quota.maxLeases} leases ${scope} are running`);
    }
  }
}
