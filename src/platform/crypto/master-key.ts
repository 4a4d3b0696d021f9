import { randomBytes } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { link, mkdir, open, readFile, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { fsyncDir } from '../store/fs-store';

export const MASTER_KEY_BYTES = 32;
export const MASTER_KEY_FILE = 'master.key';

/** The master key is missing, malformed, or stored unsafely. The message never contains key bytes. */
export class MasterKeyError extends Error {
  readonly code = 'master_key';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'MasterKeyError';
  }
}

export interface LoadMasterKeyOptions {
  /** MASTER_KEY: base64 (standard or URL-safe, padding optional) of exactly 32 bytes. */
  masterKeyB64?: string;
  /** DATA_DIR: where `master.key` is read from or created when no MASTER_KEY is given. */
  dataDir: string;
}

/**
 * The master key, from MASTER_KEY when set, else from `<dataDir>/master.key`, created on first
 * start (32 random bytes, written base64 + newline, mode 0600, published atomically so two
 * processes starting together agree on one key).
 *
 * File permission policy (decided): the file must not be accessible to group or others
 * (mode & 0o077 == 0; 0600 and 0400 are fine). A more open file is refused with an error that
 * says how to fix it (`chmod 600 …`), as ssh does with private keys: a master key others could
 * read is a leak, and silently continuing would hide it. Not checked on Windows, where POSIX
 * modes do not apply. When MASTER_KEY is set the file is neither read nor created.
 */
export async function loadMasterKey(options: LoadMasterKeyOptions): Promise<Buffer> {
  if (options.masterKeyB64 !== undefined && options.masterKeyB64.trim() !== '') {
    return decodeMasterKey(options.masterKeyB64, 'MASTER_KEY');
  }
  const path = join(options.dataDir, MASTER_KEY_FILE);
  try {
    return await readKeyFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  await mkdir(options.dataDir, { recursive: true, mode: 0o700 });
  const tmp = join(options.dataDir, `.${MASTER_KEY_FILE}.${randomBytes(6).toString('hex')}.tmp`);
  const key = randomBytes(MASTER_KEY_BYTES);
  const fh = await open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o600);
  try {
    await fh.chmod(0o600); // umask can only remove bits, but be explicit
    await fh.writeFile(`${key.toString('base64')}\n`);
    await fh.datasync();
  } catch (err) {
    await fh.close().catch(() => {});
    await unlink(tmp).catch(() => {});
    throw err;
  }
  await fh.close();
  try {
    // link() fails if the name exists: the first process to publish its key wins, the file is
    // never seen half-written, and an existing key is never overwritten.
    await link(tmp, path);
    await fsyncDir(options.dataDir);
    return key;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return await readKeyFile(path); // another process created it first
  } finally {
    await unlink(tmp).catch(() => {});
  }
}

async function readKeyFile(path: string): Promise<Buffer> {
  const st = await stat(path);
  if (!st.isFile()) throw new MasterKeyError(`master key file ${path} is not a regular file`);
  if (process.platform !== 'win32' && (st.mode & 0o077) !== 0) {
    throw new MasterKeyError(
      `master key file ${path} is accessible to group or others (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}); ` +
        `run: chmod 600 ${path}`,
    );
  }
  const raw = await readFile(path);
  if (raw.length === MASTER_KEY_BYTES) return raw; // raw 32 bytes are accepted too
  return decodeMasterKey(raw.toString('utf8'), `master key file ${path}`);
}

/** Strictly decodes base64 (standard or URL-safe alphabet) of exactly 32 bytes. */
export function decodeMasterKey(text: string, what = 'MASTER_KEY'): Buffer {
  const s = text.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(s) || (s.includes('=') && s.length % 4 !== 0)) {
    throw new MasterKeyError(`${what} is not valid base64; generate one with: openssl rand -base64 32`);
  }
  const key = Buffer.from(s, 'base64');
  if (key.length !== MASTER_KEY_BYTES) {
    throw new MasterKeyError(
      `${what} must decode to exactly ${MASTER_KEY_BYTES} bytes, got ${key.length}; generate one with: openssl rand -base64 32`,
    );
  }
  return key;
}
