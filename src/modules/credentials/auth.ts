import type { Actor, Deps } from '../../app/context';
import { RateLimitedError, UnauthorizedError } from '../../kernel/errors';
import { BUILTIN_NODE_TOKEN, hashSecret } from '../../kernel/secrets';
import { noteActor } from '../../observability/requests';
import type { Prisma } from '../../platform/db';
import type { CachedCredential, CredentialCache } from './cache';

const WINDOW_MS = 60_000;
const BLOCK_MS = 60_000;

interface CredentialRow {
  id: string;
  kind: string;
  orgId: string;
  personId: string | null;
  sandboxId: string | null;
  nodeId: string | null;
  name: string;
  expires: Date | null;
  revoked: Date | null;
  lastUsed: Date | null;
  keyAdmin: boolean;
  email: string | null;
  admin: boolean | null;
  blockedUntil: Date | null;
  sandboxRemoved: Date | null;
  nodeRevoked: Date | null;
}

function retryAfter(until: Date, now: Date): RateLimitedError {
  const seconds = Math.max(1, Math.ceil((until.getTime() - now.getTime()) / 1000));
  return new RateLimitedError(`too many failed authentications from this address; retry in ${seconds}s`, seconds);
}

/**
 * Resolves `Authorization: Bearer …` to an Actor. An address whose presented credentials fail
 * more than AUTH_FAILURE_LIMIT times within a minute is answered 429 on every request for the
 * next minute (docs/api.md, "Authentication"). The lock lives in the database, so it holds across
 * restarts and instances.
 */
export async function authenticate(deps: Deps, header: string | null | undefined, address: string): Promise<Actor> {
  const now = deps.clock.now();
  const secret = parseBearer(header);
  if (secret === undefined) {
    await assertNotBlocked(deps, address, now);
    throw new UnauthorizedError('missing bearer credentials: send "Authorization: Bearer <token>"');
  }
  const hash = hashSecret(secret);
  if (secret.startsWith(BUILTIN_NODE_TOKEN)) return builtinNodeActor(deps, hash, address, now);
  const cache = deps.credentials;
  const cached = cache.get(hash, now);
  if (cached) {
    // Remembered (src/modules/credentials/cache.ts): no statement unless the address is locked.
    const until = cache.blockedUntil(address, now);
    if (until !== undefined) throw retryAfter(new Date(until), now);
    touch(deps, cached, now);
    noteActor(cached.actor);
    return withAddress(cached.actor, address);
  }
  const version = cache.snapshot();
  // One round trip on the happy path: the credential, its person and the address's lock together.
  const rows = await deps.prisma.$queryRaw<CredentialRow[]>`
    SELECT c.id, c.kind, c."orgId", c."personId", c."sandboxId", c."nodeId", c.name, c.admin AS "keyAdmin", c.expires, c.revoked, c."lastUsed",
           p.email, p.admin, s.removed AS "sandboxRemoved", r.revoked AS "nodeRevoked",
           (SELECT f."blockedUntil" FROM "AuthFailure" f WHERE f.address = ${address}) AS "blockedUntil"
      FROM "Credential" c
      LEFT JOIN "Person" p ON p.id = c."personId"
      LEFT JOIN "Sandbox" s ON s.id = c."sandboxId"
      LEFT JOIN "RemoteNode" r ON r.id = c."nodeId"
     WHERE c."secretHash" = ${hash}`;
  const row = rows[0];
  if (row?.blockedUntil && row.blockedUntil > now) {
    cache.noteBlocked(address, row.blockedUntil.getTime());
    throw retryAfter(row.blockedUntil, now);
  }
  const problem = !row
    ? 'invalid credentials'
    : row.revoked
      ? 'this credential was revoked'
      : row.expires && row.expires <= now
        ? 'this credential has expired'
        : row.sandboxRemoved
          ? 'this sandbox was removed'
          : row.nodeRevoked
            ? 'this node was removed'
            : undefined;
  if (problem || !row) {
    await recordFailure(deps, address, now);
    throw new UnauthorizedError(problem);
  }
  const kind = row.kind === 'cli' ? 'person' : row.kind === 'api' ? 'apiKey' : row.kind === 'node' ? 'node' : 'sandbox';
  const actor: Actor = Object.freeze({
    orgId: row.orgId,
    kind,
    credentialId: row.id,
    personId: row.personId ?? undefined,
    sandboxId: row.sandboxId ?? undefined,
    nodeId: row.nodeId ?? undefined,
    // An API key is an admin key when it was created as one (POST /v1/keys {admin: true}).
    admin: kind === 'person' ? row.admin === true : kind === 'apiKey' && row.keyAdmin,
    name: kind === 'person' ? (row.email ?? row.name) : row.name,
    ...(row.expires ? { expires: row.expires.getTime() } : {}),
    address,
  });
  const entry: CachedCredential = { actor, expires: row.expires?.getTime() ?? null, lastUsed: row.lastUsed?.getTime() ?? null };
  touch(deps, entry, now);
  cache.set(hash, entry, version);
  noteActor(actor);
  return actor;
}

/**
 * The built-in node's credential, made for its current process (src/modules/nodes/builtin-node.ts):
 * a node of no one organization (its environments are every organization's). Failures count as
 * any; the right one is taken even from a locked address, as the node shares loopback with every
 * local client (a proxy on this machine): 256 random bits are not guessed a minute at a time.
 */
async function builtinNodeActor(deps: Deps, hash: string, address: string, now: Date): Promise<Actor> {
  const { id } = deps.builtin;
  const node = await deps.prisma.remoteNode.findFirst({ where: { id, builtin: true, tokenHash: hash }, select: { id: true } });
  if (!node) {
    await assertNotBlocked(deps, address, now);
    await recordFailure(deps, address, now);
    throw new UnauthorizedError('invalid credentials');
  }
  return Object.freeze({ orgId: '', kind: 'node', credentialId: id, nodeId: id, admin: false, name: 'builtin', address });
}

/** The remembered actor for this request: the same credential may come from several addresses. */
function withAddress(actor: Actor, address: string): Actor {
  return actor.address === address ? actor : Object.freeze({ ...actor, address });
}

/** `lastUsed` is informational: at most one write a minute per credential, off the request's path. */
function touch(deps: Deps, entry: CachedCredential, now: Date): void {
  if (entry.lastUsed !== null && now.getTime() - entry.lastUsed <= 60_000) return;
  entry.lastUsed = now.getTime();
  deps.prisma.credential.update({ where: { id: entry.actor.credentialId }, data: { lastUsed: now } }).catch(() => undefined);
}

function parseBearer(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return match?.[1] ?? '';
}

/** The address locks in force at start, so a remembered credential is refused from a locked address. */
/**
 * Deletes the failure rows that no longer count: their window is over and no lock holds. Without
 * this, every address that ever failed once kept a row (a scan of many addresses grew the table
 * without bound).
 */
export async function pruneAuthFailures(deps: Deps): Promise<void> {
  const now = deps.clock.now();
  await deps.prisma.authFailure.deleteMany({
    where: {
      windowStart: { lte: new Date(now.getTime() - WINDOW_MS) },
      OR: [{ blockedUntil: null }, { blockedUntil: { lte: now } }],
    },
  });
}

export async function loadAddressLocks(prisma: Prisma, cache: CredentialCache, now: Date): Promise<void> {
  const locks = await prisma.authFailure.findMany({ where: { blockedUntil: { gt: now } }, select: { address: true, blockedUntil: true } });
  for (const lock of locks) if (lock.blockedUntil) cache.noteBlocked(lock.address, lock.blockedUntil.getTime());
}

export async function assertNotBlocked(deps: Deps, address: string, now: Date): Promise<void> {
  const row = await deps.prisma.authFailure.findUnique({ where: { address }, select: { blockedUntil: true } });
  if (row?.blockedUntil && row.blockedUntil > now) throw retryAfter(row.blockedUntil, now);
}

/** Counts a failure in the address's one-minute window and starts the block past the limit. */
export async function recordFailure(deps: Deps, address: string, now: Date): Promise<void> {
  const windowFloor = new Date(now.getTime() - WINDOW_MS);
  const blockUntil = new Date(now.getTime() + BLOCK_MS);
  const limit = deps.config.authFailureLimit;
  const rows = await deps.prisma.$queryRaw<{ blockedUntil: Date | null }[]>`
    INSERT INTO "AuthFailure" (address, "windowStart", failures, "blockedUntil")
    VALUES (${address}, ${now}, 1, ${limit < 1 ? blockUntil : null})
    ON CONFLICT (address) DO UPDATE SET
      "windowStart" = CASE WHEN "AuthFailure"."windowStart" <= ${windowFloor} THEN ${now} ELSE "AuthFailure"."windowStart" END,
      failures = CASE WHEN "AuthFailure"."windowStart" <= ${windowFloor} THEN 1 ELSE "AuthFailure".failures + 1 END,
      "blockedUntil" = CASE
        WHEN "AuthFailure"."blockedUntil" > ${now} THEN "AuthFailure"."blockedUntil"
        WHEN (CASE WHEN "AuthFailure"."windowStart" <= ${windowFloor} THEN 1 ELSE "AuthFailure".failures + 1 END) > ${limit}
          THEN ${blockUntil}
        ELSE "AuthFailure"."blockedUntil" END
    RETURNING "blockedUntil"`;
  const until = rows[0]?.blockedUntil;
  if (until && until > now) {
    // Every instance refuses the address from now on, also for credentials it remembers.
    if (deps.credentials.blockedUntil(address, now) !== until.getTime()) {
      await deps.credentials.publish({ blocked: { address, until: until.getTime() } });
    }
    throw retryAfter(until, now);
  }
}
