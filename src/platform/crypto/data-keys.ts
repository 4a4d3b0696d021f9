import { createHash, hkdfSync, randomBytes } from 'node:crypto';
import { KEY_BYTES, openRaw, SealError, sealRaw } from './seal';

/**
 * Per-project data keys, stored only wrapped by the master key.
 *
 * Wrapped format (61 bytes): version (1 byte, 0x01) | nonce (12) | tag (16) | ciphertext (32).
 * AES-256-GCM under a wrapping key derived from the master key with HKDF-SHA256 (so the master key
 * itself is never used directly by a cipher), fresh random nonce per wrap. The associated data is
 * the version byte plus the caller's `aad` string, which should bind the key to its owner and
 * version (use dataKeyAad), so a wrapped key copied to another project or version fails to unwrap.
 */

export const DATA_KEY_BYTES = KEY_BYTES;
const WRAP_VERSION = 0x01;
const NONCE = 12;
const TAG = 16;
export const WRAPPED_KEY_BYTES = 1 + NONCE + TAG + DATA_KEY_BYTES;

/** The wrapped key cannot be opened: wrong master key, wrong aad, tampered or malformed. */
export class KeyUnwrapError extends SealError {
  override readonly code = 'key_unwrap';
}

/** Canonical associated data for a project's data key. */
export function dataKeyAad(org: string, project: string, version: number): string {
  if (!Number.isSafeInteger(version) || version < 0) throw new RangeError(`bad key version ${version}`);
  // JSON keeps the fields unambiguous whatever characters they contain.
  return JSON.stringify(['berth.datakey', org, project, version]);
}

/** A new random 256-bit data key. */
export function newDataKey(): Buffer {
  return randomBytes(DATA_KEY_BYTES);
}

function checkMaster(master: Buffer): void {
  if (!Buffer.isBuffer(master) || master.length !== KEY_BYTES) throw new TypeError('master key must be a 32-byte Buffer');
}

function wrappingKey(master: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', master, Buffer.alloc(0), 'berth.wrap.v1', KEY_BYTES));
}

function fullAad(aad: string): Buffer {
  if (typeof aad !== 'string') throw new TypeError('aad must be a string');
  return Buffer.concat([Buffer.of(WRAP_VERSION), Buffer.from(aad, 'utf8')]);
}

export function wrapKey(master: Buffer, dataKey: Buffer, aad: string): Buffer {
  checkMaster(master);
  if (!Buffer.isBuffer(dataKey) || dataKey.length !== DATA_KEY_BYTES) throw new TypeError('data key must be a 32-byte Buffer');
  const sealed = sealRaw(wrappingKey(master), dataKey, fullAad(aad)); // nonce | ct | tag
  const nonce = sealed.subarray(0, NONCE);
  const ct = sealed.subarray(NONCE, NONCE + DATA_KEY_BYTES);
  const tag = sealed.subarray(NONCE + DATA_KEY_BYTES);
  return Buffer.concat([Buffer.of(WRAP_VERSION), nonce, tag, ct]);
}

export function unwrapKey(master: Buffer, wrapped: Buffer, aad: string): Buffer {
  checkMaster(master);
  if (!Buffer.isBuffer(wrapped) || wrapped.length !== WRAPPED_KEY_BYTES) {
    throw new KeyUnwrapError(`wrapped key must be ${WRAPPED_KEY_BYTES} bytes`);
  }
  if (wrapped[0] !== WRAP_VERSION) throw new KeyUnwrapError(`unknown wrapped key version ${wrapped[0]}`);
  const nonce = wrapped.subarray(1, 1 + NONCE);
  const tag = wrapped.subarray(1 + NONCE, 1 + NONCE + TAG);
  const ct = wrapped.subarray(1 + NONCE + TAG);
  try {
    return openRaw(wrappingKey(master), Buffer.concat([nonce, ct, tag]), fullAad(aad));
  } catch (err) {
    throw new KeyUnwrapError('wrapped key failed authentication (wrong master key, wrong owner/version, or tampered)', {
      cause: err,
    });
  }
}

/**
 * Short non-secret identifier of a key (first 8 bytes of SHA-256 over a fixed label and the key),
 * for logs and for detecting that a different master key is configured than the one that wrapped
 * the stored keys.
 */
export function keyFingerprint(key: Buffer): string {
  return createHash('sha256').update('berth.key-fingerprint.v1\0').update(key).digest('hex').slice(0, 16);
}
