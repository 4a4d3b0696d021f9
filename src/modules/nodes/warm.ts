// What operators see of warm containers (docs/environments.md, "Warm templates"): each slot's,
// from the database the warm job (src/modules/nodes/warm-job.ts) keeps.
import DataLoader from 'dataloader';
import type { Prisma } from '../../platform/db';

export interface WarmContainer {
  slot: string;
  template: string;
  /** The organization whose template it is ('' for the catalog's): only it sees it on the built-in node. */
  org: string;
  state: string;
  since: Date | null;
  error: string | null;
}

/**
 * Whose warm containers an organization sees: its own templates' and the catalog's (''). The
 * built-in node keeps every organization's; each sees only these of them.
 */
export const warmOrgsSeenBy = (orgId: string) => ['', orgId];

const WARM_COLUMNS = {
  id: true,
  remoteId: true,
  warmTemplate: true,
  warmOrg: true,
  warmState: true,
  warmSince: true,
  warmError: true,
} as const;

function toWarm(r: {
  id: string;
  warmTemplate: string | null;
  warmOrg: string | null;
  warmState: string | null;
  warmSince: Date | null;
  warmError: string | null;
}) {
  return { slot: r.id, template: r.warmTemplate ?? '', org: r.warmOrg ?? '', state: r.warmState!, since: r.warmSince, error: r.warmError };
}

/** Loads the warm containers of many remote nodes in one query (a list of nodes asks once). */
export function warmContainersLoader(prisma: Prisma): DataLoader<string, WarmContainer[]> {
  return new DataLoader(
    async (remoteIds) => {
      const rows = await prisma.node.findMany({
        where: { remoteId: { in: [...remoteIds] }, warmState: { not: null } },
        select: WARM_COLUMNS,
        orderBy: { id: 'asc' },
      });
      return remoteIds.map((id) => rows.filter((r) => r.remoteId === id).map(toWarm));
    },
    { cache: false, maxBatchSize: 500 },
  );
}
