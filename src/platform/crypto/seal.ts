import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * AES-256-GCM sealing of chunks.
 *
 * Sealed chunk layout: nonce (12 random bytes) | ciphertext (same length as the plain bytes) |
 * tag (16 bytes). A fresh random nonce per chunk; the associated data binds the chunk to its
 * object, segment, position and to whether it is the last chunk, so sealed chunks cannot be
 * reordered, moved to another object or segment, or dropped from the end without openChunk failing.
 */

export const KEY_BYTES = 32;
export const NONCE_BYTES = 12;
export const TAG_BYTES = 16;
/** Bytes a sealed chunk has on top of its plain bytes. */
export const SEAL_OVERHEAD = NONCE_BYTES + TAG_BYTES;

/** Thrown when sealed bytes cannot be opened: wrong key, tampering, wrong position, truncation. */
export class SealError extends Error {
  readonly code: string = 'seal';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Where a chunk belongs. Every field is authenticated. */
export interface ChunkAad {
  /** Artifact or snapshot id (`art_...`). */
  objectId: string;
  /** Index of the segment object holding the chunk. */
  segment: number;
  /** Index of the chunk within the whole object (not within its segment). */
  chunk: number;
  /** True for the last chunk of the object. */
  final: boolean;
}

const CHUNK_AAD_TAG = Buffer.from('berth.chunk.v1\0');

/** Canonical, unambiguous encoding of a ChunkAad. */
export function encodeChunkAad(aad: ChunkAad): Buffer {
  const id = Buffer.from(aad.objectId, 'utf8');
  if (id.length === 0 || id.length > 0xffff) throw new RangeError('objectId must be 1-65535 bytes');
  if (!Number.isSafeInteger(aad.segment) || aad.segment < 0 || aad.segment > 0xffffffff) {
    throw new RangeError(`bad segment index ${aad.segment}`);
  }
  if (!Number.isSafeInteger(aad.chunk) || aad.chunk < 0) throw new RangeError(`bad chunk index ${aad.chunk}`);
  const out = Buffer.allocUnsafe(CHUNK_AAD_TAG.length + 2 + id.length + 4 + 8 + 1);
  let o = CHUNK_AAD_TAG.copy(out, 0);
  o = out.writeUInt16BE(id.length, o);
  o += id.copy(out, o);
  o = out.writeUInt32BE(aad.segment, o);
  o = out.writeUInt32BE(Math.floor(aad.chunk / 0x100000000), o);
  o = out.writeUInt32BE(aad.chunk % 0x100000000, o);
  out.writeUInt8(aad.final ? 1 : 0, o);
  return out;
}

function checkKey(key: Buffer): void {
  if (!Buffer.isBuffer(key) || key.length !== KEY_BYTES) throw new TypeError('key must be a 32-byte Buffer');
}

/**
 * Seals with arbitrary associated data, returning the three parts (nonce, ciphertext, tag) without
 * concatenating them, so a packer can write them out without copying the ciphertext again.
 */
export function sealParts(key: Buffer, plain: Buffer, aad: Buffer): [nonce: Buffer, ciphertext: Buffer, tag: Buffer] {
  checkKey(key);
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(aad);
  const first = cipher.update(plain);
  const rest = cipher.final(); // empty for GCM, kept for correctness
  const ciphertext = rest.length === 0 ? first : Buffer.concat([first, rest]);
  return [nonce, ciphertext, cipher.getAuthTag()];
}

/** Seals with arbitrary associated data: nonce | ciphertext | tag. */
export function sealRaw(key: Buffer, plain: Buffer, aad: Buffer): Buffer {
  return Buffer.concat(sealParts(key, plain, aad));
}

/**
 * Opens nonce | ciphertext | tag. No plain byte is returned unless the tag verifies.
 * Throws SealError.
 */
export function openRaw(key: Buffer, sealed: Buffer, aad: Buffer): Buffer {
  checkKey(key);
  if (!Buffer.isBuffer(sealed) || sealed.length < SEAL_OVERHEAD) {
    throw new SealError('sealed data is too short');
  }
  const nonce = sealed.subarray(0, NONCE_BYTES);
  const tag = sealed.subarray(sealed.length - TAG_BYTES);
  const ciphertext = sealed.subarray(NONCE_BYTES, sealed.length - TAG_BYTES);
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
    decipher.setAAD(aad);
    decipher.setAuthTag(tag);
    const first = decipher.update(ciphertext);
    const rest = decipher.final(); // throws when the tag does not verify
    return rest.length === 0 ? first : Buffer.concat([first, rest]);
  } catch (err) {
    throw new SealError('sealed data failed authentication (wrong key, tampered, or out of place)', { cause: err });
  }
}

/** Seals one chunk bound to its position (see ChunkAad). Output: nonce | ciphertext | tag. */
export function sealChunk(key: Buffer, plain: Buffer, aad: ChunkAad): Buffer {
  return sealRaw(key, plain, encodeChunkAad(aad));
}

/** Opens a chunk sealed by sealChunk at the same position. Throws SealError. */
export function openChunk(key: Buffer, sealed: Buffer, aad: ChunkAad): Buffer {
  return openRaw(key, sealed, encodeChunkAad(aad));
}
