import { createHash, randomBytes } from 'node:crypto';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A bearer secret: a readable kind prefix and 43 base62 characters (~256 bits). */
export function newSecret(prefix: string): string {
  const bytes = randomBytes(43);
  let out = '';
  // 248 = 4 * 62: rejection-free enough and unbiased because bytes >= 248 are redrawn.
  for (let i = 0; out.length < 43; i++) {
    const b = i < bytes.length ? bytes[i]! : randomBytes(1)[0]!;
    if (b < 248) out += ALPHABET[b % 62];
  }
  return `${prefix}_${out}`;
}

/** Secrets are stored only as this digest; they are high-entropy, so a fast hash is enough. */
export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** What a record shows of its secret so a person can tell two apart. */
/**
 * How the built-in node's credential begins: made anew for each of its processes, kept (hashed) on
 * its RemoteNode row rather than as a Credential (it is no organization's).
 */
export const BUILTIN_NODE_TOKEN = 'bnd_builtin_';

export function secretPrefix(secret: string): string {
  return secret.slice(0, secret.indexOf('_') + 7);
}
