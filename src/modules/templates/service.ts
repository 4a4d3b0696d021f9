import type { Actor, Deps } from '../../app/context';
import { requireAdmin, requireMember } from '../../kernel/access';
import { DomainError } from '../../kernel/errors';
import { WARM_JOB } from '../../kernel/job-names';
import { newId } from '../../kernel/names';
import { lockFor, type Prisma } from '../../platform/db';
import { MAX_POOL_IMAGES } from '../../protocol/dataplane';
import { sendToNode } from '../../protocol/node-bus';
import { checkAudited, recordAudit } from '../audit';
import { type Catalog, type PoolSpec, type TemplateSpec, templateFromJson, validateTemplateSpec } from './catalog';

/** Catalog templates are stored with this org id; an organization's own upserts override them. */
const CATALOG = '';

/**
 * Makes the database match the catalog file at start: catalog templates replaced. (The hot nodes
 * are the built-in node's slots, counted when it says hello: src/modules/nodes/service.ts.)
 */
export async function applyCatalog(prisma: Prisma, catalog: Catalog): Promise<void> {
  await prisma.$transaction(async (tx) => {
    // Instances starting together on one database take turns.
    await lockFor(tx, 'berth:catalog');
    await tx.template.deleteMany({ where: { orgId: CATALOG, name: { notIn: catalog.templates.map((t) => t.name) } } });
    for (const spec of catalog.templates) {
      await tx.template.upsert({
        where: { orgId_name: { orgId: CATALOG, name: spec.name } },
        create: { id: newId('tpl'), orgId: CATALOG, name: spec.name, pool: spec.pool, spec },
        update: { pool: spec.pool, spec },
      });
    }
  });
}

export function poolOf(deps: Deps, name: string): PoolSpec {
  const pool = deps.catalog.pools.find((p) => p.name === name);
  if (!pool) throw new Error(`pool ${name} is not in the catalog`);
  return pool;
}

/** How many template names a `no_template` error lists. */
const LISTED_TEMPLATES = 20;

/** The template an organization leases under this name: its own, else the catalog's. */
export async function findTemplate(prisma: Prisma, orgId: string, name: string): Promise<TemplateSpec> {
  const rows = await prisma.template.findMany({ where: { name, orgId: { in: [orgId, CATALOG] } } });
  const row = rows.find((r) => r.orgId === orgId) ?? rows[0];
  if (!row) {
    // The names it can lease instead: its own and the catalog's, never another organization's.
    const known = await prisma.template.findMany({
      where: { orgId: { in: [orgId, CATALOG] } },
      select: { name: true },
      distinct: ['name'],
      orderBy: { name: 'asc' },
      take: LISTED_TEMPLATES + 1,
    });
    const names = known.slice(0, LISTED_TEMPLATES).map((t) => t.name);
    const list = names.length
      ? `; templates: ${names.join(', ')}${known.length > LISTED_TEMPLATES ? ', …' : ''}`
      : '; there are no templates';
    throw new DomainError(`template ${JSON.stringify(name)} not found${list}`, 'no_template');
  }
  return templateFromJson(row.spec, row.name);
}

/**
 * The images of `pools`' templates, for their nodes to pull before any lease needs them: the
 * catalog's and `orgId`'s own (every organization's for the built-in pool: null). Distinct, those
 * changed last first, at most MAX_POOL_IMAGES. A catalog template the organization replaced may
 * still count: one image pulled for nothing is cheaper than a second query.
 */
export async function poolImages(prisma: Prisma, pools: string[], orgId: string | null): Promise<string[]> {
  const rows = await prisma.template.findMany({
    where: { pool: { in: pools }, ...(orgId === null ? {} : { orgId: { in: [orgId, CATALOG] } }) },
    orderBy: [{ updated: 'desc' }, { id: 'asc' }],
    select: { name: true, spec: true },
    take: 500,
  });
  const images = new Set<string>();
  for (const row of rows) {
    const { image } = templateFromJson(row.spec, row.name);
    if (image) images.add(image);
    if (images.size === MAX_POOL_IMAGES) break;
  }
  return [...images];
}

/** A template of `pool` now names `image`: the organization's nodes of that pool (and the built-in node, for a pool with hot nodes) pull it now. */
async function pullAhead(deps: Deps, orgId: string, pool: string, image: string): Promise<void> {
  const nodes = await deps.prisma.remoteNode.findMany({ where: { orgId, pool, revoked: null }, select: { id: true } });
  if (poolOf(deps, pool).hotNodes > 0) nodes.push({ id: deps.builtin.id });
  for (const node of nodes) await sendToNode(deps, node.id, { type: 'images', images: [image] });
}

/** GET /v1/templates: the organization's own templates and the catalog's it did not replace. */
export async function listTemplates(deps: Deps, actor: Actor): Promise<TemplateSpec[]> {
  requireMember(actor);
  const { orgId } = actor;
  const rows = await deps.prisma.template.findMany({ where: { orgId: { in: [orgId, CATALOG] } }, orderBy: { name: 'asc' } });
  const byName = new Map<string, TemplateSpec>();
  for (const row of rows) if (row.orgId === orgId || !byName.has(row.name)) byName.set(row.name, templateFromJson(row.spec, row.name));
  return [...byName.values()];
}

/** PUT /v1/templates/{name} (admins): the organization's own version of a template. */
export async function upsertTemplate(deps: Deps, actor: Actor, name: string, input: unknown): Promise<TemplateSpec> {
  await checkAudited(deps, actor, { action: 'template.set', target: { kind: 'template', id: name } }, () =>
    requireAdmin(actor, 'only admins can change templates'),
  );
  const spec = validateTemplateSpec(
    input,
    name,
    deps.catalog.pools.map((p) => p.name),
  );
  await deps.prisma.$transaction(async (tx) => {
    await tx.template.upsert({
      where: { orgId_name: { orgId: actor.orgId, name } },
      create: { id: newId('tpl'), orgId: actor.orgId, name, pool: spec.pool, spec },
      update: { pool: spec.pool, spec, updated: deps.clock.now() },
    });
    await recordAudit(deps, tx, actor, { action: 'template.set', target: { kind: 'template', id: name }, detail: { pool: spec.pool } });
  });
  if (spec.image) await pullAhead(deps, actor.orgId, spec.pool, spec.image);
  // Warm containers of the old spec go, of the new one come.
  deps.background.nudge(WARM_JOB);
  return spec;
}
