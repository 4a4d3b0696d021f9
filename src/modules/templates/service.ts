import { createHash } from 'node:crypto';
import type { Actor, Deps } from '../../app/context';
import { Prisma as P } from '../../generated/prisma/client';
import { requireAdmin, requireMember } from '../../kernel/access';
import { ConflictError, DomainError } from '../../kernel/errors';
import { TEMPLATE_CHANGED } from '../../kernel/event-names';
import { WARM_JOB } from '../../kernel/job-names';
import { newId } from '../../kernel/names';
import { lockFor, type Prisma } from '../../platform/db';
import { MAX_POOL_IMAGES } from '../../protocol/dataplane';
import { sendToNode } from '../../protocol/node-bus';
import { checkAudited, recordAudit } from '../audit';
import { emitWebhookEvent, nudgeWebhooks } from '../webhooks';
import { BUILT_IMAGE_PREFIX, buildLogText, planBuilds, sendBuilds, sendBuiltImages, type TemplateBuildSpec } from './builds';
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

/** A template as the API shows it: its spec, which version, whose, and whether its image is built. */
export type TemplateView = TemplateSpec & {
  version: number;
  /** `catalog`: the templates file's; `api`: the organization's own. */
  source: 'catalog' | 'api';
  /** `ready`, `building` (its image builds on its pool's nodes) or `failed` (`error` says why). */
  status: TemplateStatus;
  error?: string;
  warnings: string[];
  updated: Date;
};
export type TemplateStatus = 'ready' | 'building' | 'failed';

type TemplateRow = {
  orgId: string;
  name: string;
  spec: unknown;
  version: number;
  status: string;
  error: string | null;
  warnings: unknown;
  updated: Date;
};

export function templateView(row: TemplateRow): TemplateView {
  const view: TemplateView = {
    ...templateFromJson(row.spec, row.name),
    version: row.version,
    source: row.orgId === CATALOG ? 'catalog' : 'api',
    status: row.status === 'building' || row.status === 'failed' ? row.status : 'ready',
    warnings: Array.isArray(row.warnings) ? row.warnings.filter((w): w is string => typeof w === 'string') : [],
    updated: row.updated,
  };
  if (row.error) view.error = row.error;
  return view;
}

/** The template an organization leases under this name: its own, else the catalog's. */
export async function findTemplate(prisma: Prisma, orgId: string, name: string): Promise<TemplateView> {
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
  return templateView(row);
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
    // (A built image is built on each node, never pulled.)
    if (image && !image.startsWith(BUILT_IMAGE_PREFIX)) images.add(image);
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
export async function listTemplates(deps: Deps, actor: Actor): Promise<TemplateView[]> {
  requireMember(actor);
  const { orgId } = actor;
  const rows = await deps.prisma.template.findMany({ where: { orgId: { in: [orgId, CATALOG] } }, orderBy: { name: 'asc' } });
  const byName = new Map<string, TemplateView>();
  for (const row of rows) if (row.orgId === orgId || !byName.has(row.name)) byName.set(row.name, templateView(row));
  return [...byName.values()];
}

/** GET /v1/templates/{name}: the organization's own, else the catalog's; 404 no_template. */
export async function getTemplate(deps: Deps, actor: Actor, name: string): Promise<TemplateView> {
  requireMember(actor);
  return findTemplate(deps.prisma, actor.orgId, name);
}

/** Admins only, refused before a body is read (an upload of 100 MiB by a member is not read). */
export async function authorizeTemplateChange(
  deps: Deps,
  actor: Actor,
  name: string,
  action: 'template.set' | 'template.delete',
): Promise<void> {
  await checkAudited(deps, actor, { action, target: { kind: 'template', id: name } }, () =>
    requireAdmin(actor, 'only admins can change templates'),
  );
}

/** What a PUT stores: a template in the JSON format, what of its source was not honoured, and its image's build. */
export interface TemplateInput {
  template: unknown;
  warnings?: string[];
  /** How it came: a JSON template or a devcontainer.json. */
  kind: 'json' | 'devcontainer';
  build?: BuildInput;
}

/** A devcontainer template's image build: its context as a tar rooted at the context folder. */
export interface BuildInput {
  context: Buffer;
  dockerfile: string;
  args: Record<string, string>;
  target?: string;
  /** Its Dockerfile has RUN steps (dockerfile.ts). */
  runs: boolean;
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** What a GET shows of a template beyond its format: a template read, changed and put back is taken, these ignored. */
const SHOWN = ['version', 'source', 'status', 'error', 'warnings'];

function withoutShown(template: unknown): unknown {
  if (!isObject(template)) return template;
  return Object.fromEntries(Object.entries(template).filter(([key]) => !SHOWN.includes(key)));
}

/** The tag of an image built from `build` for `orgId`: a hash of everything the build reads. */
function builtImage(orgId: string, build: BuildInput): string {
  const hash = createHash('sha256');
  hash.update(JSON.stringify([orgId, build.dockerfile, Object.entries(build.args).sort(), build.target ?? null]));
  hash.update(build.context);
  return `${BUILT_IMAGE_PREFIX}${hash.digest('hex').slice(0, 32)}:latest`;
}

/**
 * PUT /v1/templates/{name} (admins): the organization's own version of a template; `created` when
 * it had none of that name. Its version grows by one on every change; with a build, it is
 * `building` until its pool's nodes built the image.
 */
export async function putTemplate(
  deps: Deps,
  actor: Actor,
  name: string,
  input: TemplateInput,
): Promise<{ template: TemplateView; created: boolean }> {
  await authorizeTemplateChange(deps, actor, name, 'template.set');
  const pools = deps.catalog.pools.map((p) => p.name);
  const image = input.build ? builtImage(actor.orgId, input.build) : undefined;
  const given = input.build && isObject(input.template) ? { ...input.template, image } : withoutShown(input.template);
  const spec = validateTemplateSpec(given, name, pools);
  const warnings = input.warnings ?? [];
  const contextKey = input.build ? `templates/${actor.orgId}/${createHash('sha256').update(input.build.context).digest('hex')}.tar` : null;
  if (input.build && contextKey) await deps.store.put(contextKey, input.build.context, input.build.context.length);
  const build: TemplateBuildSpec | null =
    input.build && contextKey && image
      ? {
          context: contextKey,
          dockerfile: input.build.dockerfile,
          args: input.build.args,
          ...(input.build.target ? { target: input.build.target } : {}),
          runs: input.build.runs,
          image,
        }
      : null;
  let hooked = false;
  let replaced: TemplateBuildSpec | null = null;
  let replacedPool: string | null = null;
  const stored = deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, `berth:template:${actor.orgId}:${name}`);
    const existing = await tx.template.findUnique({ where: { orgId_name: { orgId: actor.orgId, name } } });
    replaced = (existing?.build as unknown as TemplateBuildSpec | null) ?? null;
    replacedPool = existing?.pool ?? null;
    const now = deps.clock.now();
    const data = {
      pool: spec.pool,
      spec,
      status: build ? 'building' : 'ready',
      error: null,
      warnings,
      build: build ? { ...build } : P.DbNull,
      updated: now,
    };
    const row = existing
      ? await tx.template.update({ where: { id: existing.id }, data: { ...data, version: existing.version + 1 } })
      : await tx.template.create({ data: { id: newId('tpl'), orgId: actor.orgId, name, created: now, ...data } });
    if (build) await planBuilds(deps, tx, row);
    else await tx.templateBuild.deleteMany({ where: { templateId: row.id } });
    await recordAudit(deps, tx, actor, {
      action: 'template.set',
      target: { kind: 'template', id: name },
      detail: { pool: spec.pool, version: row.version, kind: input.kind },
    });
    hooked = await emitWebhookEvent(
      tx,
      actor.orgId,
      TEMPLATE_CHANGED,
      { name, version: row.version, status: row.status, change: existing ? 'changed' : 'created' },
      now,
    );
    return { row, created: !existing };
  });
  // A context no version builds from any more is removed: the one this PUT stored when it failed,
  // the one it replaced when it did not.
  const { row, created } = await stored.catch(async (error: unknown) => {
    if (contextKey) await dropContext(deps, actor.orgId, contextKey);
    throw error;
  });
  const previous = replaced as TemplateBuildSpec | null;
  if (previous && previous.context !== contextKey) await dropContext(deps, actor.orgId, previous.context);
  nudgeWebhooks(deps, hooked);
  if (build) await sendBuilds(deps, row.id);
  else if (spec.image) await pullAhead(deps, actor.orgId, spec.pool, spec.image);
  // The image the old version built, when no version uses it now, goes from the nodes that hold it.
  if (previous && previous.image !== build?.image) await sendBuiltImages(deps, actor.orgId, replacedPool ?? spec.pool);
  // Warm containers of the old spec go, of the new one come.
  deps.background.nudge(WARM_JOB);
  return { template: templateView(row), created };
}

/** Removes a stored build context, unless a template of the organization still builds from the same bytes. */
async function dropContext(deps: Deps, orgId: string, key: string): Promise<void> {
  const still = await deps.prisma.template.count({ where: { orgId, build: { path: ['context'], equals: key } } });
  if (still === 0) await deps.store.delete(key).catch((err) => deps.log('could not delete a template build context', err));
}

/**
 * DELETE /v1/templates/{name} (admins): removes the organization's own; a catalog template of that
 * name shows again. 409 when it has none of its own (only the catalog's), 404 when neither.
 * Live environments go on.
 */
export async function deleteTemplate(deps: Deps, actor: Actor, name: string): Promise<void> {
  await authorizeTemplateChange(deps, actor, name, 'template.delete');
  let hooked = false;
  const removed = await deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, `berth:template:${actor.orgId}:${name}`);
    const own = await tx.template.findUnique({ where: { orgId_name: { orgId: actor.orgId, name } } });
    if (!own) {
      const catalog = await tx.template.findUnique({ where: { orgId_name: { orgId: CATALOG, name } } });
      if (catalog)
        throw new ConflictError(`template ${JSON.stringify(name)} is the catalog's; the organization has no version of its own to delete`);
      await findTemplate(tx as unknown as Prisma, actor.orgId, name);
      return null;
    }
    await tx.template.delete({ where: { id: own.id } });
    const now = deps.clock.now();
    await recordAudit(deps, tx, actor, {
      action: 'template.delete',
      target: { kind: 'template', id: name },
      detail: { version: own.version },
    });
    hooked = await emitWebhookEvent(tx, actor.orgId, TEMPLATE_CHANGED, { name, version: own.version, change: 'deleted' }, now);
    return own;
  });
  nudgeWebhooks(deps, hooked);
  const build = removed?.build as unknown as TemplateBuildSpec | null;
  if (build && removed) {
    await dropContext(deps, actor.orgId, build.context);
    await sendBuiltImages(deps, actor.orgId, removed.pool);
  }
  deps.background.nudge(WARM_JOB);
}

/** GET /v1/templates/{name}/log: the build log of its current version ('' for a template with nothing to build). */
export async function templateLog(deps: Deps, actor: Actor, name: string): Promise<string> {
  requireMember(actor);
  const row = await deps.prisma.template.findUnique({ where: { orgId_name: { orgId: actor.orgId, name } } });
  if (!row) {
    await findTemplate(deps.prisma, actor.orgId, name);
    return '';
  }
  return buildLogText(deps, row.id, row.version);
}
