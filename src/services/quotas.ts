import type { Actor, Deps } from '../context';
import { lockFor, type Prisma, type Tx } from '../db';
import type { Quota } from '../generated/prisma/client';
import { requireAdmin, requireMember } from './access';
import { formatDuration, parseDuration } from './durations';
import { LIVE_STATES } from './environment-events';
import { QuotaExceededError, ValidationError } from './errors';
import { findTemplate } from './templates';
import { MAX_HARD_MS } from './templates-file';

export const ALL_TEMPLATES = '*';

export interface QuotaView {
  template: string;
  maxLeases: number;
  running: number;
  idle: string;
  hard: string;
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

function view(quota: Quota, count: number): QuotaView {
  return {
    template: quota.template,
    maxLeases: quota.maxLeases,
    running: count,
    idle: formatDuration(quota.idleMs),
    hard: formatDuration(quota.hardMs),
  };
}

/** PUT /v1/quotas/{template} (admins). Omitted durations default to the template's (24h for `*`). */
export async function setQuota(deps: Deps, actor: Actor, template: string, input: QuotaInput): Promise<QuotaView> {
  requireAdmin(actor, 'only admins can set quotas');
  const spec = template === ALL_TEMPLATES ? undefined : await findTemplate(deps.prisma, actor.orgId, template);
  if (!Number.isInteger(input.maxLeases) || input.maxLeases < 0) {
    throw new ValidationError('maxLeases must be an integer >= 0', 'maxLeases');
  }
  const hardMs = input.hard ? parseDuration(input.hard, 'hard') : (spec?.hardMs ?? MAX_HARD_MS);
  const idleMs = input.idle ? parseDuration(input.idle, 'idle') : Math.min(spec?.idleMs ?? MAX_HARD_MS, hardMs);
  if (hardMs <= 0 || hardMs > MAX_HARD_MS) throw new ValidationError(`hard: "${input.hard}" must be more than 0 and at most 24h`, 'hard');
  if (idleMs <= 0 || idleMs > hardMs) throw new ValidationError('idle must be more than 0 and at most hard', 'idle');
  const quota = await deps.prisma.quota.upsert({
    where: { orgId_template: { orgId: actor.orgId, template } },
    create: { orgId: actor.orgId, template, maxLeases: input.maxLeases, idleMs, hardMs },
    update: { maxLeases: input.maxLeases, idleMs, hardMs, updated: deps.clock.now() },
  });
  return view(quota, await running(deps.prisma, actor.orgId, template));
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
  return quotas.map((q) => view(q, q.template === ALL_TEMPLATES ? total : (byTemplate.get(q.template) ?? 0)));
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
