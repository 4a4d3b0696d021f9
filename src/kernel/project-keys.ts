// Per-project data keys: random 256-bit keys, versioned, stored only wrapped by the master key
// (src/platform/crypto/data-keys.ts). Artifacts, snapshots and sandbox keyrings seal under them.
//
// State lives only in the ProjectKey table and nothing caches an unwrapped key beyond the call
// that asked for it, so a shred (which deletes the rows, or empties `wrapped`) takes effect at once
// on every instance. A version whose row is gone or empty is "shredded": keyByVersion refuses it
// and currentKey starts a new version above the highest one still listed.
import type { Deps } from '../app/context';
import { dataKeyAad, newDataKey, unwrapKey, wrapKey } from '../platform/crypto/data-keys';
import { lockFor, type Tx } from '../platform/db';
import { GoneError } from './errors';

export const DEFAULT_PROJECT = 'default';

/** The key version was destroyed by a shred (or never existed): nothing sealed under it opens. */
export class ProjectKeyGoneError extends GoneError {
  constructor(
    readonly project: string,
    readonly version: number,
  ) {
    super(`key version ${version} of project ${project} is gone (shredded)`, 'key_shredded');
  }
}

export interface ProjectKey {
  version: number;
  key: Buffer;
}

type Db = Pick<Deps['prisma'], 'projectKey'>;

/** Shreds of a project and the snapshot saves of its environments take turns on this lock. */
export function lockProject(tx: Tx, orgId: string, project: string): Promise<void> {
  return lockFor(tx, `berth:shred:${orgId}:${project}`);
}

function unwrap(deps: Deps, orgId: string, project: string, row: { version: number; wrapped: Uint8Array }): Buffer {
  return unwrapKey(deps.masterKey, Buffer.from(row.wrapped), dataKeyAad(orgId, project, row.version));
}

/**
 * The project's current (highest) key, created on first use. Safe under concurrency: every caller
 * inserts with ON CONFLICT DO NOTHING and then reads back the one row that won, so two first
 * uploads racing end with one key. `db` lets a caller run it inside its transaction.
 */
export async function currentKey(deps: Deps, orgId: string, project = DEFAULT_PROJECT, db: Db = deps.prisma): Promise<ProjectKey> {
  for (;;) {
    const latest = await db.projectKey.findFirst({ where: { orgId, project }, orderBy: { version: 'desc' } });
    if (latest && latest.wrapped.length > 0) return { version: latest.version, key: unwrap(deps, orgId, project, latest) };
    // None yet, or the latest is a shredded tombstone: start the next version.
    const version = (latest?.version ?? 0) + 1;
    const key = newDataKey();
    await db.projectKey.createMany({
      data: [
        {
          orgId,
          project,
          version,
          wrapped: new Uint8Array(wrapKey(deps.masterKey, key, dataKeyAad(orgId, project, version))),
          created: deps.clock.now(),
        },
      ],
      skipDuplicates: true,
    });
  }
}

/** A given version of the project's key; ProjectKeyGoneError when it was shredded. */
export async function keyByVersion(deps: Deps, orgId: string, project: string, version: number, db: Db = deps.prisma): Promise<Buffer> {
  const row = await db.projectKey.findUnique({ where: { orgId_project_version: { orgId, project, version } } });
  if (!row || row.wrapped.length === 0) throw new ProjectKeyGoneError(project, version);
  return unwrap(deps, orgId, project, row);
}
