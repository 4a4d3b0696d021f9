/**
 * The packer alone (src/platform/store/pack.ts: SHA-256 and AES-256-GCM on the sealing threads, the filesystem
 * store with fdatasync), no HTTP and no database, against the artifact benchmark's one-thread
 * limit (bench/limit.ts) measured in the same run: how much of the artifact path's gap to that
 * limit is the packer's own.
 *
 *   npx tsx bench/pack.ts [MiB]        (default 256; the source hands over 64 KiB pieces, as HTTP does)
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { FsBlobStore } from '../src/platform/store/fs-store';
import { packStream, unpackStream } from '../src/platform/store/pack';
import { limitMs } from './limit';

const MB = 1e6;
const total = Number(process.argv[2] ?? 256) * 1024 * 1024;
const piece = randomBytes(64 * 1024);
const rate = (ms: number) => total / MB / (ms / 1000);

function source(): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= total) return void this.push(null);
      sent += piece.length;
      this.push(Buffer.from(piece)); // a fresh buffer per piece, as a socket gives
    },
  });
}

const dir = await mkdtemp(join(tmpdir(), 'berth-bench-pack-'));
try {
  const store = new FsBlobStore(dir);
  const key = randomBytes(32);
  // Warm-up: the sealing threads start on first use (through tsx here: a few hundred ms).
  await packStream({ store, prefix: 'o/p/warm', objectId: 'warm', key, keyVersion: 1, source: Readable.from([Buffer.alloc(64 << 20)]) });
  const limit = rate(limitMs(total));
  let started = performance.now();
  const packed = await packStream({ store, prefix: 'o/p/bench', objectId: 'bench', key, keyVersion: 1, source: source() });
  const pack = rate(performance.now() - started);
  started = performance.now();
  const { stream } = await unpackStream({ store, manifest: packed.manifest, objectId: 'bench', key });
  for await (const _ of stream);
  const unpack = rate(performance.now() - started);
  const f = (n: number) => n.toFixed(0);
  console.log(`${total / 1024 / 1024} MiB, filesystem store: one-thread limit ${f(limit)} MB/s`);
  console.log(`  pack    ${f(pack)} MB/s   ${(pack / limit).toFixed(2)}x the limit`);
  console.log(`  unpack  ${f(unpack)} MB/s   ${(unpack / limit).toFixed(2)}x the limit`);
} finally {
  await rm(dir, { recursive: true, force: true });
}
