// Snapshots: an environment's synced files, saved per share when it ends and restored into a new
// one before it is ready (docs/snapshots.md).
//
// - One Snapshot row per share of one save. The rows of one save share a `root` id (`snr_…`), so
//   a restore unpacks every share of the save it picked and `restored.root` says which save.
// - A share is one packed item (src/platform/store/pack.ts) of the archive stream of src/protocol/snapshot-archive.ts,
//   sealed under the project's current key, under `snapshots/<org>/<project>/v<keyVersion>/<id>/`.
//   The key version in the prefix lets a shred find every object sealed under the versions it
//   destroyed, rows or not.
// - These functions take and give plain streams: every node (the built-in one too) reaches them
//   over the node HTTP calls (docs/snapshots.md, src/modules/nodes/service.ts).
import { pipeline, type Readable } from 'node:stream';
import type { Actor, Deps } from '../../app/context';
import type { Environment, Prisma, Snapshot } from '../../generated/prisma/client';
import { requireMember } from '../../kernel/access';
import type { Segment } from '../../kernel/json-columns';
import { validateProjectName, validateSnapshotKey } from '../../kernel/labels';
import { newId } from '../../kernel/names';
import { type PageArgs, pageOf, pageQuery } from '../../kernel/paging';
import { currentKey, DEFAULT_PROJECT, keyByVersion, lockProject, ProjectKeyGoneError } from '../../kernel/project-keys';
import type { Tx } from '../../platform/db';
import { deletePacked, packStream, TooLargeError, unpackStream } from '../../platform/store/pack';
import { ArchiveCounter } from '../../protocol/snapshot-archive';
import { admitStorage, StorageQuotaError, storageRoom } from '../organizations';
import { emitWebhookEvent, nudgeWebhooks, snapshotData } from '../webhooks';

export function snapshotVersionPrefix(orgId: string, project: string, keyVersion: number): string {
  return `snapshots/${orgId}/${project}/v${keyVersion}`;
}

function snapshotPrefix(s: Pick<Snapshot, 'orgId' | 'project' | 'keyVersion' | 'id'>): string {
  return `${snapshotVersionPrefix(s.orgId, s.project, s.keyVersion)}/${s.id}`;
}

// ---------------------------------------------------------------------------------------------
// Saving (a node's release)

/** Shares of this lease already saved: a retried release skips them. */
export async function savedShares(deps: Deps, env: Pick<Environment, 'id' | 'orgId'>): Promise<string[]> {
  const rows = await deps.prisma.snapshot.findMany({ where: { orgId: env.orgId, lease: env.id }, select: { share: true } });
  return rows.map((r) => r.share);
}

/**
 * Whether the environment's project was shredded since the environment began. Such an
 * environment may hold files restored from snapshots sealed under the destroyed key, so it must
 * save nothing: the shred wins.
 */
function shreddedSince(db: Pick<Tx, 'shred'>, env: Pick<Environment, 'orgId' | 'project' | 'created'>): Promise<boolean> {
  return db.shred.count({ where: { orgId: env.orgId, project: env.project, at: { gte: env.created } } }).then((n) => n > 0);
}

/**
 * Saves one share of an ending environment under its `snapshot` key from the archive stream
 * `source` (src/protocol/snapshot-archive.ts), counting its files and bytes as it passes. Idempotent per
 * (lease, share): a share already saved is kept and `source` is discarded. Saves nothing (null)
 * when the project was shredded since the environment began, decided in the database under the
 * lock the shred takes, so a shred on another instance cannot slip in between.
 */
export async function saveSnapshotShare(deps: Deps, env: Environment, share: string, source: Readable): Promise<Snapshot | null> {
  if (!env.snapshot || (await shreddedSince(deps.prisma, env))) {
    source.destroy();
    return null;
  }
  const snapshotKey = env.snapshot;
  const earlier = await deps.prisma.snapshot.findMany({ where: { orgId: env.orgId, lease: env.id } });
  const done = earlier.find((s) => s.share === share);
  if (done) {
    source.destroy();
    return done;
  }
  const what = `the snapshot of share ${share}`;
  const { room, limit } = await storageRoom(deps, env.orgId);
  if (room === 0) {
    source.destroy();
    throw new StorageQuotaError(what, limit);
  }
  const { version, key } = await currentKey(deps, env.orgId, env.project);
  const base = { id: newId('snap'), orgId: env.orgId, project: env.project, keyVersion: version };
  const prefix = snapshotPrefix(base);
  const counter = new ArchiveCounter();
  // pipeline destroys both sides when either fails (packStream destroys the counter on its errors).
  pipeline(source, counter, () => undefined);
  let packed: Awaited<ReturnType<typeof packStream>>;
  try {
    packed = await packStream({ store: deps.store, prefix, objectId: base.id, key, keyVersion: version, source: counter, maxBytes: room });
  } catch (err) {
    if (err instanceof TooLargeError) throw new StorageQuotaError(what, limit);
    throw err;
  }
  const stats = counter.stats;
  const segments: Segment[] = packed.segments.map(({ name, size, objects }) => ({ name, size, objects }));
  let hooked = false;
  try {
    const saved = await deps.prisma.$transaction(async (tx) => {
      await lockProject(tx, env.orgId, env.project);
      if (await shreddedSince(tx, env)) return null;
      await admitStorage(deps, tx, env.orgId, packed.sealedBytes, what);
      const created = await tx.snapshot.create({
        data: {
          ...base,
          key: snapshotKey,
          share,
          root: earlier[0]?.root ?? newId('snr'),
          segments,
          files: stats.files,
          bytes: BigInt(stats.bytes),
          objects: packed.chunks,
          sealedBytes: BigInt(packed.sealedBytes),
          lease: env.id,
          createdBy: env.createdBy,
          // Every share of one save carries the save's time, so `restored.created` is unambiguous.
          created: earlier[0]?.created ?? deps.clock.now(),
        },
      });
      hooked = await emitWebhookEvent(tx, env.orgId, 'snapshot.created', snapshotData(created), deps.clock.now());
      return created;
    });
    if (!saved) await deletePacked(deps.store, prefix);
    nudgeWebhooks(deps, hooked);
    return saved;
  } catch (err) {
    await deletePacked(deps.store, prefix).catch(() => undefined);
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Restoring (a node's prepare)

export interface RestorePlan {
  key: string;
  root: string;
  created: Date;
  /** One per share of the save, each opened with openSnapshotShare. */
  shares: Snapshot[];
}

/**
 * What `env` starts from: for each key of `restore` in order, the newest snapshot with exactly
 * that key, else the newest whose key starts with it; the first hit wins (with every share of
 * its save). Null when nothing matches. Saves whose key version is gone never match.
 */
export async function planRestore(deps: Deps, env: Environment): Promise<RestorePlan | null> {
  const scope = { orgId: env.orgId, project: env.project };
  const usable = async (where: Prisma.SnapshotWhereInput) => {
    const rows = await deps.prisma.snapshot.findMany({
      where: { ...scope, ...where },
      orderBy: [{ created: 'desc' }, { id: 'desc' }],
      take: 20,
    });
    for (const row of rows) {
      if (await keyAlive(deps, row)) return row;
    }
    return null;
  };
  for (const key of env.restore) {
    const hit = (await usable({ key })) ?? (await usable({ key: { startsWith: key } }));
    if (!hit) continue;
    const shares = await deps.prisma.snapshot.findMany({ where: { ...scope, root: hit.root }, orderBy: { share: 'asc' } });
    return { key: hit.key, root: hit.root, created: hit.created, shares };
  }
  return null;
}

async function keyAlive(deps: Deps, row: Snapshot): Promise<boolean> {
  try {
    await keyByVersion(deps, row.orgId, row.project, row.keyVersion);
    return true;
  } catch (err) {
    if (err instanceof ProjectKeyGoneError) return false;
    throw err;
  }
}

/** The archive stream of one saved share (authenticated chunk by chunk). */
export async function openSnapshotShare(deps: Deps, snapshot: Snapshot): Promise<Readable> {
  const key = await keyByVersion(deps, snapshot.orgId, snapshot.project, snapshot.keyVersion);
  const opened = await unpackStream({ store: deps.store, manifest: `${snapshotPrefix(snapshot)}/manifest`, objectId: snapshot.id, key });
  return opened.stream;
}

/** Records on the environment what it was restored from (shown as `restored`). */
export async function recordRestored(deps: Deps, envId: string, plan: RestorePlan, files: number): Promise<void> {
  const restored = { key: plan.key, root: plan.root, files, created: plan.created.toISOString() };
  await deps.prisma.environment.update({ where: { id: envId }, data: { restored } });
}

// ---------------------------------------------------------------------------------------------
// Listing and deleting

export interface ListSnapshotsInput extends PageArgs {
  project?: string | null;
  prefix?: string | null;
}

/** A page of one project's snapshots, newest first (src/kernel/paging.ts); `next` is the cursor of the following page. */
export async function listSnapshots(deps: Deps, actor: Actor, input: ListSnapshotsInput) {
  requireMember(actor);
  const project = input.project ? validateProjectName(input.project) : DEFAULT_PROJECT;
  const page = pageQuery(input, 'snap');
  const where: Prisma.SnapshotWhereInput = { orgId: actor.orgId, project };
  if (input.prefix) where.key = { startsWith: validateSnapshotKey(input.prefix, 'prefix') };
  const rows = await deps.prisma.snapshot.findMany({ where: { ...where, ...page.where }, orderBy: page.orderBy, take: page.take });
  const { items, next } = pageOf(rows, page.size);
  return { project, snapshots: items, next };
}

/** Deletes a snapshot's objects (manifest first), then its row. */
export async function purgeSnapshot(deps: Deps, snapshot: Snapshot): Promise<void> {
  await deletePacked(deps.store, snapshotPrefix(snapshot));
  await deps.prisma.snapshot.deleteMany({ where: { id: snapshot.id } });
}
