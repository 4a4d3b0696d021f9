// The webhook outbox's writing side: an event becomes one WebhookDelivery row per subscribed
// endpoint, inside the transaction that makes the event, so a committed event is never lost and a
// rolled-back one is never sent (docs/operations.md#webhooks). The delivery job sends them.

import { type Artifact, type Environment, Prisma as P, type Snapshot } from '../../generated/prisma/client';
import { formatDuration } from '../../kernel/durations';
import type { WebhookEvent } from '../../kernel/event-names';
import { labelsOf } from '../../kernel/json-columns';
import type { Tx } from '../../platform/db';

/**
 * Writes the event's deliveries in one statement: the body `{type, timestamp, data}` is
 * serialized once, so every endpoint and every attempt gets the same bytes. `FOR KEY SHARE` keeps
 * a webhook deleted meanwhile from failing the event's transaction (it is skipped instead).
 * Deliveries with the same `orderingKey` (an environment's id) go out in order. Answers whether
 * any endpoint wants it, for the caller to nudge the delivery job after its commit.
 */
export async function emitWebhookEvent(
  tx: Tx,
  orgId: string,
  type: WebhookEvent,
  data: unknown,
  now: Date,
  orderingKey: string | null = null,
): Promise<boolean> {
  return (await tx.$executeRaw(webhookDeliveries(orgId, type, data, now, orderingKey))) > 0;
}

/** emitWebhookEvent's statement, for a caller that makes it part of one of its own (a CTE). */
export function webhookDeliveries(orgId: string, type: WebhookEvent, data: unknown, now: Date, orderingKey: string | null = null): P.Sql {
  const body = JSON.stringify({ type, timestamp: now.toISOString(), data });
  // `msg_` and 20 characters of the ids' base32 alphabet, from a random UUID's hex (0, 1, 8, 9 mapped into it).
  return P.sql`
    INSERT INTO "WebhookDelivery" (id, "webhookId", "orgId", event, body, "orderingKey", "nextAttempt", created)
    SELECT 'msg_' || translate(substr(replace(gen_random_uuid()::text, '-', ''), 1, 20), '0189', 'wxyz'),
           w.id, w."orgId", ${type}, ${body}, ${orderingKey}, ${now}, ${now}
      FROM "Webhook" w
     WHERE w."orgId" = ${orgId} AND ${type} = ANY(w.events)
       FOR KEY SHARE`;
}

const iso = (d: Date | null) => (d ? d.toISOString() : null);

/** An environment as GET /v1/environments/{id} shows its main fields. */
export function environmentData(env: Environment) {
  return {
    id: env.id,
    name: env.name,
    template: env.template,
    state: env.state,
    node: env.node,
    sandbox: env.sandboxId,
    pool: env.pool,
    labels: labelsOf(env),
    project: env.project,
    readyMs: env.readyMs,
    error: env.error,
    createdBy: env.createdBy,
    stoppedBy: env.stoppedBy,
    created: iso(env.created),
    ready: iso(env.ready),
    stopped: iso(env.stopped),
    expires: iso(env.expires),
    idleUntil: iso(env.idleUntil),
    idle: formatDuration(env.idleMs),
    hard: formatDuration(env.hardMs),
    snapshot: env.snapshot,
    image: env.image,
    network: env.network,
    workdir: env.workdir,
    runtime: env.runtime,
  };
}

/** The deliveries of environment.state for a transition just written (webhookDeliveries): ordered per environment. */
export function environmentStateDeliveries(env: Environment, now: Date): P.Sql {
  return webhookDeliveries(env.orgId, 'environment.state', environmentData(env), now, env.id);
}

/** An artifact as GET /v1/artifacts/{id} shows its main fields. */
export function artifactData(a: Artifact) {
  return {
    id: a.id,
    project: a.project,
    name: a.name,
    size: Number(a.size),
    sha256: a.sha256,
    contentType: a.contentType,
    labels: labelsOf(a),
    createdBy: a.createdBy,
    created: iso(a.created),
    expires: iso(a.expires),
  };
}

/** A snapshot as GET /v1/snapshots lists it. */
export function snapshotData(s: Snapshot) {
  return {
    project: s.project,
    key: s.key,
    share: s.share,
    root: s.root,
    files: s.files,
    bytes: Number(s.bytes),
    lease: s.lease,
    createdBy: s.createdBy,
    created: iso(s.created),
  };
}
