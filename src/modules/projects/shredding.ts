// Shredding a project (DELETE /v1/project-keys/{project}; docs/snapshots.md).
//
// One transaction, in this order: a Shred row (the resume marker), every wrapped key of the
// project emptied (a tombstone row per version stays, so the next key takes a higher version and
// no version is ever reused), the snapshot rows deleted, the artifacts marked `deleting` (gone from
// every read at once). Once it commits nothing sealed under those versions can be opened: the data
// keys existed only wrapped in those rows. Then, outside it, finishShred deletes the objects:
// every object under `snapshots/<org>/<project>/v<n>/` of each destroyed version n, and the
// artifacts through the artifact sweeper. A crash in between leaves the Shred row unfinished; the
// shred job finishes it (at the next tick after a restart).
import type { Actor, Deps } from '../../app/context';
import { requireAdmin } from '../../kernel/access';
import type { BackgroundJob } from '../../kernel/background';
import { MINUTE_MS } from '../../kernel/durations';
import { LIVE_STATES } from '../../kernel/environment-states';
import { NotFoundError } from '../../kernel/errors';
import { SHRED_JOB } from '../../kernel/job-names';
import { validateProjectName } from '../../kernel/labels';
import { lockProject } from '../../kernel/project-keys';
import { MANIFEST_NAME } from '../../platform/store/pack';
import { sweepArtifacts } from '../artifacts';
import { checkAudited, recordAudit } from '../audit';
import { notifySandboxConfig } from '../sandboxes';
import { purgeSnapshot, snapshotVersionPrefix } from '../snapshots';
import { emitWebhookEvent, nudgeWebhooks } from '../webhooks';

export interface ShredResult {
  project: string;
  shredded: true;
  at: Date;
}

/**
 * Shreds the project's keys, snapshots and artifacts. A project with nothing left to shred
 * answers its latest shred again (same `at`), so repeating a DELETE is harmless; a project that
 * never had a key, snapshot or artifact is 404 not_found.
 */
export async function shredProject(deps: Deps, actor: Actor, projectName: string): Promise<ShredResult> {
  await checkAudited(deps, actor, { action: 'project.shred', target: { kind: 'project', id: projectName.slice(0, 200) } }, () =>
    requireAdmin(actor, 'shredding a project needs an admin'),
  );
  const project = validateProjectName(projectName);
  const orgId = actor.orgId;
  const outcome = await deps.prisma.$transaction(async (tx) => {
    await lockProject(tx, orgId, project);
    const keys = await tx.projectKey.findMany({ where: { orgId, project }, select: { version: true, wrapped: true } });
    const live = keys.filter((k) => k.wrapped.length > 0);
    const snapshots = await tx.snapshot.count({ where: { orgId, project } });
    const artifacts = await tx.artifact.count({ where: { orgId, project, status: { not: 'deleting' } } });
    if (live.length === 0 && snapshots === 0 && artifacts === 0) {
      const last = await tx.shred.findFirst({ where: { orgId, project }, orderBy: { at: 'desc' } });
      if (!last) return null;
      return { at: last.at, fresh: false };
    }
    const at = deps.clock.now();
    await tx.shred.create({ data: { orgId, project, at } });
    await tx.projectKey.updateMany({ where: { orgId, project }, data: { wrapped: new Uint8Array(0) } });
    await tx.snapshot.deleteMany({ where: { orgId, project } });
    await tx.artifact.updateMany({ where: { orgId, project }, data: { status: 'deleting', expires: at } });
    const hooked = await emitWebhookEvent(tx, orgId, 'project.shredded', { project, at: at.toISOString() }, at);
    await recordAudit(deps, tx, actor, {
      action: 'project.shred',
      target: { kind: 'project', id: project },
      detail: { snapshots, artifacts },
    });
    return { at, fresh: true, hooked };
  });
  if (!outcome) throw new NotFoundError(`project ${project}`);
  if (outcome.fresh) {
    nudgeWebhooks(deps, outcome.hooked === true);
    // Keyrings of sandboxes running this project's environments just lost a key.
    const wired = await deps.prisma.environment.findMany({
      where: { orgId, project, state: { in: [...LIVE_STATES] }, sandboxId: { not: null } },
      distinct: ['sandboxId'],
      select: { sandboxId: true },
    });
    for (const { sandboxId } of wired) await notifySandboxConfig(deps, orgId, sandboxId);
    try {
      await finishShred(deps, orgId, project, outcome.at);
    } catch {
      // The records are gone and nothing opens any more; the job deletes the objects later.
      deps.background.nudge(SHRED_JOB, 10_000);
    }
  }
  return { project, shredded: true, at: outcome.at };
}

/** Deletes what is left of a shred (objects, rows of an interrupted one) and marks it finished. Idempotent. */
export async function finishShred(deps: Deps, orgId: string, project: string, at: Date): Promise<void> {
  const gone = await deps.prisma.projectKey.findMany({
    where: { orgId, project, wrapped: { equals: new Uint8Array(0) } },
    select: { version: true },
  });
  const versions = gone.map((k) => k.version);
  // Rows an interrupted shred left (its transaction deletes them otherwise).
  for (const row of await deps.prisma.snapshot.findMany({ where: { orgId, project, keyVersion: { in: versions } } })) {
    await purgeSnapshot(deps, row);
  }
  for (const version of versions) {
    const names: string[] = [];
    for await (const { name } of deps.store.list(`${snapshotVersionPrefix(orgId, project, version)}/`)) names.push(name);
    const manifests = names.filter((n) => n.endsWith(`/${MANIFEST_NAME}`));
    for (const name of [...manifests, ...names.filter((n) => !manifests.includes(n))]) await deps.store.delete(name);
  }
  await deps.prisma.artifact.updateMany({
    where: { orgId, project, keyVersion: { in: versions }, status: { not: 'deleting' } },
    data: { status: 'deleting', expires: at },
  });
  await sweepArtifacts(deps);
  await deps.prisma.shred.updateMany({ where: { orgId, project, at }, data: { finished: deps.clock.now() } });
}

/** Finishes shreds a crash interrupted. */
export const shredJob: BackgroundJob = {
  name: SHRED_JOB,
  intervalMs: MINUTE_MS,
  async run(deps) {
    const open = await deps.prisma.shred.findMany({ where: { finished: null }, orderBy: { at: 'asc' } });
    for (const shred of open) await finishShred(deps, shred.orgId, shred.project, shred.at);
  },
};
