// Sandboxes: the organization's machines that environments are wired to (docs/sandboxes.md).
//
// A member registers a machine and gets a network join key (`bjk_…`: random, stored only as its
// SHA-256, valid one hour, usable once). The agent on the machine spends the key without any
// other credential and gets a sandbox credential (`bsc_…`) that may only read and watch its own
// configuration and report that it is alive.

import { Repeater } from 'graphql-yoga';
import type { Actor, Deps } from '../../app/context';
import { Prisma as P } from '../../generated/prisma/client';
import { principalOf, requireMember, requireOwner, requireSandboxAgent, SANDBOX_ONLY_OWN } from '../../kernel/access';
import { HOUR_MS } from '../../kernel/durations';
import { LIVE_STATES } from '../../kernel/environment-states';
import { ConflictError, ForbiddenError, GoneError, NotFoundError, UnauthorizedError, ValidationError } from '../../kernel/errors';
import { generateName, newId } from '../../kernel/names';
import { hashSecret, newSecret, secretPrefix } from '../../kernel/secrets';
import { lockFor } from '../../platform/db';
import { topics } from '../../platform/events';
import type { SandboxConfig } from '../../protocol/sandbox-config';
import { checkAudited, recordAudit } from '../audit';
import { assertNotBlocked, recordFailure } from '../credentials';
import { findSandboxRow, notifySandboxConfig, sandboxConfig } from './wiring';

/** A DNS label: what the machine is called on the private network. */
export const SANDBOX_NAME = /^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$/;
export const JOIN_KEY_TTL_MS = HOUR_MS;
const HOSTNAME_MAX = 253;

export interface SandboxRecord {
  id: string;
  orgId: string;
  /** The organization's name. */
  org: string;
  name: string;
  createdBy: string;
  created: Date;
  lastSeen: Date | null;
  removed: Date | null;
  /** Who removed it: a person's email or an API key's name. */
  removedBy: string | null;
}

export interface SandboxEntry {
  sandbox: SandboxRecord;
  /** Live (pending, starting, ready, stopping) environments wired to it. */
  environments: number;
}

export interface RegisterSandboxInput {
  name?: string | null;
  /** The machine's hostname, sent by the client; names the sandbox when `name` is empty. */
  hostname?: string | null;
}

/** Sandboxes with their live environment counts, in one query. */
async function loadEntries(deps: Deps, orgId: string, where: { ref?: string; includeRemoved?: boolean }): Promise<SandboxEntry[]> {
  const { ref } = where;
  const match = ref === undefined ? P.empty : P.sql`AND (s.id = ${ref} OR (s.name = ${ref} AND s.removed IS NULL))`;
  const removed = where.includeRemoved ? P.empty : P.sql`AND s.removed IS NULL`;
  const rows = await deps.prisma.$queryRaw<(SandboxRecord & { environments: number })[]>`
    SELECT s.id, s."orgId", o.name AS org, s.name, s."createdBy", s.created, s."lastSeen", s.removed, s."removedBy",
           COALESCE(c.n, 0)::int AS environments
      FROM "Sandbox" s
      JOIN "Organization" o ON o.id = s."orgId"
      LEFT JOIN (SELECT "sandboxId", count(*) AS n FROM "Environment"
                  WHERE "orgId" = ${orgId} AND state = ANY(${[...LIVE_STATES]}::text[]) AND "sandboxId" IS NOT NULL
                  GROUP BY "sandboxId") c ON c."sandboxId" = s.id
     WHERE s."orgId" = ${orgId} ${match} ${removed}
     ORDER BY s.created, s.id`;
  return rows.map(({ environments, ...sandbox }) => ({ sandbox, environments }));
}

async function entry(deps: Deps, orgId: string, ref: string): Promise<SandboxEntry> {
  const [found] = await loadEntries(deps, orgId, { ref, includeRemoved: true });
  if (!found) throw new NotFoundError(`sandbox ${ref}`);
  return found;
}

/** GET /v1/sandboxes: the organization's sandboxes, oldest first; removed ones on request. */
export async function listSandboxes(deps: Deps, actor: Actor, opts: { removed?: boolean | null } = {}): Promise<SandboxEntry[]> {
  requireMember(actor);
  return loadEntries(deps, actor.orgId, { includeRemoved: opts.removed === true });
}

/** GET /v1/sandboxes/{id}: by id (removed ones too) or by the name of one not removed. */
export async function getSandbox(deps: Deps, actor: Actor, ref: string): Promise<SandboxEntry> {
  requireMember(actor);
  return entry(deps, actor.orgId, ref);
}

/** The name a registration asks for, and whether it was given explicitly. */
function requestedName(input: RegisterSandboxInput): { base: string; explicit: boolean } {
  if (input.name !== undefined && input.name !== null && typeof input.name !== 'string') {
    throw new ValidationError('name: must be a string', 'name');
  }
  const name = (input.name ?? '').trim().toLowerCase();
  if (name) {
    if (!SANDBOX_NAME.test(name)) {
      throw new ValidationError(
        `name: ${JSON.stringify(input.name)} must be a DNS label: 1-63 letters, digits and "-", starting and ending with a letter or digit`,
        'name',
      );
    }
    return { base: name, explicit: true };
  }
  if (input.hostname !== undefined && input.hostname !== null) {
    if (typeof input.hostname !== 'string' || input.hostname.length > HOSTNAME_MAX) {
      throw new ValidationError(`hostname: must be a string of at most ${HOSTNAME_MAX} characters`, 'hostname');
    }
    // The host's first label, made a DNS label: `Dev Laptop.local` -> `dev-laptop`.
    const label = (input.hostname.trim().split('.')[0] ?? '')
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-+/, '')
      .slice(0, 63)
      .replace(/-+$/, '');
    if (label) return { base: label, explicit: false };
  }
  return { base: generateName(), explicit: false };
}

/**
 * POST /v1/sandboxes. Names are unique among the organization's sandboxes that are not removed:
 * an explicit name that is taken is refused (409 name_taken); a hostname or generated name gets
 * the first free suffix (`laptop-2`).
 */
export async function registerSandbox(deps: Deps, actor: Actor, input: RegisterSandboxInput) {
  requireMember(actor);
  const { base, explicit } = requestedName(input);
  const key = newSecret('bjk');
  const now = deps.clock.now();
  const id = newId('sb');
  await deps.prisma.$transaction(async (tx) => {
    // Registrations in one organization take turns, so two can never take the same name.
    await lockFor(tx, `berth:sandbox-names:${actor.orgId}`);
    const taken = new Set(
      (await tx.sandbox.findMany({ where: { orgId: actor.orgId, removed: null, name: { startsWith: base } }, select: { name: true } })).map(
        (s) => s.name,
      ),
    );
    let name = base;
    if (taken.has(name) && explicit) {
      throw new ConflictError(`a sandbox named ${name} already exists; remove it first or choose another name`, 'name_taken');
    }
    for (let n = 2; taken.has(name); n++) name = `${base.slice(0, 62 - String(n).length).replace(/-+$/, '')}-${n}`;
    await tx.sandbox.create({ data: { id, orgId: actor.orgId, name, createdBy: actor.name, owner: principalOf(actor), created: now } });
    await tx.joinKey.create({ data: { hash: hashSecret(key), sandboxId: id, expires: new Date(now.getTime() + JOIN_KEY_TTL_MS) } });
    await recordAudit(deps, tx, actor, { action: 'sandbox.register', target: { kind: 'sandbox', id }, detail: { name } });
  });
  const { sandbox } = await entry(deps, actor.orgId, id);
  return { sandbox, config: await sandboxConfig(deps, actor.orgId, id, { keyring: false }), key };
}

/**
 * Spends a join key (POST /v1/sandboxes/join, no other credential): exactly once, within its
 * hour, for a sandbox not removed. The conditional UPDATE is the race guard: of two joins with
 * one key, one updates the row and the other finds it used. An unknown key counts as a failed
 * authentication of `address` (the 429 lock). `actor`, when the caller is authenticated
 * (GraphQL), must be a member and limits the key to its organization.
 */
export async function joinSandbox(deps: Deps, input: { key?: unknown }, opts: { address: string; actor?: Actor }) {
  if (opts.actor) requireMember(opts.actor);
  const key = input.key;
  if (typeof key !== 'string' || key.trim() === '')
    throw new ValidationError('key: the join key from POST /v1/sandboxes is required', 'key');
  const now = deps.clock.now();
  await assertNotBlocked(deps, opts.address, now);
  const hash = hashSecret(key.trim());
  const secret = newSecret('bsc');
  const orgId = opts.actor?.orgId ?? null;
  const joined = await deps.prisma.$transaction(async (tx) => {
    const [spent] = await tx.$queryRaw<{ id: string; orgId: string; name: string; createdBy: string }[]>`
      UPDATE "JoinKey" k SET used = ${now}
        FROM "Sandbox" s
       WHERE k.hash = ${hash} AND k.used IS NULL AND k.expires > ${now}
         AND s.id = k."sandboxId" AND s.removed IS NULL AND (${orgId}::text IS NULL OR s."orgId" = ${orgId}::text)
      RETURNING s.id, s."orgId", s.name, s."createdBy"`;
    if (!spent) {
      const [row] = await tx.$queryRaw<{ used: Date | null; expires: Date; removed: Date | null; orgId: string; id: string }[]>`
        SELECT k.used, k.expires, s.removed, s."orgId", s.id FROM "JoinKey" k JOIN "Sandbox" s ON s.id = k."sandboxId" WHERE k.hash = ${hash}`;
      if (!row || (orgId && row.orgId !== orgId)) return undefined;
      if (row.removed) throw new GoneError(`sandbox ${row.id} was removed`, 'sandbox_removed');
      if (row.used) throw new ConflictError('this join key was already used; a key joins one machine once', 'key_used');
      throw new GoneError(`this join key expired at ${row.expires.toISOString()}; keys are valid for one hour`, 'key_expired');
    }
    await tx.credential.create({
      data: {
        id: newId('sbc'),
        kind: 'sandbox',
        orgId: spent.orgId,
        sandboxId: spent.id,
        name: spent.name,
        secretHash: hashSecret(secret),
        prefix: secretPrefix(secret),
        createdBy: spent.createdBy,
        created: now,
      },
    });
    await tx.sandbox.update({ where: { id: spent.id }, data: { lastSeen: now } });
    // The machine joining has no credential of its own yet: it is recorded as the sandbox it becomes.
    const who = { orgId: spent.orgId, kind: 'sandbox' as const, id: spent.id, name: spent.name, address: opts.address };
    await recordAudit(deps, tx, who, { action: 'sandbox.join', target: { kind: 'sandbox', id: spent.id } });
    return spent;
  });
  if (!joined) {
    await recordFailure(deps, opts.address, now);
    throw new UnauthorizedError('unknown join key');
  }
  const { sandbox } = await entry(deps, joined.orgId, joined.id);
  // The answer goes to the agent that just became the sandbox: its config has the keyring.
  return { sandbox, config: await sandboxConfig(deps, joined.orgId, joined.id, { keyring: true }), credential: secret };
}

/**
 * The check of the operations a sandbox's agent may call: members reach any sandbox of their
 * organization, a sandbox credential only its own (others: 403). Answers the sandbox id.
 */
export async function requireSandbox(deps: Deps, actor: Actor, ref: string): Promise<string> {
  if (actor.kind === 'sandbox') {
    const own = await deps.prisma.sandbox.findUnique({ where: { id: actor.sandboxId ?? '' }, select: { id: true, name: true } });
    if (!own || (ref !== own.id && ref !== own.name)) throw new ForbiddenError(SANDBOX_ONLY_OWN);
    return own.id;
  }
  requireMember(actor);
  const row = await findSandboxRow(deps.prisma, actor.orgId, ref);
  if (!row) throw new NotFoundError(`sandbox ${ref}`);
  return row.id;
}

async function touch(deps: Deps, actor: Actor, id: string): Promise<void> {
  if (actor.kind === 'sandbox') await deps.prisma.sandbox.update({ where: { id }, data: { lastSeen: deps.clock.now() } });
}

/** Project keys go to the sandbox's own agent only; people see the rest of the config. */
function configFor(deps: Deps, actor: Actor, id: string): Promise<SandboxConfig> {
  return sandboxConfig(deps, actor.orgId, id, { keyring: actor.kind === 'sandbox' && actor.sandboxId === id });
}

/** GET /v1/sandboxes/{id}/config: members, and the sandbox's own agent (which counts as seen). */
export async function readSandboxConfig(deps: Deps, actor: Actor, ref: string): Promise<SandboxConfig> {
  const id = await requireSandbox(deps, actor, ref);
  await touch(deps, actor, id);
  return configFor(deps, actor, id);
}

/** POST /v1/sandboxes/{id}/heartbeat: the agent says it is alive (sets lastSeen). */
export async function sandboxHeartbeat(deps: Deps, actor: Actor, ref: string): Promise<SandboxRecord> {
  const id = await requireSandbox(deps, actor, ref);
  requireSandboxAgent(actor, "only the sandbox's own credential reports that it is alive");
  await touch(deps, actor, id);
  return (await entry(deps, actor.orgId, id)).sandbox;
}

/**
 * The config now, then the whole config again every time its version grows, until the sandbox is
 * removed (that last config carries `sandbox.removed`, then the stream ends). Access is checked
 * before the stream starts, so a refusal is an error of the subscribe call itself.
 */
export async function watchSandboxConfig(deps: Deps, actor: Actor, ref: string): Promise<AsyncIterable<SandboxConfig>> {
  const id = await requireSandbox(deps, actor, ref);
  await touch(deps, actor, id);
  return new Repeater<SandboxConfig>(async (push, stop) => {
    const events = deps.events.subscribe(topics.sandboxConfig(id))[Symbol.asyncIterator]();
    // The first next() starts listening, before the first read, so no change falls in between.
    let next = events.next();
    void stop.then(() => events.return?.());
    let last = -1;
    try {
      for (;;) {
        const config = await configFor(deps, actor, id);
        if (config.version > last) {
          last = config.version;
          await push(config);
        }
        if (config.sandbox.removed) break;
        const woke = await Promise.race([next, stop.then(() => undefined)]);
        if (!woke || woke.done) break;
        next = events.next();
      }
    } finally {
      stop();
    }
  });
}

/**
 * DELETE /v1/sandboxes/{id}: sets `removed`, revokes the sandbox's credentials and refuses its
 * join keys and any new wiring. Environments still wired keep running to their own end, but
 * leave the (now empty) config. Idempotent: removing again answers the same record.
 */
export async function removeSandbox(deps: Deps, actor: Actor, ref: string): Promise<SandboxRecord> {
  requireMember(actor);
  const now = deps.clock.now();
  const removal = () =>
    deps.prisma.$transaction(async (tx) => {
      const row = await findSandboxRow(tx, actor.orgId, ref, { lock: true });
      if (!row) throw new NotFoundError(`sandbox ${ref}`);
      requireOwner(actor, row, `sandbox ${row.name}`);
      if (row.removed) return { id: row.id, changed: false };
      await tx.sandbox.update({ where: { id: row.id }, data: { removed: now, removedBy: actor.name } });
      await tx.credential.updateMany({ where: { sandboxId: row.id, kind: 'sandbox', revoked: null }, data: { revoked: now } });
      await recordAudit(deps, tx, actor, { action: 'sandbox.remove', target: { kind: 'sandbox', id: row.id }, detail: { name: row.name } });
      return { id: row.id, changed: true };
    });
  // A refusal (someone else's sandbox) rolls the transaction back and is recorded on its own.
  const { id, changed } = await checkAudited(deps, actor, { action: 'sandbox.remove', target: { kind: 'sandbox', id: ref } }, removal);
  if (changed) {
    // Its credentials were revoked: no instance may serve them from memory once this answers.
    await deps.credentials.publish({ sandbox: id });
    await notifySandboxConfig(deps, actor.orgId, id);
  }
  return (await entry(deps, actor.orgId, id)).sandbox;
}
