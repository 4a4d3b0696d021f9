// What operators see of warm containers (docs/environments.md, "Warm templates"): each slot's,
// from the database the warm job (src/modules/nodes/warm-job.ts) keeps.
import type { Prisma } from '../../platform/db';

export interface WarmContainer {
  slot: string;
  template: string;
  state: string;
  since: Date | null;
  error: string | null;
}

/** The warm containers of a remote node's slots, or (null) of the built-in pool's hot nodes. */
export async function warmContainers(prisma: Prisma, remoteId: string | null): Promise<WarmContainer[]> {
  const rows = await prisma.node.findMany({
    where: { remoteId, warmState: { not: null } },
    select: { id: true, warmTemplate: true, warmState: true, warmSince: true, warmError: true },
    orderBy: { id: 'asc' },
  });
  return rows.map((r) => ({ slot: r.id, template: r.warmTemplate ?? '', state: r.warmState!, since: r.warmSince, error: r.warmError }));
}
