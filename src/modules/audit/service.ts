// The audit log (docs/operations.md#audit-log): every change and command, written by the service
// that makes it, in the same transaction, so a change that rolls back leaves no `success` event
// and a change that commits always has one. Refusals that matter for security (a revoke, a
// command, a delete or an admin change refused with 403) are written as `denied`, on their own,
// since their transaction never started or rolled back.
import type { Actor, Deps } from '../../app/context';
import type { AuditEvent, Prisma as P } from '../../generated/prisma/client';
import { requireAdmin } from '../../kernel/access';
import { ForbiddenError, ValidationError } from '../../kernel/errors';
import { AUDIT_ACTIONS, type AuditAction } from '../../kernel/event-names';
import { newId } from '../../kernel/names';
import { type Page, type PageArgs, pageOf, pageQuery } from '../../kernel/paging';
import { show } from '../../kernel/show';
import type { Tx } from '../../platform/db';

export type AuditOutcome = 'success' | 'denied';

export interface AuditTarget {
  /** environment, exec, token, key, sandbox, node, artifact, project, quota, template, webhook… */
  kind: string;
  /** The record's id (a quota's or template's name, a project's name). */
  id: string;
}

export interface AuditEntry {
  action: AuditAction;
  target: AuditTarget;
  outcome?: AuditOutcome;
  /** A few facts worth keeping (a command, a name); user text is cut, never a secret. */
  detail?: Record<string, string | number | boolean | null>;
}

/** Who did it, as the event records it. */
export interface AuditWho {
  orgId: string;
  kind: Actor['kind'];
  id: string;
  name: string;
  address: string;
}

/** A detail string (a command, a name: user text) is kept to this many characters. */
const MAX_DETAIL_TEXT = 1000;
const MAX_FILTER_TEXT = 200;

export function whoOf(actor: Actor): AuditWho {
  const id =
    actor.kind === 'person'
      ? (actor.personId ?? actor.credentialId)
      : actor.kind === 'sandbox'
        ? (actor.sandboxId ?? actor.credentialId)
        : actor.kind === 'node'
          ? (actor.nodeId ?? actor.credentialId)
          : actor.credentialId;
  return { orgId: actor.orgId, kind: actor.kind, id, name: actor.name, address: actor.address };
}

function cut(text: string): string {
  return text.length > MAX_DETAIL_TEXT ? `${text.slice(0, MAX_DETAIL_TEXT)}…` : text;
}

/**
 * Writes one event inside `tx`, the transaction of the change it records. `who` is the caller
 * (an Actor) or, for a credential being born (a sandbox joining), whom it becomes.
 */
export async function recordAudit(deps: Pick<Deps, 'clock'>, tx: Tx, who: Actor | AuditWho, entry: AuditEntry): Promise<void> {
  await tx.auditEvent.create({ data: auditRow(deps, who, entry) });
}

/** The row recordAudit writes, for a statement that writes it along with its change (recordExecRow). */
export function auditRow(deps: Pick<Deps, 'clock'>, who: Actor | AuditWho, entry: AuditEntry) {
  const by = 'credentialId' in who ? whoOf(who) : who;
  const detail = entry.detail
    ? Object.fromEntries(Object.entries(entry.detail).map(([k, v]) => [k, typeof v === 'string' ? cut(v) : v]))
    : undefined;
  return {
    id: newId('aud'),
    orgId: by.orgId,
    created: deps.clock.now(),
    action: entry.action,
    actorKind: by.kind,
    actorId: by.id,
    actorName: by.name,
    targetKind: entry.target.kind,
    targetId: entry.target.id,
    address: by.address,
    outcome: entry.outcome ?? 'success',
    ...(detail ? { detail } : {}),
  };
}

/**
 * Runs an access check; when it refuses (403), the attempt is recorded as `denied` before the
 * refusal goes on to the caller. Other errors (not found, invalid) are not security events.
 */
export async function checkAudited<T>(deps: Deps, actor: Actor, entry: AuditEntry, check: () => T | Promise<T>): Promise<T> {
  try {
    return await check();
  } catch (error) {
    if (error instanceof ForbiddenError) await recordAudit(deps, deps.prisma, actor, { ...entry, outcome: 'denied' });
    throw error;
  }
}

export interface AuditFilterInput {
  action?: string | null;
  /** An actor's id (usr_…, key_…, sb_…, a node's id), or a person's email. */
  actor?: string | null;
  /** A target's id. */
  target?: string | null;
  since?: string | null;
  until?: string | null;
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

function timeFilter(value: string, field: string): Date {
  const time = RFC3339.test(value) ? new Date(value) : undefined;
  if (!time || Number.isNaN(time.getTime())) {
    throw new ValidationError(`${field}: ${show(value)} is not an RFC 3339 time such as 2026-11-22T02:14:16Z`, field);
  }
  return time;
}

function textFilter(value: string, field: string): string {
  if (value === '' || value.length > MAX_FILTER_TEXT) throw new ValidationError(`${field}: must be 1-${MAX_FILTER_TEXT} characters`, field);
  return value;
}

function auditWhere(orgId: string, filter: AuditFilterInput): P.AuditEventWhereInput {
  const where: P.AuditEventWhereInput = { orgId };
  if (filter.action !== undefined && filter.action !== null) {
    if (!(AUDIT_ACTIONS as readonly string[]).includes(filter.action)) {
      throw new ValidationError(`action: ${show(filter.action)} is not an audited action (${AUDIT_ACTIONS.join(', ')})`, 'action');
    }
    where.action = filter.action;
  }
  if (filter.actor !== undefined && filter.actor !== null) {
    const actor = textFilter(filter.actor, 'actor');
    where.OR = actor.includes('@') ? [{ actorKind: 'person', actorName: actor.toLowerCase() }] : [{ actorId: actor }];
  }
  if (filter.target !== undefined && filter.target !== null) where.targetId = textFilter(filter.target, 'target');
  const since = filter.since === undefined || filter.since === null ? undefined : timeFilter(filter.since, 'since');
  const until = filter.until === undefined || filter.until === null ? undefined : timeFilter(filter.until, 'until');
  if (since && until && since > until) throw new ValidationError('since: must not be after until', 'since');
  if (since || until) where.created = { ...(since ? { gte: since } : {}), ...(until ? { lt: until } : {}) };
  return where;
}

/** GET /v1/audit: the organization's events, newest first, by the list paging rule (admins only). */
export async function listAuditEvents(
  deps: Deps,
  actor: Actor,
  input: PageArgs & { filter?: AuditFilterInput | null },
): Promise<Page<AuditEvent>> {
  requireAdmin(actor, 'only admins can read the audit log');
  const page = pageQuery(input, 'aud');
  const where = auditWhere(actor.orgId, input.filter ?? {});
  const rows = await deps.prisma.auditEvent.findMany({ where: { AND: [where, page.where] }, orderBy: page.orderBy, take: page.take });
  return pageOf(rows, page.size);
}

const PRUNE_BATCH = 1000;

/** Deletes events older than AUDIT_RETENTION, a batch at a time so no statement holds long locks. */
export async function pruneAuditEvents(deps: Deps): Promise<void> {
  const before = new Date(deps.clock.now().getTime() - deps.config.auditRetentionMs);
  for (;;) {
    const count = await deps.prisma.$executeRaw`
      DELETE FROM "AuditEvent" WHERE id IN (SELECT id FROM "AuditEvent" WHERE created < ${before} LIMIT ${PRUNE_BATCH})`;
    if (count < PRUNE_BATCH) return;
  }
}
