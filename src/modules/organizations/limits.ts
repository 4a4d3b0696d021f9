// Operator limits, so that one organization cannot starve the others (docs/operations.md#limits):
// the sealed bytes it keeps (artifacts and snapshots, ORG_STORAGE_LIMIT) and the share of a pool
// served to every organization it may hold (POOL_ORG_SHARE). `berth org limits` sets either per
// organization, in the database; unset, the server's settings apply.
import { poolShareFrom, storageLimitFrom } from '../../app/config';
import type { Deps } from '../../app/context';
import { DomainError, NotFoundError, ValidationError } from '../../kernel/errors';
import { formatSize } from '../../kernel/sizes';
import { lockFor, type Prisma, type Tx } from '../../platform/db';

export interface OrgLimits {
  /** Sealed bytes it may keep. */
  storage: number;
  /** The fraction of a shared pool's hot nodes and queue it may hold. */
  poolShare: number;
}

type Db = Pick<Tx, '$queryRaw'>;

/**
 * How many of a pool's `hotNodes` built-in nodes one organization may hold at once at `share` (a
 * fraction up to 1): at least one. The claim (claimIn, src/modules/environments/claim.ts) says the same in SQL.
 */
export function hotNodesFor(share: number, hotNodes: number): number {
  return hotNodes === 0 ? 0 : Math.max(1, Math.ceil(share * hotNodes));
}

/** A save that would take the organization past its storage limit (413 storage_quota). */
export class StorageQuotaError extends DomainError {
  constructor(what: string, limit: number) {
    super(
      `${what} would take the organization past its storage limit of ${formatSize(limit)} (sealed artifacts and snapshots); delete some or ask the operator for more`,
      'storage_quota',
    );
  }
}

export async function orgLimits(deps: Deps, db: Db, orgId: string): Promise<OrgLimits> {
  const [row] = await db.$queryRaw<{ storageLimit: bigint | null; poolShare: number | null }[]>`
    SELECT "storageLimit", "poolShare" FROM "Organization" WHERE id = ${orgId}`;
  return {
    storage: row?.storageLimit === null || row?.storageLimit === undefined ? deps.config.orgStorageLimit : Number(row.storageLimit),
    poolShare: row?.poolShare ?? deps.config.poolOrgShare,
  };
}

/** The sealed bytes the organization keeps: its artifacts (a deleted one frees its room at once) and snapshots. */
export async function storageUsed(db: Db, orgId: string): Promise<number> {
  const [row] = await db.$queryRaw<{ used: bigint | null }[]>`
    SELECT (SELECT COALESCE(sum("sealedBytes"), 0) FROM "Artifact" WHERE "orgId" = ${orgId} AND status <> 'deleting')
         + (SELECT COALESCE(sum("sealedBytes"), 0) FROM "Snapshot" WHERE "orgId" = ${orgId}) AS used`;
  return Number(row?.used ?? 0);
}

/** Room left before the limit (never below 0), for a save about to start. */
export async function storageRoom(deps: Deps, orgId: string): Promise<{ room: number; limit: number }> {
  const { storage } = await orgLimits(deps, deps.prisma, orgId);
  return { room: Math.max(0, storage - (await storageUsed(deps.prisma, orgId))), limit: storage };
}

/**
 * Inside the transaction that records a save of `sealedBytes`: saves of one organization take
 * turns here, so two that each fit alone cannot both pass the limit together.
 */
export async function admitStorage(deps: Deps, tx: Tx, orgId: string, sealedBytes: number, what: string): Promise<void> {
  await lockFor(tx, `berth:storage:${orgId}`);
  const { storage } = await orgLimits(deps, tx, orgId);
  if ((await storageUsed(tx, orgId)) + sealedBytes > storage) throw new StorageQuotaError(what, storage);
}

/**
 * `berth org limits <org> [--storage SIZE|default] [--pool-share FRACTION|default]`: sets, or with
 * `default` clears, an organization's limits; answers what then holds for it.
 */
export async function setOrgLimits(
  deps: Pick<Deps, 'config'>,
  prisma: Prisma,
  orgName: string,
  input: { storage?: string; poolShare?: string },
): Promise<{ org: string; storage: number; poolShare: number; storageSet: boolean; poolShareSet: boolean }> {
  const data: { storageLimit?: bigint | null; poolShare?: number | null } = {};
  try {
    if (input.storage !== undefined)
      data.storageLimit = input.storage === 'default' ? null : BigInt(storageLimitFrom(input.storage, 'storage'));
    if (input.poolShare !== undefined) data.poolShare = input.poolShare === 'default' ? null : poolShareFrom(input.poolShare, 'pool-share');
  } catch (error) {
    throw error instanceof DomainError ? error : new ValidationError((error as Error).message);
  }
  const org = await prisma.organization.findUnique({ where: { name: orgName } });
  if (!org) throw new NotFoundError(`organization "${orgName}"`);
  const updated = await prisma.organization.update({ where: { id: org.id }, data });
  return {
    org: updated.name,
    storage: updated.storageLimit === null ? deps.config.orgStorageLimit : Number(updated.storageLimit),
    poolShare: updated.poolShare ?? deps.config.poolOrgShare,
    storageSet: updated.storageLimit !== null,
    poolShareSet: updated.poolShare !== null,
  };
}
