// Which nodes may take new work (a lease's claim, a warm container), the one rule every query of
// it shares: online, its engine answering, not draining, not cordoned, not revoked. The queries name the node `r`.
import { Prisma as P } from '../../generated/prisma/client';

/** A condition on `"RemoteNode" r`: the node takes new work. */
export const NODE_TAKES_WORK = P.sql`(r.state = 'online' AND r."engineError" IS NULL AND r.draining IS NULL AND r.cordoned IS NULL AND r.revoked IS NULL)`;
