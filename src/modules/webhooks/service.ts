// Webhooks (docs/operations.md#webhooks): admins register endpoints; the outbox rows written with
// each event (src/modules/webhooks/events.ts) are sent by the delivery job, signed the Standard
// Webhooks way, retried with backoff, in order per environment, at least once.
import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import type { Actor, Deps } from '../../app/context';
import { requireAdmin } from '../../kernel/access';
import type { BackgroundJob } from '../../kernel/background';
import { ConflictError, NotFoundError, ValidationError } from '../../kernel/errors';
import { WEBHOOK_EVENTS, type WebhookEvent } from '../../kernel/event-names';
import { WEBHOOK_JOB } from '../../kernel/job-names';
import { newId } from '../../kernel/names';
import { type PageArgs, pageOf, pageQuery } from '../../kernel/paging';
import { show } from '../../kernel/show';
import { unwrapKey, wrapKey } from '../../platform/crypto/data-keys';
import { lockFor } from '../../platform/db';
import { checkAudited, recordAudit } from '../audit';
import { resolveTarget, type Target } from './addresses';

export const MAX_WEBHOOKS = 20;
const MAX_URL_LENGTH = 2048;
/** Failed attempts in a row after which an endpoint shows as failing (until a success). */
export const FAILING_AFTER = 5;
/** Waits before each retry: the first within seconds, then growing, about a day in all; then it gives up. */
export const RETRY_SCHEDULE_MS = [5, 30, 120, 600, 1800, 3600, 7200, 14_400, 28_800, 28_800].map((s) => s * 1000);
/** Bytes of an endpoint's answer kept for lastError; the rest is never read. */
const ERROR_BYTES = 1024;
const BATCH = 20;

export interface CreateWebhookInput {
  url: string;
  events: string[];
}

const secretAad = (orgId: string, id: string) => JSON.stringify(['berth.webhook', orgId, id]);

// ---------------------------------------------------------------------------------------------
// Which URLs an endpoint may have (and which addresses: src/modules/webhooks/addresses.ts)

/** The checked URL: http(s), no credentials, bounded length. */
function parseUrl(text: string): URL {
  if (text.length > MAX_URL_LENGTH) throw new ValidationError(`url: longer than ${MAX_URL_LENGTH} characters`, 'url');
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ValidationError('url: not an absolute URL such as https://example.com/hooks', 'url');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new ValidationError('url: only http and https URLs', 'url');
  if (url.username || url.password) throw new ValidationError('url: must not carry credentials (user:password@)', 'url');
  return url;
}

// ---------------------------------------------------------------------------------------------
// Managing endpoints (admins)

function checkEvents(events: string[]): WebhookEvent[] {
  if (events.length === 0) throw new ValidationError(`events: name at least one of ${WEBHOOK_EVENTS.join(', ')}`, 'events');
  const unknown = events.find((e) => !(WEBHOOK_EVENTS as readonly string[]).includes(e));
  if (unknown !== undefined) {
    throw new ValidationError(`events: ${show(unknown)} is not one of ${WEBHOOK_EVENTS.join(', ')}`, 'events');
  }
  return [...new Set(events)] as WebhookEvent[];
}

/** POST /v1/webhooks: the secret (`whsec_` + base64 of 32 random bytes) is answered once and kept sealed. */
export async function createWebhook(deps: Deps, actor: Actor, input: CreateWebhookInput) {
  const id = newId('whk');
  await checkAudited(deps, actor, { action: 'webhook.create', target: { kind: 'webhook', id } }, () =>
    requireAdmin(actor, 'only admins can manage webhooks'),
  );
  const url = parseUrl(input.url);
  const events = checkEvents(input.events);
  await resolveTarget(deps.config, url);
  const key = randomBytes(32);
  const webhook = await deps.prisma.$transaction(async (tx) => {
    // Creations of one organization take turns, so two racing ones cannot pass the cap together.
    await lockFor(tx, `berth:webhooks:${actor.orgId}`);
    const count = await tx.webhook.count({ where: { orgId: actor.orgId } });
    if (count >= MAX_WEBHOOKS) {
      throw new ConflictError(
        `your organization already has ${MAX_WEBHOOKS} webhooks, the most it may have; delete one first`,
        'too_many_webhooks',
      );
    }
    const created = await tx.webhook.create({
      data: {
        id,
        orgId: actor.orgId,
        url: url.href,
        events,
        secretSealed: new Uint8Array(wrapKey(deps.masterKey, key, secretAad(actor.orgId, id))),
        createdBy: actor.name,
        created: deps.clock.now(),
      },
    });
    await recordAudit(deps, tx, actor, {
      action: 'webhook.create',
      target: { kind: 'webhook', id },
      detail: { url: created.url, events: events.join(',') },
    });
    return created;
  });
  return { webhook, secret: `whsec_${key.toString('base64')}` };
}

/** GET /v1/webhooks: the organization's endpoints, newest first (at most MAX_WEBHOOKS). */
export function webhookFilter(actor: Actor) {
  requireAdmin(actor, 'only admins can manage webhooks');
  return { orgId: actor.orgId };
}

/** How this server checks endpoints' addresses, for the form that registers them (admins). */
export interface WebhookSettings {
  /** Internal addresses (loopback, private, link-local) are allowed: WEBHOOK_ALLOW_PRIVATE=1. */
  allowPrivate: boolean;
}

export function webhookSettings(deps: Deps, actor: Actor): WebhookSettings {
  requireAdmin(actor, 'only admins can manage webhooks');
  return { allowPrivate: deps.config.webhookAllowPrivate };
}

async function findWebhook(deps: Deps, actor: Actor, id: string) {
  const webhook = await deps.prisma.webhook.findFirst({ where: { ...webhookFilter(actor), id } });
  if (!webhook) throw new NotFoundError(`webhook ${id}`);
  return webhook;
}

/** DELETE /v1/webhooks/{id}: its pending deliveries go with it. */
export async function deleteWebhook(deps: Deps, actor: Actor, id: string): Promise<string> {
  await checkAudited(deps, actor, { action: 'webhook.delete', target: { kind: 'webhook', id } }, () =>
    requireAdmin(actor, 'only admins can manage webhooks'),
  );
  const webhook = await findWebhook(deps, actor, id);
  await deps.prisma.$transaction(async (tx) => {
    const { count } = await tx.webhook.deleteMany({ where: { id, orgId: actor.orgId } });
    if (count === 0) throw new NotFoundError(`webhook ${id}`);
    await recordAudit(deps, tx, actor, { action: 'webhook.delete', target: { kind: 'webhook', id }, detail: { url: webhook.url } });
  });
  return id;
}

/** GET /v1/webhooks/{id}/deliveries: newest first, paged like every list. */
export async function listDeliveries(deps: Deps, actor: Actor, id: string, args: PageArgs) {
  await findWebhook(deps, actor, id);
  const page = pageQuery(args, 'msg');
  const rows = await deps.prisma.webhookDelivery.findMany({
    where: { AND: [{ webhookId: id }, page.where] },
    orderBy: page.orderBy,
    take: page.take,
  });
  return pageOf(rows, page.size);
}

// ---------------------------------------------------------------------------------------------
// Delivering

interface Claimed {
  id: string;
  webhookId: string;
  orgId: string;
  event: string;
  body: string;
  attempts: number;
}

/**
 * Takes due deliveries for one attempt (finished ones have no nextAttempt, so the index holds only
 * what is pending): their nextAttempt moves past the attempt's deadline, so
 * another instance leaves them alone meanwhile and an instance killed mid-attempt leaves them due
 * again. A delivery waits while an older one of the same endpoint and environment is pending.
 */
async function claim(deps: Deps): Promise<Claimed[]> {
  const now = deps.clock.now();
  const lease = new Date(now.getTime() + deps.config.webhookTimeoutMs * 2 + 1000);
  return deps.prisma.$queryRaw<Claimed[]>`
    UPDATE "WebhookDelivery" SET "nextAttempt" = ${lease}
     WHERE id IN (
       SELECT d.id FROM "WebhookDelivery" d
        WHERE d.delivered IS NULL AND d."gaveUp" IS NULL AND d."nextAttempt" <= ${now}
          AND NOT EXISTS (
            SELECT 1 FROM "WebhookDelivery" o
             WHERE o."webhookId" = d."webhookId" AND o."orderingKey" = d."orderingKey" AND o.seq < d.seq
               AND o.delivered IS NULL AND o."gaveUp" IS NULL)
        ORDER BY d."nextAttempt", d.seq
        LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
    RETURNING id, "webhookId", "orgId", event, body, attempts`;
}

/** The Standard Webhooks signature: base64 HMAC-SHA256 of `id.timestamp.body` under the secret's bytes. */
export function sign(key: Buffer, id: string, timestamp: number, body: string): string {
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
}

interface Outcome {
  status: number | null;
  error: string | null;
}

/** Text safe to store: no NULs, at most ERROR_BYTES-ish. */
const storable = (text: string) => text.replace(/\0/g, '').slice(0, ERROR_BYTES);

/**
 * POSTs `body` to `url` at `target` (the checked address): no redirects followed, at most
 * `timeoutMs` in all, at most ERROR_BYTES of the answer read.
 */
function post(url: URL, target: Target, headers: Record<string, string>, body: string, timeoutMs: number) {
  const lookup: LookupFunction = (_host, options, callback) => {
    if (options.all) (callback as (err: null, all: { address: string; family: number }[]) => void)(null, [target]);
    else callback(null, target.address, target.family);
  };
  return new Promise<Outcome>((resolve) => {
    const send = url.protocol === 'https:' ? https.request : http.request;
    const req = send(url, { method: 'POST', headers, lookup, agent: false }, (res) => {
      const status = res.statusCode ?? 0;
      if (status >= 200 && status < 300) {
        res.destroy();
        resolve({ status, error: null });
        return;
      }
      const chunks: Buffer[] = [];
      let kept = 0;
      const done = () => {
        res.destroy();
        const text = Buffer.concat(chunks).subarray(0, ERROR_BYTES).toString('utf8');
        resolve({ status, error: storable(`HTTP ${status}${text ? `: ${text}` : ''}`) });
      };
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        kept += chunk.length;
        if (kept >= ERROR_BYTES) done();
      });
      res.on('end', done);
      res.on('error', done);
    });
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    req.on('error', (err) => resolve({ status: null, error: storable(err.message || String(err)) }));
    req.on('close', () => clearTimeout(timer));
    req.end(body);
  });
}

function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no address within ${ms} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/** One attempt of one delivery, and what it leaves: delivered, a retry later, or given up. */
async function attempt(deps: Deps, d: Claimed): Promise<void> {
  const hook = await deps.prisma.webhook.findUnique({ where: { id: d.webhookId } });
  if (!hook) return; // deleted meanwhile: its deliveries went with it
  const timestamp = Math.floor(deps.clock.now().getTime() / 1000);
  let outcome: Outcome;
  try {
    const url = new URL(hook.url);
    // Checked again now: what the name resolves to may have changed since registration. A
    // resolver that does not answer counts against the attempt's deadline too.
    const target = await withDeadline(resolveTarget(deps.config, url), deps.config.webhookTimeoutMs);
    const key = unwrapKey(deps.masterKey, Buffer.from(hook.secretSealed), secretAad(hook.orgId, hook.id));
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'Berth-Webhooks',
      'webhook-id': d.id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': sign(key, d.id, timestamp, d.body),
    };
    outcome = await post(url, target, headers, d.body, deps.config.webhookTimeoutMs);
  } catch (err) {
    outcome = { status: null, error: storable(err instanceof Error ? err.message : String(err)) };
  }
  const now = deps.clock.now();
  const attempts = d.attempts + 1;
  const delivered = outcome.status !== null && outcome.status >= 200 && outcome.status < 300;
  const wait = RETRY_SCHEDULE_MS[attempts - 1];
  const result = { attempts, lastAttempt: now, lastStatus: outcome.status, lastError: outcome.error };
  // Kept beside the delivery, so a later attempt does not overwrite why this one failed. An attempt
  // made again (an instance killed before it recorded the first) keeps the first record.
  const recorded = deps.prisma.$executeRaw`
    INSERT INTO "WebhookAttempt" ("deliveryId", attempt, at, status, error)
    VALUES (${d.id}, ${attempts}, ${now}, ${outcome.status}, ${outcome.error})
    ON CONFLICT DO NOTHING`;
  if (delivered) {
    await deps.prisma.$transaction([
      recorded,
      deps.prisma.webhookDelivery.updateMany({ where: { id: d.id }, data: { ...result, delivered: now, nextAttempt: null } }),
      deps.prisma.webhook.updateMany({ where: { id: hook.id }, data: { consecutiveFailures: 0, failingSince: null } }),
    ]);
  } else {
    const then = wait === undefined ? 'given up' : `tried again in ${Math.round(wait / 1000)} s`;
    const why = outcome.error ?? `HTTP ${outcome.status}`;
    deps.log(`webhook ${hook.id}: delivery ${d.id} (${d.event}) attempt ${attempts} failed: ${why}; ${then}`);
    await deps.prisma.$transaction([
      recorded,
      deps.prisma.webhookDelivery.updateMany({
        where: { id: d.id },
        data:
          wait === undefined ? { ...result, gaveUp: now, nextAttempt: null } : { ...result, nextAttempt: new Date(now.getTime() + wait) },
      }),
      deps.prisma.$executeRaw`
        UPDATE "Webhook" SET "consecutiveFailures" = "consecutiveFailures" + 1,
               "failingSince" = CASE WHEN "failingSince" IS NULL AND "consecutiveFailures" + 1 >= ${FAILING_AFTER}
                                     THEN ${now} ELSE "failingSince" END
         WHERE id = ${hook.id}`,
    ]);
  }
  deps.metrics.webhookDeliveries.inc({ outcome: delivered ? 'delivered' : wait === undefined ? 'gave_up' : 'failed' });
}

/** Sends what is due, batch after batch, then wakes again for the soonest retry. */
async function deliverDue(deps: Deps): Promise<void> {
  for (;;) {
    const batch = await claim(deps);
    if (batch.length === 0) break;
    await Promise.all(batch.map((d) => attempt(deps, d)));
  }
  // Only retries still ahead: one held back behind an older delivery is released by that one's outcome.
  const now = deps.clock.now();
  const next = await deps.prisma.webhookDelivery.findFirst({
    where: { delivered: null, gaveUp: null, nextAttempt: { gt: now } },
    orderBy: { nextAttempt: 'asc' },
    select: { nextAttempt: true },
  });
  const wait = next?.nextAttempt ? next.nextAttempt.getTime() - now.getTime() : Number.POSITIVE_INFINITY;
  if (wait < webhookJob.intervalMs) deps.background.nudge(WEBHOOK_JOB, wait);
}

export const webhookJob: BackgroundJob = { name: WEBHOOK_JOB, intervalMs: 5_000, run: deliverDue };

/** How long a delivered or given-up delivery stays listed. */
export const DELIVERY_RETENTION_MS = 30 * 24 * 3600_000;

/** Drops finished deliveries past DELIVERY_RETENTION_MS, so the outbox does not grow without end. */
async function pruneDeliveries(deps: Deps): Promise<void> {
  const cutoff = new Date(deps.clock.now().getTime() - DELIVERY_RETENTION_MS);
  await deps.prisma.webhookDelivery.deleteMany({ where: { OR: [{ delivered: { lt: cutoff } }, { gaveUp: { lt: cutoff } }] } });
}

export const webhookPruneJob: BackgroundJob = { name: 'webhook-prune', intervalMs: 3600_000, run: pruneDeliveries };

/** After a transaction that wrote deliveries committed: send them now rather than at the next interval. */
export function nudgeWebhooks(deps: Deps, wrote: boolean): void {
  if (wrote) deps.background.nudge(WEBHOOK_JOB);
}
