// Preview URLs (docs/environments.md, "Preview URLs"): a signed, expiring link to one port inside
// a ready environment, at its own host `<port>-<environment name>.<PREVIEW_DOMAIN>`, which the
// preview proxy (src/edges/channels/preview-proxy.ts) routes to that port over the node's relay.
//
// The link is stateless: an HS256 JWT (the organization, the environment, the port, its expiry)
// under a key of its own, derived like the artifact links' (LINK_SECRET, else the master key), so
// a preview token is never an artifact link nor the other way round. Whoever holds the link holds
// the preview until it expires or the environment ends; the link sets a cookie for its host only.
import { hkdfSync } from 'node:crypto';
import type { Actor, Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import { requireMember, requireOwner } from '../../kernel/access';
import { DAY_MS, formatDuration, HOUR_MS, parseDuration, SECOND_MS } from '../../kernel/durations';
import { ConflictError, ForbiddenError, GoneError, NotFoundError, UnauthorizedError, ValidationError } from '../../kernel/errors';
import { signToken, verifyToken } from '../../kernel/signed-tokens';
import type { PreviewJob } from '../../protocol/relay';
import { checkAudited, recordAudit } from '../audit';
import { findEnvironment } from './service';

/** The path of a preview host that turns the link's token into the cookie, then redirects to `/`. */
export const PREVIEW_LINK_PATH = '/__berth/preview';
/** The cookie a preview host keeps its token in (HttpOnly, host-only). */
export const PREVIEW_COOKIE = 'berth_preview';
export const DEFAULT_PREVIEW_MS = HOUR_MS;
export const MAX_PREVIEW_MS = DAY_MS;
const MIN_PREVIEW_MS = SECOND_MS;
const AUDIENCE = 'berth.preview';

export interface Preview {
  url: string;
  port: number;
  expires: Date;
}

export interface PreviewInput {
  port: number;
  expiresIn?: string | null;
}

/** HS256 key of preview tokens: from LINK_SECRET or the master key, not the artifact links' own key. */
function previewKey(deps: Deps): Uint8Array {
  const secret = deps.config.linkSecret ? Buffer.from(deps.config.linkSecret, 'utf8') : deps.masterKey;
  return new Uint8Array(hkdfSync('sha256', secret, Buffer.alloc(0), 'berth.preview.v1', 32));
}

/** The domain of preview hosts, or 409 naming the setting. */
function previewDomain(deps: Deps): string {
  const domain = deps.config.previewDomain;
  if (!domain) {
    throw new ConflictError(
      'preview URLs are off on this server: the operator sets PREVIEW_DOMAIN (for example preview.localhost, or a wildcard DNS name in front of Berth) to turn them on',
    );
  }
  return domain;
}

/** `<port>-<name>.<domain>` with PUBLIC_URL's scheme and port. */
export function previewOrigin(deps: Deps, port: number, name: string): string {
  const base = new URL(deps.config.publicUrl ?? `http://${deps.config.host}:${deps.config.port}`);
  return `${base.protocol}//${port}-${name}.${previewDomain(deps)}${base.port ? `:${base.port}` : ''}`;
}

function validPort(port: unknown): number {
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65_535) {
    throw new ValidationError('port: must be a whole number from 1 to 65535', 'port');
  }
  return port;
}

function lifetime(expiresIn: string | null | undefined): number {
  if (expiresIn === undefined || expiresIn === null) return DEFAULT_PREVIEW_MS;
  const ms = parseDuration(expiresIn, 'expiresIn');
  if (ms < MIN_PREVIEW_MS || ms > MAX_PREVIEW_MS) {
    throw new ValidationError(`expiresIn: must be from 1s to ${formatDuration(MAX_PREVIEW_MS)}`, 'expiresIn');
  }
  return ms;
}

/**
 * A preview URL of `port` inside the environment: its owner, admins and API keys (as exec), a
 * ready environment only; it lasts `expiresIn` (default 1h, at most 24h) or until the lease's hard
 * end, whichever comes first.
 */
export async function createPreview(deps: Deps, actor: Actor, envRef: string, input: PreviewInput): Promise<Preview> {
  requireMember(actor);
  const domain = previewDomain(deps);
  const env = await findEnvironment(deps, actor, envRef);
  await checkAudited(deps, actor, { action: 'preview.create', target: { kind: 'environment', id: env.id } }, () =>
    requireOwner(actor, env, `environment ${env.name}`),
  );
  const port = validPort(input.port);
  const ms = lifetime(input.expiresIn);
  requireReady(env);
  const now = deps.clock.now().getTime();
  const { token, expires } = await signToken(previewKey(deps), {
    audience: AUDIENCE,
    subject: env.id,
    claims: { org: env.orgId, port },
    now,
    until: Math.min(now + ms, env.expires.getTime()),
  });
  // A preview stores nothing, but it opens a port of the environment to whoever holds the link: on record.
  await recordAudit(deps, deps.prisma, actor, {
    action: 'preview.create',
    target: { kind: 'environment', id: env.id },
    detail: { port, expires: expires.toISOString(), domain },
  });
  return { url: `${previewOrigin(deps, port, env.name)}${PREVIEW_LINK_PATH}?token=${token}`, port, expires };
}

/** Ready only: before, nothing listens yet; after, the preview ended with its environment. */
function requireReady(env: Environment): void {
  if (env.state === 'ready') return;
  if (['stopping', 'stopped', 'failed'].includes(env.state)) {
    throw new GoneError(`environment ${env.name} has ended (${env.state}); its previews ended with it`);
  }
  throw new ConflictError(`environment ${env.name} is ${env.state}; previews reach ready environments`, 'invalid_transition');
}

/** A preview host's parts: `<port>-<environment name>`. */
export interface PreviewHost {
  port: number;
  name: string;
}

/**
 * The preview a Host header names, `undefined` when it is not under PREVIEW_DOMAIN (the API's own
 * host), or `null` when it is under it but names no preview.
 */
export function parsePreviewHost(deps: Pick<Deps, 'config'>, host: string | undefined): PreviewHost | null | undefined {
  const domain = deps.config.previewDomain;
  if (!domain || !host) return undefined;
  const name = host.toLowerCase().replace(/:\d*$/, '').replace(/\.$/, '');
  if (name !== domain && !name.endsWith(`.${domain}`)) return undefined;
  const m = /^(\d{1,5})-([a-z0-9][a-z0-9-]{0,62})$/.exec(name.slice(0, -domain.length - 1));
  if (!m) return null;
  const port = Number(m[1]);
  if (port < 1 || port > 65_535 || m[1]!.startsWith('0')) return null;
  return { port, name: m[2]! };
}

/** Who opens a preview: its token (the link, the cookie, a bearer), or a Berth credential's actor. */
export type PreviewCredential = { token: string } | { actor: Actor };

export interface PreviewTarget {
  env: Environment;
  job: PreviewJob;
  /** When the token expires (a token's only). */
  expires?: Date;
}

/**
 * What a request to a preview host may reach: 401 without a valid token, 403 for an expired one
 * (or one of another preview of the organization), 404 for a credential of another organization,
 * 410 once the environment ended, 409 before it is ready.
 */
export async function authorizePreview(deps: Deps, host: PreviewHost, credential: PreviewCredential): Promise<PreviewTarget> {
  const hostName = `${host.port}-${host.name}`;
  let expires: Date | undefined;
  let env: Environment | null;
  if ('token' in credential) {
    const claims = await previewClaims(deps, credential.token);
    expires = claims.expires;
    env = await deps.prisma.environment.findUnique({ where: { name: host.name } });
    if (!env || env.orgId !== claims.org) throw new NotFoundError(`preview ${hostName}`);
    if (env.id !== claims.env || claims.port !== host.port) {
      throw new ForbiddenError(`this preview link is for another preview, not ${hostName}; ask its owner for a link to it`);
    }
  } else {
    const { actor } = credential;
    env = await findEnvironment(deps, actor, host.name).catch((error: unknown) => {
      if (error instanceof NotFoundError) throw new NotFoundError(`preview ${hostName}`);
      throw error;
    });
    requireOwner(actor, env, `environment ${env.name}`);
  }
  requireReady(env);
  if (!env.nodeId) throw new ConflictError(`environment ${env.name} is on no node`, 'no_runtime');
  return { env, job: { kind: 'preview', environment: env.id, port: host.port }, expires };
}

async function previewClaims(deps: Deps, token: string): Promise<{ org: string; env: string; port: number; expires: Date }> {
  const payload = await verifyToken(previewKey(deps), token, AUDIENCE, deps.clock.now());
  if (payload === 'expired') throw new ForbiddenError('this preview link has expired; ask for a new one (berth preview)');
  if (payload !== 'invalid') {
    const { org, port, sub, exp } = payload;
    if (typeof org === 'string' && typeof port === 'number') return { org, env: sub, port, expires: new Date(exp * 1000) };
  }
  throw new UnauthorizedError('this preview link is not valid: it was altered or not issued by this server');
}
