// Artifacts: files up to 2 GiB, streamed in, cut into chunks sealed under the project's data key
// and packed into the blob store (src/platform/store/pack.ts); signed links; retention and the sweeper.
//
// Lifecycle of a record (`status`):
//   uploading  written before the first byte is stored, so a crash mid-upload leaves a row the
//              sweeper finds; `expires` is then a liveness deadline the upload keeps pushing forward
//   stored     every object is stored; the only state the API ever shows
//   deleting   DELETE made it invisible; objects then row go, or the sweeper finishes the job
// The sweeper removes every row whose `expires` has passed, whatever its status, objects first.
//
// Artifact ids are capabilities only together with the organization: every lookup filters on the
// caller's organization, so another organization's ids behave exactly like unknown ones.
import { hkdfSync } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { Actor, Deps } from '../../app/context';
import type { Artifact, Prisma } from '../../generated/prisma/client';
import { principalOf, requireMember, requireOwner } from '../../kernel/access';
import type { BackgroundJob } from '../../kernel/background';
import { DAY_MS, HOUR_MS, MINUTE_MS, parseDurationMax, SECOND_MS } from '../../kernel/durations';
import { DomainError, GoneError, NotFoundError, PayloadTooLargeError, UnavailableError, ValidationError } from '../../kernel/errors';
import { SWEEPER_JOB } from '../../kernel/job-names';
import { parseLabelPairs, validateDisplayName, validateProjectName } from '../../kernel/labels';
import { isId, newId } from '../../kernel/names';
import { type Page, type PageArgs, pageOf, pageQuery } from '../../kernel/paging';
import { currentKey, DEFAULT_PROJECT, keyByVersion } from '../../kernel/project-keys';
import { show } from '../../kernel/show';
import { signToken, verifyToken } from '../../kernel/signed-tokens';
import { SealError } from '../../platform/crypto/seal';
import { lockFor } from '../../platform/db';
import { BlobNotFoundError } from '../../platform/store';
import { deletePacked, type PackSegment, packStream, TooLargeError, type UnpackResult, unpackStream } from '../../platform/store/pack';
import { checkAudited, recordAudit } from '../audit';
import { admitStorage, StorageQuotaError, storageRoom } from '../organizations';
import { artifactData, emitWebhookEvent, nudgeWebhooks } from '../webhooks';

export const MAX_RETENTION_MS = 30 * DAY_MS;
export const DEFAULT_RETENTION_MS = 7 * DAY_MS;
export const MAX_LINK_LIFETIME_MS = 30 * DAY_MS;
export const DEFAULT_LINK_LIFETIME_MS = DAY_MS;
export const MAX_NAME_LENGTH = 255;
export const DEFAULT_CONTENT_TYPE = 'application/octet-stream';
/** An `uploading` row whose upload has not reported for this long is abandoned (its process died). */
export const UPLOAD_STALE_MS = HOUR_MS;
const UPLOAD_HEARTBEAT_MS = 5 * MINUTE_MS;
const LINK_AUDIENCE = 'berth:artifact-link';

export type ArtifactRecord = Artifact;

export interface ArtifactLink {
  url: string;
  expires: Date;
}

/** The upload's parameters as the client sent them (query parameters, headers). */
export interface UploadParams {
  name?: string;
  project?: string;
  retention?: string;
  /** `key=value` pairs. */
  labels?: readonly string[];
  /** Lifetime of a signed link to make as well. */
  link?: string;
  contentType?: string;
  /** Content-Length, when the client declared one. */
  declaredSize?: number;
}

export interface UploadInput extends UploadParams {
  body: Readable;
  /** Aborts the upload (the client went away); everything written is removed. */
  signal?: AbortSignal;
}

/** Stored bytes failed authentication or are missing: never served, reported as such. */
export class IntegrityError extends DomainError {
  constructor(id: string, options?: { cause?: unknown }) {
    super(`artifact ${id} failed its integrity check; its stored objects are damaged or missing`, 'integrity');
    if (options?.cause) this.cause = options.cause;
  }
}

export class UnsupportedMediaTypeError extends DomainError {
  constructor(message: string) {
    super(message, 'unsupported_media_type');
  }
}

// ---------------------------------------------------------------------------------------------
// Validation

// type "/" subtype, then parameters without control characters (the value is echoed as a header).
const MEDIA_TYPE = /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}(?:\s*;[\x20-\x7e]*)?$/;
const FORM_TYPES = ['multipart/form-data', 'application/x-www-form-urlencoded'];

function validateArtifactName(value: string): string {
  const length = [...value].length;
  if (length === 0 || value.trim() === '') throw new ValidationError('name: must not be empty', 'name');
  if (length > MAX_NAME_LENGTH) throw new ValidationError(`name: at most ${MAX_NAME_LENGTH} characters (got ${length})`, 'name');
  return validateDisplayName(value, 'name');
}

function validateContentType(value: string | undefined): string {
  if (value === undefined || value.trim() === '') return DEFAULT_CONTENT_TYPE;
  const type = value.trim();
  const bare = type.split(';')[0]!.trim().toLowerCase();
  if (FORM_TYPES.includes(bare)) {
    throw new UnsupportedMediaTypeError(
      `the body must be the file's raw bytes, not ${bare}; send Content-Type: application/octet-stream (or the file's own type)`,
    );
  }
  if (type.length > 255 || !MEDIA_TYPE.test(type)) {
    throw new ValidationError(`Content-Type ${show(type)} is not a media type such as application/octet-stream`, 'contentType');
  }
  return type;
}

function lifetimeMs(text: string, field: string): number {
  const ms = parseDurationMax(text, field, MAX_LINK_LIFETIME_MS, '30d');
  // A link's expiry is a JWT `exp`, in whole seconds.
  if (ms < SECOND_MS) throw new ValidationError(`${field}: must be at least 1s`, field);
  return ms;
}

interface CheckedUpload {
  name?: string;
  project: string;
  retentionMs: number;
  labels: Record<string, string>;
  linkMs?: number;
  contentType: string;
}

/** Checks everything about an upload that can be checked before reading its body. */
function checkUpload(deps: Deps, params: UploadParams): CheckedUpload {
  const name = params.name === undefined ? undefined : validateArtifactName(params.name);
  const project = params.project ? validateProjectName(params.project) : DEFAULT_PROJECT;
  const retentionMs =
    params.retention === undefined ? DEFAULT_RETENTION_MS : parseDurationMax(params.retention, 'retention', MAX_RETENTION_MS, '30d');
  if (retentionMs <= 0) throw new ValidationError('retention: must be a positive duration', 'retention');
  const labels = parseLabelPairs(params.labels ?? [], 'label');
  const linkMs = params.link === undefined ? undefined : lifetimeMs(params.link, 'link');
  const contentType = validateContentType(params.contentType);
  const max = deps.config.artifactMaxBytes;
  if (params.declaredSize !== undefined && params.declaredSize > max) {
    throw new PayloadTooLargeError(`the body is ${params.declaredSize} bytes; artifacts are limited to ${max} bytes`);
  }
  return { name, project, retentionMs, labels, linkMs, contentType };
}

// ---------------------------------------------------------------------------------------------
// Reading

function visible(orgId: string, now: Date): Prisma.ArtifactWhereInput {
  return { orgId, status: 'stored', expires: { gt: now } };
}

/** Object prefix of an artifact in the blob store (ids and validated project names only). */
export function artifactPrefix(a: Pick<Artifact, 'orgId' | 'project' | 'id'>): string {
  return `artifacts/${a.orgId}/${a.project}/${a.id}`;
}

async function findVisible(deps: Deps, orgId: string, id: string): Promise<Artifact> {
  const found = isId(id, 'art') ? await deps.prisma.artifact.findFirst({ where: { id, ...visible(orgId, deps.clock.now()) } }) : null;
  if (!found) throw new NotFoundError(`artifact ${id}`);
  return found;
}

/** A stored, unexpired artifact of the caller's organization; NotFoundError otherwise. */
export async function getArtifact(deps: Deps, actor: Actor, id: string): Promise<Artifact> {
  requireMember(actor);
  return findVisible(deps, actor.orgId, id);
}

export interface ListInput extends PageArgs {
  project?: string | null;
  name?: string | null;
  labels?: readonly string[] | null;
}

/** A page of the organization's artifacts, newest first (src/kernel/paging.ts). */
export async function listArtifacts(deps: Deps, actor: Actor, input: ListInput): Promise<Page<Artifact>> {
  requireMember(actor);
  const page = pageQuery(input, 'art');
  const where: Prisma.ArtifactWhereInput = visible(actor.orgId, deps.clock.now());
  if (input.project) where.project = validateProjectName(input.project);
  if (input.name) where.name = input.name;
  const labels = parseLabelPairs(input.labels ?? [], 'label');
  const and: Prisma.ArtifactWhereInput[] = Object.entries(labels).map(([key, value]) => ({ labels: { path: [key], equals: value } }));
  const rows = await deps.prisma.artifact.findMany({
    where: { ...where, AND: [...and, page.where] },
    orderBy: page.orderBy,
    take: page.take,
  });
  return pageOf(rows, page.size);
}

// ---------------------------------------------------------------------------------------------
// Storing

/** Uploads one member (all their tokens) or one API key may have in flight at once. */
export const MAX_UPLOADS_IN_FLIGHT = 8;

/**
 * Streams `input.body` into the blob store as a new artifact. The record becomes visible only
 * once every object is stored; on any failure (too large, client gone, store error) the objects
 * and the record are removed before this rejects.
 */
export async function storeArtifact(deps: Deps, actor: Actor, input: UploadInput): Promise<{ artifact: Artifact; link?: ArtifactLink }> {
  requireMember(actor);
  const checked = checkUpload(deps, input);
  const { version, key } = await currentKey(deps, actor.orgId, checked.project);
  const id = newId('art');
  const base = { id, orgId: actor.orgId, project: checked.project };
  const prefix = artifactPrefix(base);
  const deadline = () => new Date(deps.clock.now().getTime() + UPLOAD_STALE_MS);
  const owner = principalOf(actor);
  // What the organization may still store bounds the body; the recording checks again, in turn.
  const { room, limit } = await storageRoom(deps, actor.orgId);
  if (room === 0 || (input.declaredSize !== undefined && input.declaredSize > room)) {
    throw new StorageQuotaError('this artifact', limit);
  }
  const maxBytes = Math.min(deps.config.artifactMaxBytes, room);
  await deps.prisma.$transaction(async (tx) => {
    // Each upload holds a connection, a packer and its buffers: a bounded number per member or
    // key, counted in the database so it holds across instances (a crashed one's rows go stale).
    await lockFor(tx, `berth:uploads:${owner}`);
    const [{ n }] = await tx.$queryRaw<{ n: number }[]>`
      SELECT count(*)::int AS n FROM "Artifact"
       WHERE "orgId" = ${actor.orgId} AND owner = ${owner} AND status = 'uploading' AND expires > ${deps.clock.now()}`;
    if (n >= MAX_UPLOADS_IN_FLIGHT) {
      throw new DomainError(
        `at most ${MAX_UPLOADS_IN_FLIGHT} uploads at once per member or API key: wait for one to finish`,
        'too_many_uploads',
      );
    }
    await tx.artifact.create({
      data: {
        ...base,
        name: checked.name ?? id,
        size: 0n,
        sha256: '',
        contentType: checked.contentType,
        labels: checked.labels,
        keyVersion: version,
        manifest: '',
        chunks: 0,
        sealedBytes: 0n,
        createdBy: actor.name,
        owner,
        created: deps.clock.now(),
        expires: deadline(),
        status: 'uploading',
      },
    });
  });
  // Keeps the row alive while this process is still receiving it; a crash stops the heartbeat and
  // the sweeper collects the row and whatever objects it had written an hour later.
  const heartbeat = setInterval(() => {
    deps.prisma.artifact.updateMany({ where: { id, status: 'uploading' }, data: { expires: deadline() } }).catch(() => {});
  }, UPLOAD_HEARTBEAT_MS);
  heartbeat.unref();

  let packed: Awaited<ReturnType<typeof packStream>>;
  try {
    packed = await packStream({
      store: deps.store,
      prefix,
      objectId: id,
      key,
      keyVersion: version,
      source: input.body,
      chunkSize: deps.config.artifactChunkSize,
      segmentSize: deps.config.artifactSegmentSize,
      maxBytes,
      signal: input.signal,
      // The caller answers 413 on the same request before closing it.
      keepSourceOpen: true,
    });
  } catch (err) {
    await deps.prisma.artifact.deleteMany({ where: { id } });
    if (err instanceof TooLargeError && maxBytes < deps.config.artifactMaxBytes) throw new StorageQuotaError('this artifact', limit);
    if (err instanceof TooLargeError) throw new PayloadTooLargeError(`the body exceeds the limit of ${err.limit} bytes for artifacts`);
    throw err;
  } finally {
    clearInterval(heartbeat);
  }

  const now = deps.clock.now();
  const segments: PackSegment[] = packed.segments;
  let count: number;
  let hooked = false;
  try {
    ({ count } = await deps.prisma.$transaction(async (tx) => {
      await admitStorage(deps, tx, actor.orgId, packed.sealedBytes, 'this artifact');
      const stored = await tx.artifact.updateMany({
        where: { id, status: 'uploading' },
        data: {
          status: 'stored',
          size: BigInt(packed.size),
          sha256: packed.sha256,
          manifest: packed.manifest,
          segments: segments.map((s) => ({ name: s.name, size: s.size, objects: s.objects })),
          chunks: packed.chunks,
          sealedBytes: BigInt(packed.sealedBytes),
          created: now,
          expires: new Date(now.getTime() + checked.retentionMs),
        },
      });
      if (stored.count > 0) {
        const row = await tx.artifact.findUniqueOrThrow({ where: { id } });
        hooked = await emitWebhookEvent(tx, actor.orgId, 'artifact.created', artifactData(row), now);
        await recordAudit(deps, tx, actor, {
          action: 'artifact.create',
          target: { kind: 'artifact', id },
          detail: { name: row.name, project: row.project, size: packed.size },
        });
      }
      return stored;
    }));
  } catch (err) {
    await deletePacked(deps.store, prefix).catch(() => undefined);
    await deps.prisma.artifact.deleteMany({ where: { id } });
    throw err;
  }
  if (count === 0) {
    // The sweeper took the row for abandoned (this process stalled past the deadline).
    await deletePacked(deps.store, prefix);
    throw new UnavailableError('the upload took too long to complete and was discarded; try again');
  }
  deps.metrics.artifactBytes.inc({ direction: 'upload' }, packed.size);
  nudgeWebhooks(deps, hooked);
  const artifact = await deps.prisma.artifact.findUniqueOrThrow({ where: { id } });
  const link = checked.linkMs === undefined ? undefined : await signLink(deps, artifact, checked.linkMs);
  return { artifact, link };
}

// ---------------------------------------------------------------------------------------------
// Downloading

/**
 * Opens the plain bytes of a stored artifact (or an inclusive range of them). Resolves once the
 * manifest is authenticated; every chunk is authenticated before its bytes reach the stream, and
 * a damaged chunk makes the stream fail instead.
 */
export async function openArtifact(deps: Deps, artifact: Artifact, range?: { start: number; end: number }): Promise<UnpackResult> {
  const key = await keyByVersion(deps, artifact.orgId, artifact.project, artifact.keyVersion);
  try {
    return await unpackStream({ store: deps.store, manifest: artifact.manifest, objectId: artifact.id, key, range });
  } catch (err) {
    throw asIntegrityError(artifact.id, err);
  }
}

/** Stored bytes that fail authentication or are missing become an IntegrityError; others pass. */
export function asIntegrityError(id: string, err: unknown): unknown {
  return err instanceof SealError || err instanceof BlobNotFoundError ? new IntegrityError(id, { cause: err }) : err;
}

// ---------------------------------------------------------------------------------------------
// Signed links

/** HS256 key of signed links: LINK_SECRET, or one derived from the master key. */
function linkKey(deps: Deps): Uint8Array {
  if (deps.config.linkSecret) return Buffer.from(deps.config.linkSecret, 'utf8');
  return new Uint8Array(hkdfSync('sha256', deps.masterKey, Buffer.alloc(0), 'berth.link.v1', 32));
}

function baseUrl(deps: Deps): string {
  return (deps.config.publicUrl ?? `http://${deps.config.host}:${deps.config.port}`).replace(/\/+$/, '');
}

/**
 * A JWT naming the artifact, its organization and the link epoch, valid until `lifetimeMs` from
 * now or the artifact's own expiry, whichever comes first.
 */
async function signLink(deps: Deps, artifact: Artifact, lifetimeMs: number): Promise<ArtifactLink> {
  const now = deps.clock.now().getTime();
  const { token, expires } = await signToken(linkKey(deps), {
    audience: LINK_AUDIENCE,
    subject: artifact.id,
    claims: { org: artifact.orgId, epoch: artifact.linkEpoch },
    now,
    until: Math.min(now + lifetimeMs, artifact.expires.getTime()),
  });
  return { url: `${baseUrl(deps)}/v1/links/${token}`, expires };
}

export async function createArtifactLink(deps: Deps, actor: Actor, id: string, lifetime?: string | null): Promise<ArtifactLink> {
  requireMember(actor);
  const ms = lifetime === undefined || lifetime === null ? DEFAULT_LINK_LIFETIME_MS : lifetimeMs(lifetime, 'lifetime');
  const artifact = await getArtifact(deps, actor, id);
  const link = await signLink(deps, artifact, ms);
  // A link stores nothing, but it hands the artifact to whoever holds it: on record.
  await recordAudit(deps, deps.prisma, actor, {
    action: 'artifact.link',
    target: { kind: 'artifact', id: artifact.id },
    detail: { expires: link.expires.toISOString() },
  });
  return link;
}

/** Every link made so far stops working; new ones can be made. */
export async function revokeArtifactLinks(deps: Deps, actor: Actor, id: string): Promise<Artifact> {
  const artifact = await getArtifact(deps, actor, id);
  await checkAudited(deps, actor, { action: 'artifact.links.revoke', target: { kind: 'artifact', id: artifact.id } }, () =>
    requireOwner(actor, artifact, `artifact ${id}`),
  );
  const count = await deps.prisma.$transaction(async (tx) => {
    const { count } = await tx.artifact.updateMany({ where: { id, status: 'stored' }, data: { linkEpoch: { increment: 1 } } });
    if (count > 0) await recordAudit(deps, tx, actor, { action: 'artifact.links.revoke', target: { kind: 'artifact', id } });
    return count;
  });
  if (count === 0) throw new NotFoundError(`artifact ${id}`);
  return { ...artifact, linkEpoch: artifact.linkEpoch + 1 };
}

/** The artifact a signed link names: 403 invalid_link, 410 link_expired / link_revoked, or 404. */
export async function resolveLink(deps: Deps, token: string): Promise<Artifact> {
  const payload = await verifyToken(linkKey(deps), token, LINK_AUDIENCE, deps.clock.now());
  if (payload === 'expired') throw new GoneError('this link has expired; ask for a new one', 'link_expired');
  if (payload === 'invalid') throw new DomainError('this link is not valid: it was altered or not issued by this server', 'invalid_link');
  const { org, epoch, sub } = payload;
  if (typeof org !== 'string' || typeof epoch !== 'number') {
    throw new DomainError('this link is not valid: it was altered or not issued by this server', 'invalid_link');
  }
  const artifact = await findVisible(deps, org, sub);
  if (artifact.linkEpoch !== epoch) throw new GoneError('this link was revoked; ask for a new one', 'link_revoked');
  return artifact;
}

// ---------------------------------------------------------------------------------------------
// Deleting and sweeping

async function purge(deps: Deps, a: Pick<Artifact, 'orgId' | 'project' | 'id'>): Promise<void> {
  await deletePacked(deps.store, artifactPrefix(a));
  await deps.prisma.artifact.deleteMany({ where: { id: a.id } });
}

/** DELETE: the artifact disappears at once; its objects and row go now, or via the sweeper. */
export async function deleteArtifact(deps: Deps, actor: Actor, id: string): Promise<string> {
  const artifact = await getArtifact(deps, actor, id);
  await checkAudited(deps, actor, { action: 'artifact.delete', target: { kind: 'artifact', id: artifact.id } }, () =>
    requireOwner(actor, artifact, `artifact ${id}`),
  );
  const now = deps.clock.now();
  const { count, hooked } = await deps.prisma.$transaction(async (tx) => {
    const { count } = await tx.artifact.updateMany({ where: { id, status: 'stored' }, data: { status: 'deleting', expires: now } });
    if (count === 0) return { count, hooked: false };
    await recordAudit(deps, tx, actor, {
      action: 'artifact.delete',
      target: { kind: 'artifact', id },
      detail: { name: artifact.name, project: artifact.project },
    });
    return { count, hooked: await emitWebhookEvent(tx, artifact.orgId, 'artifact.deleted', artifactData(artifact), now) };
  });
  if (count === 0) throw new NotFoundError(`artifact ${id}`);
  nudgeWebhooks(deps, hooked);
  try {
    await purge(deps, artifact);
  } catch {
    // Already invisible; the row (due now) tells the sweeper to finish the job.
    deps.background.nudge(SWEEPER_JOB, 10 * SECOND_MS);
  }
  return id;
}

/**
 * Removes every artifact whose `expires` has passed: expired ones, deletions left unfinished and
 * abandoned uploads. Objects first, then the row, so a failure leaves a row to retry from.
 */
export async function sweepArtifacts(deps: Deps): Promise<number> {
  const failed: string[] = [];
  let removed = 0;
  let lastError: unknown;
  for (;;) {
    const due = await deps.prisma.artifact.findMany({
      where: { expires: { lte: deps.clock.now() }, ...(failed.length ? { id: { notIn: failed } } : {}) },
      orderBy: { expires: 'asc' },
      take: 100,
      select: { id: true, orgId: true, project: true },
    });
    if (due.length === 0) break;
    for (const a of due) {
      try {
        await purge(deps, a);
        removed++;
      } catch (err) {
        failed.push(a.id);
        lastError = err;
      }
    }
  }
  if (failed.length)
    throw new Error(`could not remove ${failed.length} artifact(s), e.g. ${failed[0]}; retrying later`, { cause: lastError });
  return removed;
}

export const artifactSweeper: BackgroundJob = {
  name: SWEEPER_JOB,
  intervalMs: MINUTE_MS,
  run: async (deps) => {
    await sweepArtifacts(deps);
  },
};
