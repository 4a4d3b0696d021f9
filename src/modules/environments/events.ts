import type { Deps } from '../../app/context';
import { type Environment, Prisma as P } from '../../generated/prisma/client';
import { environmentPayload } from '../../kernel/json-columns';
import { lockSql, type Tx } from '../../platform/db';
import { topics } from '../../platform/events';

/**
 * Appends the environment's new version to the event log, inside the transition's transaction,
 * and with it `deliveries` (its webhook's, webhookDeliveries), in one statement. The
 * per-organization lock makes sequence order equal commit order, so a subscriber reading
 * `seq > last` never skips an event that commits late. Answers whether a delivery was queued.
 */
export async function recordEvent(tx: Tx, env: Environment, deliveries?: P.Sql): Promise<boolean> {
  const payload = JSON.stringify(environmentPayload(env));
  // A data-modifying CTE runs whether or not anything reads it: the event row is written unread.
  const [row] = await tx.$queryRaw<{ hooked: number }[]>`
    WITH locked AS (SELECT ${lockSql(`berth:events:${env.orgId}`)}),
         logged AS (INSERT INTO "EnvironmentEvent" ("orgId", "environmentId", version, state, payload)
                    SELECT ${env.orgId}, ${env.id}, ${env.version}, ${env.state}, ${payload}::jsonb FROM locked)
         ${deliveries ? P.sql`, hooked AS (${deliveries} RETURNING 1)` : P.empty}
    SELECT ${deliveries ? P.sql`(SELECT count(*) FROM hooked)::int` : P.sql`0`} AS hooked`;
  return (row?.hooked ?? 0) > 0;
}

/** Wakes subscribers (on every instance) after the transaction committed. */
export async function announceEnvironment(deps: Deps, orgId: string): Promise<void> {
  await deps.events.publish(topics.environments(orgId), {});
}
