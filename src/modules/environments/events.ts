import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import { environmentPayload } from '../../kernel/json-columns';
import { lockFor, type Tx } from '../../platform/db';
import { topics } from '../../platform/events';

/**
 * Appends the environment's new version to the event log, inside the transition's transaction.
 * The per-organization lock makes sequence order equal commit order, so a subscriber reading
 * `seq > last` never skips an event that commits late.
 */
export async function recordEvent(tx: Tx, env: Environment): Promise<void> {
  await lockFor(tx, `berth:events:${env.orgId}`);
  await tx.environmentEvent.create({
    data: { orgId: env.orgId, environmentId: env.id, version: env.version, state: env.state, payload: environmentPayload(env) },
  });
}

/** Wakes subscribers (on every instance) after the transaction committed. */
export async function announceEnvironment(deps: Deps, orgId: string): Promise<void> {
  await deps.events.publish(topics.environments(orgId), {});
}
