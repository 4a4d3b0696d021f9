// A sealing thread of src/platform/crypto/chunk-sealer.ts: AES-256-GCM over chunks that live in memory
// shared with the main thread, in place. The main thread's heap never sees a per-chunk allocation;
// this thread's are small and die young in its own, nearly empty heap.
import { createCipheriv, createDecipheriv, createHash, type Hash, randomFillSync } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import type { HashJob, SealJob, SealJobDone } from './chunk-sealer';
import { NONCE_BYTES, TAG_BYTES } from './seal';

// Pieces small enough that the copy back into the slot reads from cache.
const PIECE = 128 * 1024;

type Transform = { update(data: Uint8Array): Buffer };

/** Replaces `data` piece by piece with what `cipher` makes of it. */
function inPlace(cipher: Transform, data: Buffer): void {
  for (let at = 0; at < data.length; at += PIECE) {
    const piece = data.subarray(at, at + PIECE);
    const out = cipher.update(piece);
    // GCM is a stream mode: OpenSSL gives back exactly as many bytes as it was given.
    if (out.length !== piece.length) throw new Error(`AES-GCM returned ${out.length} bytes for ${piece.length}`);
    out.copy(data, at);
  }
}

/** False when a chunk fails authentication; throws on anything else (a fault of this code). */
function run(job: SealJob): boolean {
  const slot = Buffer.from(job.memory, job.offset, NONCE_BYTES + job.length + TAG_BYTES);
  const nonce = slot.subarray(0, NONCE_BYTES);
  const data = slot.subarray(NONCE_BYTES, NONCE_BYTES + job.length);
  const tag = slot.subarray(NONCE_BYTES + job.length);
  if (job.op === 'seal') {
    randomFillSync(nonce);
    const cipher = createCipheriv('aes-256-gcm', job.key, nonce, { authTagLength: TAG_BYTES });
    cipher.setAAD(job.aad);
    inPlace(cipher, data);
    cipher.final();
    cipher.getAuthTag().copy(tag);
    return true;
  }
  const decipher = createDecipheriv('aes-256-gcm', job.key, nonce, { authTagLength: TAG_BYTES });
  decipher.setAAD(job.aad);
  decipher.setAuthTag(Buffer.from(tag));
  inPlace(decipher, data);
  try {
    decipher.final(); // throws unless the tag verifies; the caller then never reads `data`
  } catch {
    return false;
  }
  return true;
}

// SHA-256 of items whose chunks pass through this thread (SlotHash), by stream id.
const hashes = new Map<number, Hash>();

function hashJob(job: HashJob): SealJobDone {
  const hash = hashes.get(job.stream) ?? createHash('sha256');
  hashes.set(job.stream, hash);
  if (job.op === 'hash') {
    hash.update(Buffer.from(job.memory, job.offset + NONCE_BYTES, job.length));
    return { id: job.id };
  }
  hashes.delete(job.stream);
  return { id: job.id, digest: hash.digest('hex') };
}

parentPort!.on('message', (job: SealJob | HashJob) => {
  let done: SealJobDone;
  try {
    if (job.op === 'hash' || job.op === 'digest') done = hashJob(job);
    else done = run(job) ? { id: job.id } : { id: job.id, failed: 'authentication' };
  } catch (err) {
    done = { id: job.id, failed: err instanceof Error ? err.message : String(err) };
  }
  parentPort!.postMessage(done);
});
