import { map } from 'graphql-yoga';
import { z } from 'zod';
import type { Actor, Deps } from '../../app/context';
import { requireAdmin, requireMember } from '../../kernel/access';
import { parseDuration } from '../../kernel/durations';
import { ConflictError, ForbiddenError, NotFoundError, ValidationError } from '../../kernel/errors';
import { displayNameProblem, validateDisplayName } from '../../kernel/labels';
import { newId } from '../../kernel/names';
import { hashSecret, newSecret, secretPrefix } from '../../kernel/secrets';
import { show } from '../../kernel/show';
import { lockFor, type Prisma } from '../../platform/db';
import { topics } from '../../platform/events';
import { checkAudited, recordAudit } from '../audit';

const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,190}$/;
const NAME_MAX = 100;

export interface NewTokenInput {
  email?: string | null;
  name?: string | null;
  expiresIn?: string | null;
  admin?: boolean | null;
}

export interface NewKeyInput {
  name: string;
  expiresIn?: string | null;
  admin?: boolean | null;
}

export function normalizeEmail(email: string): string {
  const value = email.trim().toLowerCase();
  if (!EMAIL.test(value) || displayNameProblem(value)) throw new ValidationError(`email: ${show(email)} is not an email address`, 'email');
  return value;
}

function credentialName(name: string | null | undefined, fallback: string): string {
  const value = (name ?? '').trim() || fallback;
  if (value.length > NAME_MAX) throw new ValidationError(`name: longer than ${NAME_MAX} characters`, 'name');
  return validateDisplayName(value, 'name');
}

function expiryFrom(deps: Deps, expiresIn: string | null | undefined): Date | null {
  if (expiresIn === undefined || expiresIn === null) return null;
  const ms = parseDuration(expiresIn, 'expiresIn');
  if (ms <= 0) throw new ValidationError('expiresIn must be a positive duration', 'expiresIn');
  return new Date(deps.clock.now().getTime() + ms);
}

/** GET /v1/me: who the credential acts as (its organization's members only). */
export function viewer(actor: Actor): Actor {
  requireMember(actor);
  return actor;
}

/** Issues a CLI token inside one transaction; shared by the API, bootstrap and the operator CLI. */
export async function issueCliToken(
  prisma: Prisma,
  person: { id: string; orgId: string },
  opts: { name: string; createdBy: string; expires: Date | null; secret?: string },
) {
  const secret = opts.secret ?? newSecret('bct');
  const credential = await prisma.credential.create({
    data: {
      id: newId('tok'),
      kind: 'cli',
      orgId: person.orgId,
      personId: person.id,
      name: opts.name,
      secretHash: hashSecret(secret),
      prefix: secretPrefix(secret),
      createdBy: opts.createdBy,
      expires: opts.expires,
    },
    include: { person: true },
  });
  return { secret, credential };
}

/**
 * POST /v1/tokens: a person makes a token for themself; an admin (person or admin API key) makes
 * one for any member of the organization, adding the member when the email is new.
 */
export async function createCliToken(deps: Deps, actor: Actor, input: NewTokenInput) {
  requireMember(actor);
  const expires = expiryFrom(deps, input.expiresIn);
  const name = credentialName(input.name, 'cli');
  const self = actor.kind === 'person' ? await deps.prisma.person.findUniqueOrThrow({ where: { id: actor.personId } }) : null;
  const email = input.email ? normalizeEmail(input.email) : self?.email;
  if (!email) throw new ValidationError('email is required when an API key creates a token', 'email');
  // A member reaching for someone else's access or for admin rights: on record, as the member it was for.
  await checkAudited(deps, actor, { action: 'token.create', target: { kind: 'person', id: email } }, () => {
    if (email !== self?.email && !actor.admin) throw new ForbiddenError('only admins can create tokens for other members');
    if (input.admin && !actor.admin) throw new ForbiddenError('only admins can make admins');
  });
  const created = await deps.prisma.$transaction(async (tx) => {
    let person = await tx.person.findUnique({ where: { orgId_email: { orgId: actor.orgId, email } } });
    if (!person) {
      person = await tx.person.create({ data: { id: newId('usr'), orgId: actor.orgId, email, admin: input.admin === true } });
    } else if (input.admin !== undefined && input.admin !== null && input.admin !== person.admin) {
      throw new ConflictError(`${email} is already a member with admin=${person.admin}; a token does not change that`);
    }
    const issued = await issueCliToken(tx as Prisma, person, { name, createdBy: actor.name, expires });
    await recordAudit(deps, tx, actor, {
      action: 'token.create',
      target: { kind: 'token', id: issued.credential.id },
      detail: { email, name, admin: person.admin },
    });
    return issued;
  });
  await announce(deps, actor.orgId, 'token', 'created', created.credential.id);
  return created;
}

/**
 * POST /v1/keys (admins only). Things a key creates show its name as `createdBy`, so names of
 * live keys (not revoked, not expired) are unique in the organization: 409 name_taken. Creations
 * of one organization take turns on a lock, so two racing creates cannot both take a name.
 */
export async function createApiKey(deps: Deps, actor: Actor, input: NewKeyInput) {
  await checkAudited(deps, actor, { action: 'key.create', target: { kind: 'key', id: String(input.name).slice(0, 100) } }, () =>
    requireAdmin(actor, 'only admins can create API keys'),
  );
  const name = credentialName(input.name, '');
  if (!name) throw new ValidationError('name is required', 'name');
  const expires = expiryFrom(deps, input.expiresIn);
  const secret = newSecret('bak');
  const credential = await deps.prisma.$transaction(async (tx) => {
    await lockFor(tx, `berth:api-key-names:${actor.orgId}`);
    const now = deps.clock.now();
    const taken = await tx.credential.count({
      where: { orgId: actor.orgId, kind: 'api', name, revoked: null, OR: [{ expires: null }, { expires: { gt: now } }] },
    });
    if (taken > 0) {
      throw new ConflictError(`an API key named ${JSON.stringify(name)} already exists; revoke it or choose another name`, 'name_taken');
    }
    const created = await tx.credential.create({
      data: {
        id: newId('key'),
        kind: 'api',
        orgId: actor.orgId,
        name,
        admin: input.admin === true,
        secretHash: hashSecret(secret),
        prefix: secretPrefix(secret),
        createdBy: actor.name,
        expires,
      },
    });
    await recordAudit(deps, tx, actor, {
      action: 'key.create',
      target: { kind: 'key', id: created.id },
      detail: { name, admin: created.admin },
    });
    return created;
  });
  await announce(deps, actor.orgId, 'key', 'created', credential.id);
  return { secret, credential };
}

/** Every creation and revocation of the organization's tokens and keys (admins only). */
export function watchCredentials(deps: Deps, actor: Actor): AsyncIterable<CredentialEvent> {
  requireAdmin(actor, 'only admins can watch tokens and keys');
  return map((event) => CredentialEvent.parse(event))(deps.events.subscribe(topics.credentials(actor.orgId)));
}

const CredentialEvent = z.object({ kind: z.enum(['token', 'key']), action: z.enum(['created', 'revoked']), id: z.string() });
export type CredentialEvent = z.infer<typeof CredentialEvent>;

function announce(deps: Deps, orgId: string, kind: CredentialEvent['kind'], action: CredentialEvent['action'], id: string) {
  const event: CredentialEvent = { kind, action, id };
  return deps.events.publish(topics.credentials(orgId), event);
}

/** Admins see every token of the organization; others their own. */
export function tokenFilter(actor: Actor) {
  requireMember(actor);
  return actor.admin ? { orgId: actor.orgId, kind: 'cli' } : { orgId: actor.orgId, kind: 'cli', personId: actor.personId ?? '-' };
}

export function keyFilter(actor: Actor) {
  requireAdmin(actor, 'only admins can list or revoke API keys');
  return { orgId: actor.orgId, kind: 'api' };
}

/** Revokes a token or key; revoking again is a no-op that returns the same record. */
export async function revokeCredential(deps: Deps, actor: Actor, kind: 'cli' | 'api', id: string) {
  const action = kind === 'cli' ? 'token.revoke' : 'key.revoke';
  const target = { kind: kind === 'cli' ? 'token' : 'key', id };
  const where = await checkAudited(deps, actor, { action, target }, () => (kind === 'cli' ? tokenFilter(actor) : keyFilter(actor)));
  const found = await deps.prisma.credential.findFirst({ where: { ...where, id } });
  if (!found) {
    // Another member's token answers 404 like a missing one, but the attempt is on record.
    const theirs = await deps.prisma.credential.count({ where: { orgId: actor.orgId, kind, id } });
    if (theirs > 0) await recordAudit(deps, deps.prisma, actor, { action, target, outcome: 'denied' });
    throw new NotFoundError(kind === 'cli' ? `token ${id}` : `key ${id}`);
  }
  if (found.revoked) return found;
  const revoked = await deps.prisma.$transaction(async (tx) => {
    const row = await tx.credential.update({ where: { id }, data: { revoked: deps.clock.now() } });
    await recordAudit(deps, tx, actor, { action, target, detail: { name: row.name } });
    return row;
  });
  // No instance may serve it from memory once this answers (src/modules/credentials/cache.ts).
  await deps.credentials.publish({ credentials: [id] });
  await announce(deps, actor.orgId, kind === 'cli' ? 'token' : 'key', 'revoked', id);
  return revoked;
}
