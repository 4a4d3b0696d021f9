// Image builds of devcontainer templates (docs/environments.md, "Templates through the API"): a
// template whose devcontainer.json has `build` is `building` until each online node of its pool
// built its image through the engine's build API, then `ready`, or `failed` when a build failed.
// One TemplateBuild row per (template version, node) holds the node's state and log, so a
// restart of any process loses nothing: a node saying hello is sent again what it has not
// finished, and builds the current version of its pool's templates it has never built.
//
// The node fetches the build context (stored in the blob store when the template was put) and
// reports the outcome over HTTP (src/edges/rest/routes/templates.ts); the image's tag is a hash of
// everything the build reads, so a node holding it already answers at once.
import type { Readable } from 'node:stream';
import type { Actor, Deps } from '../../app/context';
import { requireNodeAgent } from '../../kernel/access';
import { ConflictError, NotFoundError } from '../../kernel/errors';
import { TEMPLATE_CHANGED } from '../../kernel/event-names';
import { CLAIM_JOB, WARM_JOB } from '../../kernel/job-names';
import { newId } from '../../kernel/names';
import { lockFor, type Tx } from '../../platform/db';
import { sendToNode } from '../../protocol/node-bus';
import { emitWebhookEvent, nudgeWebhooks } from '../webhooks';

/** What a devcontainer template's image is built from (Template.build). */
export interface TemplateBuildSpec {
  /** The build context's tar in the blob store. */
  context: string;
  /** The Dockerfile's path inside the context. */
  dockerfile: string;
  args: Record<string, string>;
  target?: string;
  /** Its Dockerfile has RUN steps: only a node whose engine isolates build steps from its network builds it. */
  runs?: boolean;
  /** The tag the image gets: BUILT_IMAGE_PREFIX and a hash of what it is built from. */
  image: string;
}

/** Built images' tags start so; nodes never try to pull them (there is no registry to pull them from). */
export const BUILT_IMAGE_PREFIX = 'localhost/berth-build/';
/** The most of one build's output kept (its end). */
export const MAX_BUILD_LOG = 256 * 1024;

/** Of `images`, those built by a node (`<node id>\n<image>`): a lease of one goes only to such a node. */
export async function builtOn(tx: Tx, images: (string | null)[]): Promise<Set<string>> {
  const wanted = [...new Set(images.filter((i): i is string => i?.startsWith(BUILT_IMAGE_PREFIX) === true))];
  if (wanted.length === 0) return new Set();
  const rows = await tx.$queryRaw<{ nodeId: string; image: string }[]>`
    SELECT DISTINCT b."nodeId", t.build->>'image' AS image
      FROM "TemplateBuild" b JOIN "Template" t ON t.id = b."templateId"
     WHERE b.state = 'ready' AND t.build->>'image' = ANY(${wanted}::text[])`;
  return new Set(rows.map((r) => `${r.nodeId}\n${r.image}`));
}

/** The builtin node builds for pools with hot nodes; other nodes for their organization's own templates of their pool. */
async function buildersOf(deps: Deps, tx: Tx, orgId: string, pool: string): Promise<string[]> {
  const hot = deps.catalog.pools.find((p) => p.name === pool)?.hotNodes ?? 0;
  const nodes = await tx.remoteNode.findMany({
    where: {
      state: 'online',
      revoked: null,
      engine: { not: null },
      OR: [{ orgId, pool, builtin: false }, ...(hot > 0 ? [{ builtin: true }] : [])],
    },
    select: { id: true },
  });
  return nodes.map((n) => n.id);
}

/** The build rows of a template version just stored, in the transaction that stores it. */
export async function planBuilds(
  deps: Deps,
  tx: Tx,
  template: { id: string; orgId: string; pool: string; version: number },
): Promise<string[]> {
  await tx.templateBuild.deleteMany({ where: { templateId: template.id, version: { lt: template.version } } });
  const nodes = await buildersOf(deps, tx, template.orgId, template.pool);
  await tx.templateBuild.createMany({
    data: nodes.map((nodeId) => ({ id: newId('bld'), templateId: template.id, version: template.version, nodeId, state: 'building' })),
  });
  return nodes;
}

/** Sends each of `nodes` its build of the template's current version (after the commit that planned them). */
export async function sendBuilds(deps: Deps, templateId: string): Promise<void> {
  const builds = await deps.prisma.templateBuild.findMany({
    where: { templateId, state: 'building' },
    include: { template: true },
  });
  for (const build of builds) {
    if (build.version !== build.template.version || !build.template.build) continue;
    await sendBuild(deps, build.id, build.nodeId, build.template.build as unknown as TemplateBuildSpec, build.template.spec);
  }
}

async function sendBuild(deps: Deps, buildId: string, nodeId: string, spec: TemplateBuildSpec, templateSpec: unknown): Promise<void> {
  const memory = (templateSpec as { resources?: { memory?: string } })?.resources?.memory;
  await sendToNode(deps, nodeId, {
    type: 'build',
    build: {
      id: buildId,
      image: spec.image,
      dockerfile: spec.dockerfile,
      args: spec.args,
      runs: spec.runs !== false,
      ...(spec.target ? { target: spec.target } : {}),
      ...(memory ? { memory } : {}),
    },
  });
}

/** The built images a node's pools use now: its organization's templates of its pool (every organization's of the hot pools for the built-in node). */
async function builtImagesOf(deps: Deps, node: { builtin: boolean; pool: string; orgId: string }): Promise<string[]> {
  const hotPools = deps.catalog.pools.filter((p) => p.hotNodes > 0).map((p) => p.name);
  const rows = await deps.prisma.template.findMany({
    where: node.builtin ? { pool: { in: hotPools }, orgId: { not: '' } } : { pool: node.pool, orgId: node.orgId },
    select: { build: true },
  });
  return [...new Set(rows.map((r) => (r.build as unknown as TemplateBuildSpec | null)?.image).filter((i): i is string => Boolean(i)))];
}

/** Tells the nodes that may hold a template of `orgId` in `pool` which built images to keep (after a change or a delete). */
export async function sendBuiltImages(deps: Deps, orgId: string, pool: string): Promise<void> {
  const hot = (deps.catalog.pools.find((p) => p.name === pool)?.hotNodes ?? 0) > 0;
  const nodes = await deps.prisma.remoteNode.findMany({
    where: { revoked: null, state: 'online', OR: [{ orgId, pool, builtin: false }, ...(hot ? [{ builtin: true }] : [])] },
    select: { id: true, builtin: true, pool: true, orgId: true },
  });
  for (const node of nodes) await sendToNode(deps, node.id, { type: 'built', images: await builtImagesOf(deps, node) });
}

/**
 * A node said hello: it is sent again the builds it has not finished (its process may have
 * restarted), and given builds of its pool's templates' current versions it never made.
 */
export async function resumeNodeBuilds(deps: Deps, actor: Actor): Promise<void> {
  const nodeId = requireNodeAgent(actor);
  const node = await deps.prisma.remoteNode.findUnique({ where: { id: nodeId } });
  if (!node || node.revoked || !node.engine) return;
  const hotPools = deps.catalog.pools.filter((p) => p.hotNodes > 0).map((p) => p.name);
  const templates = await deps.prisma.template.findMany({
    where: {
      status: { not: 'failed' },
      ...(node.builtin ? { pool: { in: hotPools }, orgId: { not: '' } } : { pool: node.pool, orgId: node.orgId }),
    },
    select: { id: true, version: true, build: true },
    orderBy: { updated: 'desc' },
    take: 1000,
  });
  for (const template of templates.filter((t) => t.build !== null)) {
    await deps.prisma.templateBuild.createMany({
      data: [{ id: newId('bld'), templateId: template.id, version: template.version, nodeId, state: 'building' }],
      skipDuplicates: true,
    });
  }
  await sendToNode(deps, nodeId, { type: 'built', images: await builtImagesOf(deps, node) });
  const open = await deps.prisma.templateBuild.findMany({ where: { nodeId, state: 'building' }, include: { template: true } });
  for (const build of open) {
    if (build.version !== build.template.version || !build.template.build) continue;
    await sendBuild(deps, build.id, nodeId, build.template.build as unknown as TemplateBuildSpec, build.template.spec);
  }
}

/** The build the calling node was sent, still under way; others are 404 to it. */
async function nodeBuild(deps: Deps, actor: Actor, buildId: string) {
  const nodeId = requireNodeAgent(actor);
  const build = await deps.prisma.templateBuild.findUnique({ where: { id: buildId }, include: { template: true } });
  if (!build || build.nodeId !== nodeId) throw new NotFoundError(`build ${buildId} not found`);
  return build;
}

/** GET /v1/template-builds/{id}/context: the build context's tar, for the node building it. */
export async function nodeBuildContext(deps: Deps, actor: Actor, buildId: string): Promise<Readable> {
  const build = await nodeBuild(deps, actor, buildId);
  const spec = build.template.build as unknown as TemplateBuildSpec | null;
  if (build.state !== 'building' || build.version !== build.template.version || !spec) {
    throw new ConflictError(`build ${buildId} is no longer under way`);
  }
  return deps.store.get(spec.context);
}

/**
 * POST /v1/template-builds/{id}: the node's outcome. The template is `ready` once every build of
 * its version is, `failed` at the first that failed (its error names the node); leases waiting
 * for it are then claimed, or fail.
 */
export async function nodeBuildDone(deps: Deps, actor: Actor, buildId: string, outcome: { error?: string; log: string }): Promise<void> {
  const found = await nodeBuild(deps, actor, buildId);
  const log = outcome.log.length > MAX_BUILD_LOG ? `…\n${outcome.log.slice(-MAX_BUILD_LOG)}` : outcome.log;
  let changed: { status: string; version: number; name: string; orgId: string } | null = null;
  let failedLeases: string[] = [];
  let hooked = false;
  await deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, `berth:template:${found.templateId}`);
    const build = await tx.templateBuild.findUnique({ where: { id: buildId }, include: { template: true } });
    if (build?.state !== 'building') return;
    const now = deps.clock.now();
    await tx.templateBuild.update({
      where: { id: buildId },
      data: { state: outcome.error ? 'failed' : 'ready', error: outcome.error ?? null, log, finished: now },
    });
    const template = build.template;
    if (build.version !== template.version || template.status !== 'building') return;
    const node = await tx.remoteNode.findUnique({ where: { id: build.nodeId }, select: { name: true, builtin: true } });
    const where = node?.builtin ? 'the built-in node' : `node ${node?.name ?? build.nodeId}`;
    let status: 'ready' | 'failed' | null = null;
    let error: string | null = null;
    if (outcome.error) {
      status = 'failed';
      error = `the image did not build on ${where}: ${outcome.error}`;
    } else if (
      (await tx.templateBuild.count({ where: { templateId: template.id, version: template.version, state: { not: 'ready' } } })) === 0
    ) {
      status = 'ready';
    }
    if (!status) return;
    await tx.template.update({ where: { id: template.id }, data: { status, error } });
    if (status === 'failed') failedLeases = await pendingLeasesOf(tx, template.orgId, template.name);
    hooked = await emitWebhookEvent(
      tx,
      template.orgId,
      TEMPLATE_CHANGED,
      { name: template.name, version: template.version, status, ...(error ? { error } : {}), change: 'built' },
      now,
    );
    changed = { status, version: template.version, name: template.name, orgId: template.orgId };
  });
  nudgeWebhooks(deps, hooked);
  if (!changed) return;
  const { status, name, version } = changed as { status: string; name: string; version: number };
  for (const id of failedLeases) await deps.ends.stop(id, ['pending'], `template ${name} version ${version} failed to build`);
  deps.background.nudge(CLAIM_JOB);
  if (status === 'ready') deps.background.nudge(WARM_JOB);
}

async function pendingLeasesOf(tx: Tx, orgId: string, template: string): Promise<string[]> {
  const rows = await tx.environment.findMany({ where: { orgId, template, state: 'pending' }, select: { id: true } });
  return rows.map((r) => r.id);
}

/** GET /v1/templates/{name}/log: each node's build of the current version, under a header naming the node. */
export async function buildLogText(deps: Deps, templateId: string, version: number): Promise<string> {
  const builds = await deps.prisma.templateBuild.findMany({ where: { templateId, version }, orderBy: { started: 'asc' } });
  if (!builds.length) return '';
  const names = new Map(
    (
      await deps.prisma.remoteNode.findMany({
        where: { id: { in: builds.map((b) => b.nodeId) } },
        select: { id: true, name: true, builtin: true },
      })
    ).map((n) => [n.id, n.builtin ? 'the built-in node' : `node ${n.name}`]),
  );
  return builds
    .map((b) => {
      const head = `==> ${names.get(b.nodeId) ?? b.nodeId}: ${b.state}${b.error ? ` (${b.error})` : ''} (${b.started.toISOString()})`;
      return `${head}\n${b.log}${b.log && !b.log.endsWith('\n') ? '\n' : ''}`;
    })
    .join('');
}
