// The machine's limit that the artifact benchmarks compare against: one thread doing SHA-256 and
// AES-256-GCM over the same number of bytes in 4 MiB chunks (the work the server does per byte on
// upload). One definition for bench/artifacts.ts (through artifacts-client.ts) and bench/pack.ts.
import { createCipheriv, createHash, randomBytes } from 'node:crypto';

const BLOCK = randomBytes(4 * 1024 * 1024);

/** Milliseconds one thread takes to hash and seal `size` bytes. */
export function limitMs(size: number): number {
  const key = randomBytes(32);
  const hash = createHash('sha256');
  const started = process.hrtime.bigint();
  for (let done = 0; done < size; done += BLOCK.length) {
    const piece = BLOCK.subarray(0, Math.min(BLOCK.length, size - done));
    hash.update(piece);
    const cipher = createCipheriv('aes-256-gcm', key, randomBytes(12));
    cipher.update(piece);
    cipher.final();
    cipher.getAuthTag();
  }
  hash.digest();
  return Number(process.hrtime.bigint() - started) / 1e6;
}
