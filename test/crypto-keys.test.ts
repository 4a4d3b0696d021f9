import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  dataKeyAad,
  KeyUnwrapError,
  keyFingerprint,
  newDataKey,
  unwrapKey,
  WRAPPED_KEY_BYTES,
  wrapKey,
} from '../src/platform/crypto/data-keys';
import { loadMasterKey, MasterKeyError } from '../src/platform/crypto/master-key';
import { type ChunkAad, openChunk, SEAL_OVERHEAD, SealError, sealChunk } from '../src/platform/crypto/seal';

describe('loadMasterKey', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-keys-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('creates <dataDir>/master.key with mode 0600 on first start and reuses it', async () => {
    const dataDir = join(dir, 'data'); // does not exist yet
    const key = await loadMasterKey({ dataDir });
    expect(key.length).toBe(32);
    const path = join(dataDir, 'master.key');
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect(Buffer.from((await readFile(path, 'utf8')).trim(), 'base64').equals(key)).toBe(true);
    expect((await loadMasterKey({ dataDir })).equals(key)).toBe(true);
    expect(await readdir(dataDir)).toEqual(['master.key']); // no temp files left
  });

  it('agrees on one key when several processes start at once', async () => {
    const keys = await Promise.all(Array.from({ length: 8 }, () => loadMasterKey({ dataDir: dir })));
    for (const k of keys) expect(k.equals(keys[0]!)).toBe(true);
    expect(await readdir(dir)).toEqual(['master.key']);
  });

  it('refuses a key file readable by group or others, and accepts 0400', async () => {
    await loadMasterKey({ dataDir: dir });
    const path = join(dir, 'master.key');
    for (const mode of [0o644, 0o640, 0o604, 0o660]) {
      await chmod(path, mode);
      await expect(loadMasterKey({ dataDir: dir })).rejects.toThrow(/chmod 600/);
      await expect(loadMasterKey({ dataDir: dir })).rejects.toBeInstanceOf(MasterKeyError);
    }
    await chmod(path, 0o400);
    expect((await loadMasterKey({ dataDir: dir })).length).toBe(32);
  });

  it('refuses a malformed key file', async () => {
    const path = join(dir, 'master.key');
    await writeFile(path, 'not a key\n', { mode: 0o600 });
    await expect(loadMasterKey({ dataDir: dir })).rejects.toBeInstanceOf(MasterKeyError);
    await writeFile(path, randomBytes(16).toString('base64'), { mode: 0o600 });
    await expect(loadMasterKey({ dataDir: dir })).rejects.toThrow(/exactly 32 bytes, got 16/);
    const raw = randomBytes(32);
    await writeFile(path, raw, { mode: 0o600 }); // raw bytes are accepted
    expect((await loadMasterKey({ dataDir: dir })).equals(raw)).toBe(true);
  });

  it('uses MASTER_KEY (base64 of 32 bytes) without touching the data dir', async () => {
    const k = randomBytes(32);
    expect((await loadMasterKey({ masterKeyB64: k.toString('base64'), dataDir: dir })).equals(k)).toBe(true);
    expect((await loadMasterKey({ masterKeyB64: ` ${k.toString('base64')}\n`, dataDir: dir })).equals(k)).toBe(true);
    expect((await loadMasterKey({ masterKeyB64: k.toString('base64url'), dataDir: dir })).equals(k)).toBe(true);
    expect(await readdir(dir)).toEqual([]);
  });

  it('rejects a MASTER_KEY of the wrong length or alphabet, without echoing it', async () => {
    const short = randomBytes(31).toString('base64');
    await expect(loadMasterKey({ masterKeyB64: short, dataDir: dir })).rejects.toThrow(
      /MASTER_KEY must decode to exactly 32 bytes, got 31/,
    );
    await expect(loadMasterKey({ masterKeyB64: randomBytes(33).toString('base64'), dataDir: dir })).rejects.toBeInstanceOf(MasterKeyError);
    const bad = 'this is not base64!!';
    const err = (await loadMasterKey({ masterKeyB64: bad, dataDir: dir }).then(
      () => undefined,
      (e: unknown) => e,
    )) as Error;
    expect(err).toBeInstanceOf(MasterKeyError);
    expect(err.message).not.toContain(bad);
    expect(err.message).toMatch(/not valid base64/);
    // an empty MASTER_KEY counts as unset
    expect((await loadMasterKey({ masterKeyB64: '', dataDir: dir })).length).toBe(32);
  });
});

describe('data keys', () => {
  const master = randomBytes(32);
  const aad = dataKeyAad('org_1', 'web', 2);

  it('wraps and unwraps', () => {
    const dk = newDataKey();
    expect(dk.length).toBe(32);
    expect(newDataKey().equals(dk)).toBe(false);
    const wrapped = wrapKey(master, dk, aad);
    expect(wrapped.length).toBe(WRAPPED_KEY_BYTES);
    expect(wrapped[0]).toBe(1);
    expect(unwrapKey(master, wrapped, aad).equals(dk)).toBe(true);
    // fresh nonce each time
    expect(wrapKey(master, dk, aad).equals(wrapped)).toBe(false);
  });

  it('throws KeyUnwrapError on any tampering, the wrong master key, or another owner/version', () => {
    const wrapped = wrapKey(master, newDataKey(), aad);
    for (let i = 0; i < wrapped.length; i++) {
      const t = Buffer.from(wrapped);
      t[i]! ^= 0x80;
      expect(() => unwrapKey(master, t, aad)).toThrow(KeyUnwrapError);
    }
    expect(() => unwrapKey(randomBytes(32), wrapped, aad)).toThrow(KeyUnwrapError);
    expect(() => unwrapKey(master, wrapped, dataKeyAad('org_1', 'web', 3))).toThrow(KeyUnwrapError);
    expect(() => unwrapKey(master, wrapped, dataKeyAad('org_1', 'api', 2))).toThrow(KeyUnwrapError);
    expect(() => unwrapKey(master, wrapped, dataKeyAad('org_2', 'web', 2))).toThrow(KeyUnwrapError);
    expect(() => unwrapKey(master, wrapped.subarray(1), aad)).toThrow(KeyUnwrapError);
    const err = (() => {
      try {
        unwrapKey(randomBytes(32), wrapped, aad);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(SealError); // one family of "cannot be trusted" errors
  });

  it('keeps aad fields unambiguous', () => {
    expect(dataKeyAad('a', 'b/c', 1)).not.toBe(dataKeyAad('a/b', 'c', 1));
  });

  it('rejects keys of the wrong size', () => {
    expect(() => wrapKey(randomBytes(16), newDataKey(), aad)).toThrow(TypeError);
    expect(() => wrapKey(master, randomBytes(31), aad)).toThrow(TypeError);
  });

  it('fingerprints keys without revealing them', () => {
    expect(keyFingerprint(master)).toMatch(/^[0-9a-f]{16}$/);
    expect(keyFingerprint(master)).toBe(keyFingerprint(Buffer.from(master)));
    expect(keyFingerprint(randomBytes(32))).not.toBe(keyFingerprint(master));
  });
});

describe('chunk sealing', () => {
  const key = randomBytes(32);
  const at: ChunkAad = { objectId: 'art_x', segment: 1, chunk: 5, final: false };

  it('seals with a fresh nonce and opens only at the same position', () => {
    const plain = randomBytes(1000);
    const sealed = sealChunk(key, plain, at);
    expect(sealed.length).toBe(plain.length + SEAL_OVERHEAD);
    expect(sealChunk(key, plain, at).subarray(0, 12).equals(sealed.subarray(0, 12))).toBe(false);
    expect(openChunk(key, sealed, at).equals(plain)).toBe(true);
    for (const other of [
      { ...at, objectId: 'art_y' },
      { ...at, segment: 0 },
      { ...at, chunk: 4 },
      { ...at, final: true },
    ]) {
      expect(() => openChunk(key, sealed, other)).toThrow(SealError);
    }
    expect(() => openChunk(randomBytes(32), sealed, at)).toThrow(SealError);
    for (const i of [0, 11, 12, 500, sealed.length - 1]) {
      const t = Buffer.from(sealed);
      t[i]! ^= 1;
      expect(() => openChunk(key, t, at)).toThrow(SealError);
    }
    expect(() => openChunk(key, sealed.subarray(0, 20), at)).toThrow(SealError);
  });

  it('seals empty chunks', () => {
    const sealed = sealChunk(key, Buffer.alloc(0), { ...at, final: true });
    expect(sealed.length).toBe(SEAL_OVERHEAD);
    expect(openChunk(key, sealed, { ...at, final: true }).length).toBe(0);
  });
});
