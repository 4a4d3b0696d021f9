/**
 * Streaming packer/unpacker shared by artifacts and snapshots.
 *
 * Layout of one packed item under `<prefix>/` (prefix e.g. `org/project/art_x`, one per item):
 *   seg-000000, seg-000001, ...  segment objects: sealed chunks back to back
 *   manifest                     the sealed manifest (see encodeManifest)
 *
 * The plain source is cut into fixed-size chunks (the last one shorter). Each chunk is sealed with
 * AES-256-GCM (src/platform/crypto/seal.ts): fresh random nonce, associated data = object id, segment
 * index, chunk index, final flag. The sealing key is derived per object from the project's data
 * key (HKDF-SHA256, info = object id), so the random-nonce budget is per object and a chunk of one
 * object can never open under another's key. A segment object is closed once it holds at least
 * `segmentSize` sealed bytes (so with the defaults 16 chunks of 4 MiB + 28 bytes each).
 *
 * The manifest (JSON) lists chunk size, plain size, SHA-256 of the plain bytes, key version and,
 * per segment, the offset and length of every sealed chunk. It is itself encrypted and
 * authenticated under the object key: nothing about the content (not even its hash) is readable
 * without the key, so shredding the key leaves nothing to learn from raw objects.
 *
 * Throughput: the bytes of a chunk live in a slot shared with the sealing threads
 * (src/platform/crypto/chunk-sealer.ts). Packing copies what arrives into the slot; a sealing thread hashes
 * it (the item's SHA-256, in order, on one thread) as soon as it is full, then seals it in place,
 * and the store writes it from there (BlobStore.openWriter); meanwhile the next chunk fills.
 * Unpacking reads each sealed chunk into a slot (positioned reads where the store has them),
 * opens it in place two chunks ahead of the one being delivered, and delivers a view of the slot
 * (UnpackResult.pieces) or a copy (UnpackResult.stream). The main thread allocates nothing per
 * chunk, so its collector has nothing large to trace.
 *
 * Memory stays flat: packing holds about four slots per item (filling, full, two being sealed or
 * written; more when the store's writer takes several writes at once), unpacking about four (two
 * being opened, one read, one delivered); slots are pooled across items.
 */
import { createHash, hkdfSync } from 'node:crypto';
import { Readable } from 'node:stream';
import { openSlot, releaseSlot, SlotHash, sealSlot, slotData, slotSealed, takeSlot } from '../crypto/chunk-sealer';
import { encodeChunkAad, openRaw, SEAL_OVERHEAD, SealError, sealRaw } from '../crypto/seal';
import { type BlobStore, type BlobWriter, openBlobWriter, validateBlobName } from './blob-store';

export const DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024;
export const DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024;
export const MANIFEST_NAME = 'manifest';
/** A manifest object larger than this is refused unread (about 2M chunks). */
export const MAX_MANIFEST_BYTES = 64 * 1024 * 1024;
const MAX_CHUNK_SIZE = 256 * 1024 * 1024;
/**
 * Packing: chunks sent to be sealed and stored while the next one fills. Unpacking: chunks being
 * opened ahead of the one being delivered. Each is one slot (src/platform/crypto/chunk-sealer.ts).
 */
const CHUNKS_IN_FLIGHT = 2;
const OPENS_IN_FLIGHT = 2;
const EMPTY_SHA256 = createHash('sha256').digest('hex');

// ---------------------------------------------------------------------------------------------
// Errors

/** The source had more than `maxBytes` bytes. Everything written was deleted. */
export class TooLargeError extends Error {
  readonly code = 'too_large';
  constructor(readonly limit: number) {
    super(`body exceeds the limit of ${limit} bytes`);
    this.name = 'TooLargeError';
  }
}

/** packStream was aborted through its signal (`cause` is the signal's reason). */
export class PackAbortedError extends Error {
  readonly code = 'aborted';
  constructor(reason?: unknown) {
    super('packing was aborted', { cause: reason });
    this.name = 'AbortError';
  }
}

/**
 * Stored objects of a packed item are inconsistent: missing or extra bytes, a manifest that does
 * not describe what it should. Authentication failures (tampering, wrong key, chunks out of place)
 * surface as SealError; this is a SealError too, so `instanceof SealError` catches every case of
 * "these stored bytes cannot be trusted".
 */
export class PackIntegrityError extends SealError {
  override readonly code = 'pack_integrity';
}

/** The requested range starts past the end of the item. */
export class PackRangeError extends RangeError {
  readonly code = 'invalid_range';
  constructor(
    readonly start: number,
    readonly end: number | undefined,
    readonly size: number,
  ) {
    super(`range ${start}-${end ?? ''} is not satisfiable for ${size} bytes`);
    this.name = 'PackRangeError';
  }
}

// ---------------------------------------------------------------------------------------------
// Types

export interface PackOptions {
  store: BlobStore;
  /** Folder of this item's objects, e.g. `org/project/art_x`; should be fresh for each item. */
  prefix: string;
  /** Artifact or snapshot id; bound into every chunk and the manifest. */
  objectId: string;
  /** The project's 32-byte data key (the object key is derived from it). */
  key: Buffer;
  /** Version of `key`, recorded in the manifest. */
  keyVersion: number;
  source: Readable;
  /** Plain bytes per chunk. Default 4 MiB. */
  chunkSize?: number;
  /** Target sealed bytes per segment object. Default 64 MiB. */
  segmentSize?: number;
  /** Fail with TooLargeError as soon as the source yields more than this many bytes. */
  maxBytes?: number;
  signal?: AbortSignal;
  /**
   * By default, like stream.pipeline, the source is destroyed when packing fails. Set this to
   * leave it alive (e.g. to answer 413 on an HTTP request before closing it); the caller must
   * then drain or destroy it.
   */
  keepSourceOpen?: boolean;
}

export interface PackSegment {
  /** Blob name of the segment object. */
  name: string;
  /** Sealed bytes in that object. */
  size: number;
  /** Chunks in it. */
  objects: number;
}

export interface PackResult {
  /** Plain bytes. */
  size: number;
  /** SHA-256 (hex) of the plain bytes. */
  sha256: string;
  chunks: number;
  segments: PackSegment[];
  /** Sealed bytes over all segments (the manifest not included). */
  sealedBytes: number;
  /** Blob name of the manifest object. */
  manifest: string;
}

/** The manifest, as stored (inside its seal). */
export interface PackManifest {
  format: 'berth.pack';
  version: 1;
  objectId: string;
  keyVersion: number;
  chunkSize: number;
  size: number;
  sha256: string;
  chunks: number;
  sealedBytes: number;
  segments: {
    /** Object name relative to the manifest's folder. */
    name: string;
    size: number;
    /** Index (within the item) of its first chunk. */
    firstChunk: number;
    /** [offset, length] of each sealed chunk within the segment object. */
    chunks: [number, number][];
  }[];
}

export interface UnpackOptions {
  store: BlobStore;
  /** Blob name of the manifest (PackResult.manifest). */
  manifest: string;
  objectId: string;
  /** The same data key the item was packed with. */
  key: Buffer;
  /** Inclusive plain-byte range; `end` defaults to (and is clamped to) the last byte. */
  range?: { start: number; end?: number };
  /** Also recompute SHA-256 on a full read and fail the stream on mismatch. Default false. */
  verifySha256?: boolean;
}

export interface UnpackResult {
  /** Plain size of the whole item. */
  size: number;
  /** SHA-256 of the whole item. */
  sha256: string;
  keyVersion: number;
  /** First byte delivered. */
  start: number;
  /** Last byte delivered (start - 1 when nothing is). */
  end: number;
  /** Bytes the stream will deliver. */
  length: number;
  /**
   * Plain bytes of the range. Every chunk is authenticated before any of its bytes are pushed; a
   * tampered, missing, moved or truncated chunk makes the stream emit 'error' (SealError). Each
   * piece is the consumer's to keep. Read this or `pieces()`, not both.
   */
  readonly stream: Readable;
  /**
   * The same bytes without a copy: each piece is a view of a pooled buffer, valid only until the
   * next one is asked for (so write it out, and wait until it is written, before asking). The
   * iteration fails as `stream` does.
   */
  pieces(): AsyncGenerator<Buffer>;
}

// ---------------------------------------------------------------------------------------------
// Helpers

export function segmentName(index: number): string {
  return `seg-${String(index).padStart(6, '0')}`;
}

function normalizePrefix(prefix: string): string {
  const p = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
  validateBlobName(p);
  return p;
}

function checkKey(key: Buffer): void {
  if (!Buffer.isBuffer(key) || key.length !== 32) throw new TypeError('key must be a 32-byte Buffer');
}

function checkObjectId(objectId: string): void {
  if (typeof objectId !== 'string' || objectId.length === 0 || Buffer.byteLength(objectId) > 1024) {
    throw new TypeError('objectId must be a non-empty string of at most 1024 bytes');
  }
}

function positiveInt(name: string, value: number | undefined, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < 1 || v > max) throw new RangeError(`${name} must be an integer in 1..${max}`);
  return v;
}

/** Key that seals one object's chunks and manifest, derived from the project's data key. */
function objectKey(key: Buffer, objectId: string): Buffer {
  return Buffer.from(hkdfSync('sha256', key, 'berth.pack.v1', objectId, 32));
}

const MANIFEST_MAGIC = Buffer.from('BRTHPK1\n');
const MANIFEST_HEADER = MANIFEST_MAGIC.length + 4;
const MANIFEST_AAD_TAG = Buffer.from('berth.manifest.v1\0');

function manifestAad(header: Buffer, objectId: string): Buffer {
  return Buffer.concat([MANIFEST_AAD_TAG, header, Buffer.from(objectId, 'utf8')]);
}

/** Manifest object: magic (8) | key version (u32 BE) | nonce | sealed JSON | tag. */
function encodeManifest(okey: Buffer, manifest: PackManifest): Buffer {
  const header = Buffer.alloc(MANIFEST_HEADER);
  MANIFEST_MAGIC.copy(header);
  header.writeUInt32BE(manifest.keyVersion, MANIFEST_MAGIC.length);
  const sealed = sealRaw(okey, Buffer.from(JSON.stringify(manifest)), manifestAad(header, manifest.objectId));
  return Buffer.concat([header, sealed]);
}

function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(new PackAbortedError(signal.reason));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new PackAbortedError(signal.reason));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

// ---------------------------------------------------------------------------------------------
// Packing

function checkPackOptions(opts: PackOptions) {
  const prefix = normalizePrefix(opts.prefix);
  checkKey(opts.key);
  checkObjectId(opts.objectId);
  if (!Number.isSafeInteger(opts.keyVersion) || opts.keyVersion < 0 || opts.keyVersion > 0xffffffff) {
    throw new RangeError('keyVersion must be an integer in 0..2^32-1');
  }
  const chunkSize = positiveInt('chunkSize', opts.chunkSize, DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE);
  const segmentSize = positiveInt('segmentSize', opts.segmentSize, DEFAULT_SEGMENT_SIZE);
  const maxBytes = opts.maxBytes;
  if (maxBytes !== undefined && (!Number.isSafeInteger(maxBytes) || maxBytes < 0)) {
    throw new RangeError('maxBytes must be a non-negative integer');
  }
  return { prefix, chunkSize, segmentSize, maxBytes };
}

/**
 * Reads `source` to its end, sealing and storing it as described at the top of this file, and
 * resolves once every segment and the manifest are stored. On any failure (TooLargeError,
 * PackAbortedError, the source's error, a store error) every object it wrote is deleted before
 * the promise rejects, and the source is destroyed unless `keepSourceOpen`.
 */
export async function packStream(opts: PackOptions): Promise<PackResult> {
  const { store, objectId, key, keyVersion, source, signal } = opts;
  let checked: ReturnType<typeof checkPackOptions>;
  try {
    checked = checkPackOptions(opts);
  } catch (err) {
    if (!opts.keepSourceOpen) source.destroy();
    throw err;
  }
  const { prefix, chunkSize, segmentSize, maxBytes } = checked;

  const okey = objectKey(key, objectId);
  const manifestName = `${prefix}/${MANIFEST_NAME}`;
  const started: string[] = []; // every object name we began writing, for cleanup
  const writers: BlobWriter[] = [];
  const segments: PackManifest['segments'] = [];
  // The item's SHA-256 runs on a sealing thread, a chunk at a time, as soon as the chunk is full.
  const hash = new SlotHash();
  let received = 0;
  let chunkIndex = 0;
  let stopped = false;
  let writer: BlobWriter | undefined;
  let writerSegment = -1;
  // The previous segment, committing in the background (fsync, rename, block list) while the next
  // one is written; at most one at a time.
  let finishing: Promise<void> | undefined;
  // Chunks sent and not yet stored, oldest first: each is sealed on a sealing thread, then handed
  // to the store after the one before it (`called` chains the calls to write, so the chunks keep
  // their order in the object), then its slot is given back once its own write is done.
  const inFlight: Promise<void>[] = [];
  let called: Promise<unknown> = Promise.resolve();
  // Writes of the current segment not yet done: at most the writer's `parallel`.
  const writing = new Set<Promise<void>>();

  /** Calls write for the chunk (opening the segment's writer first); resolves to its completion. */
  const startWrite = async (segment: number, bytes: Buffer): Promise<{ done: Promise<void> }> => {
    if (stopped) throw new PackAbortedError();
    if (segment !== writerSegment) {
      if (writer) {
        await Promise.all(writing);
        await finishing;
        finishing = writer.commit();
        finishing.catch(() => {}); // awaited at the next roll, at the end, or in the cleanup
      }
      const name = `${prefix}/${segments[segment]!.name}`;
      started.push(name);
      writer = await openBlobWriter(store, name);
      writers.push(writer);
      writerSegment = segment;
    }
    while (writing.size >= (writer!.parallel ?? 1)) await Promise.race(writing);
    const done = writer!.write(bytes);
    writing.add(done);
    const settle = () => writing.delete(done);
    done.then(settle, settle);
    return { done };
  };

  /** A chunk hashed (or being hashed) and not yet sent. */
  interface Filled {
    slot: Buffer;
    hashed: Promise<void>;
  }
  const filled = (slot: Buffer, length: number): Filled => {
    const hashed = hash.update(slot, length);
    hashed.catch(() => {});
    return { slot, hashed };
  };

  /** Places the chunk (segment, extent), then seals it once hashed, and stores it, in the background. */
  const send = ({ slot, hashed }: Filled, length: number, final: boolean) => {
    let segment = segments[segments.length - 1];
    if (!segment || segment.size >= segmentSize) {
      segment = { name: segmentName(segments.length), size: 0, firstChunk: chunkIndex, chunks: [] };
      segments.push(segment);
    }
    const sealedLength = length + SEAL_OVERHEAD;
    segment.chunks.push([segment.size, sealedLength]);
    segment.size += sealedLength;
    const at = segments.length - 1;
    const aad = encodeChunkAad({ objectId, segment: at, chunk: chunkIndex++, final });
    const sealed = hashed.then(() => sealSlot(okey, aad, slot, length));
    const turn = Promise.all([sealed, called]).then(() => startWrite(at, slotSealed(slot, length)));
    const stored = turn.then(({ done }) => done).then(() => releaseSlot(slot)); // on failure the slot is left to the collector
    stored.catch(() => {});
    called = turn;
    inFlight.push(stored);
  };

  const iterator: AsyncIterator<unknown> = opts.keepSourceOpen
    ? source.iterator({ destroyOnReturn: false })
    : source[Symbol.asyncIterator]();
  let sourceDone = false;
  try {
    if (signal?.aborted) throw new PackAbortedError(signal.reason);
    let slot = takeSlot(chunkSize);
    let data = slotData(slot, chunkSize);
    let fill = 0;
    // The newest full chunk, held until the next byte or the end says whether it is the last one.
    let full: Filled | undefined;
    for (;;) {
      const next = iterator.next();
      next.catch(() => {}); // an abort may leave it pending; never an unhandled rejection
      const { value, done } = await raceAbort(next, signal);
      if (done) {
        sourceDone = true;
        break;
      }
      const piece: Buffer = typeof value === 'string' ? Buffer.from(value) : (value as Buffer);
      if (piece.length === 0) continue;
      received += piece.length;
      if (maxBytes !== undefined && received > maxBytes) throw new TooLargeError(maxBytes);
      let off = 0;
      while (off < piece.length) {
        if (full) {
          send(full, chunkSize, false); // more bytes follow, so it is not the last chunk
          full = undefined;
          // More when the store takes several writes at once (Azure: one block each).
          while (inFlight.length > CHUNKS_IN_FLIGHT + (writer?.parallel ?? 1) - 1) await raceAbort(inFlight.shift()!, signal);
        }
        const n = Math.min(chunkSize - fill, piece.length - off);
        piece.copy(data, fill, off, off + n);
        fill += n;
        off += n;
        if (fill === chunkSize) {
          full = filled(slot, chunkSize);
          slot = takeSlot(chunkSize);
          data = slotData(slot, chunkSize);
          fill = 0;
        }
      }
    }
    if (full) send(full, chunkSize, fill === 0);
    if (fill > 0) send(filled(slot, fill), fill, true);
    else releaseSlot(slot);
    const sha256 = hash.digest();
    sha256.catch(() => {});
    while (inFlight.length > 0) await raceAbort(inFlight.shift()!, signal);
    if (writer) await raceAbort(writer.commit(), signal);
    if (finishing) await raceAbort(finishing, signal);

    const sealedBytes = segments.reduce((sum, s) => sum + s.size, 0);
    const manifest: PackManifest = {
      format: 'berth.pack',
      version: 1,
      objectId,
      keyVersion,
      chunkSize,
      size: received,
      sha256: await raceAbort(sha256, signal),
      chunks: chunkIndex,
      sealedBytes,
      segments,
    };
    const body = encodeManifest(okey, manifest);
    started.push(manifestName);
    await store.put(manifestName, body, body.length);
    return {
      size: manifest.size,
      sha256: manifest.sha256,
      chunks: manifest.chunks,
      segments: segments.map((s) => ({ name: `${prefix}/${s.name}`, size: s.size, objects: s.chunks.length })),
      sealedBytes,
      manifest: manifestName,
    };
  } catch (err) {
    stopped = true;
    hash.digest().catch(() => {}); // drops the running hash, if it still runs
    if (!sourceDone) {
      if (opts.keepSourceOpen) void iterator.return?.().catch(() => {});
      else source.destroy();
    }
    // Abort first so that a write stuck on the store gives up, then wait for every chunk to settle
    // (none opens an object once stopped) before deleting what was written.
    await Promise.all(writers.map((w) => w.abort()));
    await Promise.allSettled(inFlight);
    await Promise.all(writers.map((w) => w.abort()));
    await Promise.allSettled(started.map((name) => store.delete(name)));
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Unpacking

async function readAllCapped(stream: Readable, cap: number, what: string): Promise<Buffer> {
  const pieces: Buffer[] = [];
  let total = 0;
  try {
    for await (const piece of stream) {
      total += (piece as Buffer).length;
      if (total > cap) throw new PackIntegrityError(`${what} is larger than ${cap} bytes`);
      pieces.push(piece as Buffer);
    }
  } finally {
    stream.destroy();
  }
  return Buffer.concat(pieces, total);
}

const isInt = (v: unknown, min = 0): v is number => Number.isSafeInteger(v) && (v as number) >= min;

/** Checks that a decrypted manifest is self-consistent; throws PackIntegrityError. */
function checkManifest(m: PackManifest, objectId: string, headerKeyVersion: number): void {
  const bad = (why: string): never => {
    throw new PackIntegrityError(`manifest of ${objectId} is inconsistent: ${why}`);
  };
  if (typeof m !== 'object' || m === null) bad('not an object');
  if (m.format !== 'berth.pack' || m.version !== 1) bad(`unknown format ${String(m.format)} v${String(m.version)}`);
  if (m.objectId !== objectId) bad('object id');
  if (m.keyVersion !== headerKeyVersion) bad('key version');
  if (!isInt(m.chunkSize, 1) || !isInt(m.size) || !isInt(m.chunks) || !isInt(m.sealedBytes)) bad('sizes');
  if (typeof m.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(m.sha256)) bad('sha256');
  if (m.chunks !== Math.ceil(m.size / m.chunkSize)) bad('chunk count');
  if (!Array.isArray(m.segments)) bad('segments');
  let chunk = 0;
  let sealed = 0;
  m.segments.forEach((s, i) => {
    if (s.name !== segmentName(i)) bad(`segment ${i} name`);
    if (s.firstChunk !== chunk || !Array.isArray(s.chunks) || s.chunks.length === 0) bad(`segment ${i} chunks`);
    let offset = 0;
    for (const entry of s.chunks) {
      const plain = chunk === m.chunks - 1 ? m.size - chunk * m.chunkSize : m.chunkSize;
      if (!Array.isArray(entry) || entry[0] !== offset || entry[1] !== plain + SEAL_OVERHEAD) bad(`chunk ${chunk} extent`);
      offset += entry[1];
      chunk++;
    }
    if (s.size !== offset) bad(`segment ${i} size`);
    sealed += offset;
  });
  if (chunk !== m.chunks) bad('chunks listed');
  if (sealed !== m.sealedBytes) bad('sealed bytes');
}

/** Reads and authenticates a packed item's manifest. Throws SealError / PackIntegrityError. */
export async function readManifest(opts: { store: BlobStore; manifest: string; objectId: string; key: Buffer }): Promise<PackManifest> {
  checkKey(opts.key);
  checkObjectId(opts.objectId);
  return (await loadManifest(opts, objectKey(opts.key, opts.objectId))).manifest;
}

async function loadManifest(
  opts: { store: BlobStore; manifest: string; objectId: string },
  okey: Buffer,
): Promise<{ manifest: PackManifest }> {
  const raw = await readAllCapped(await opts.store.get(opts.manifest), MAX_MANIFEST_BYTES, `manifest ${opts.manifest}`);
  if (raw.length < MANIFEST_HEADER + SEAL_OVERHEAD || !raw.subarray(0, MANIFEST_MAGIC.length).equals(MANIFEST_MAGIC)) {
    throw new PackIntegrityError(`${opts.manifest} is not a pack manifest`);
  }
  const header = raw.subarray(0, MANIFEST_HEADER);
  const json = openRaw(okey, raw.subarray(MANIFEST_HEADER), manifestAad(header, opts.objectId));
  let manifest: PackManifest;
  try {
    manifest = JSON.parse(json.toString('utf8')) as PackManifest;
  } catch (err) {
    throw new PackIntegrityError(`manifest of ${opts.objectId} is not JSON`, { cause: err });
  }
  checkManifest(manifest, opts.objectId, header.readUInt32BE(MANIFEST_MAGIC.length));
  return { manifest };
}

/** Reads exact byte counts from a stream. */
class ExactReader {
  private readonly it: AsyncIterator<Buffer>;
  private rest: Buffer | undefined;

  constructor(stream: Readable) {
    this.it = stream[Symbol.asyncIterator]();
  }

  /** Fills `out` from the stream. */
  async read(out: Buffer): Promise<Buffer> {
    const n = out.length;
    let fill = 0;
    while (fill < n) {
      let piece = this.rest;
      this.rest = undefined;
      if (!piece) {
        const { value, done } = await this.it.next();
        if (done) throw new PackIntegrityError('segment object is shorter than its manifest says');
        piece = value;
      }
      const take = Math.min(n - fill, piece.length);
      piece.copy(out, fill, 0, take);
      fill += take;
      if (take < piece.length) this.rest = piece.subarray(take);
    }
    return out;
  }

  async close(): Promise<void> {
    await this.it.return?.(); // destroys the stream
  }
}

/**
 * Streams the plain bytes of a packed item (or of a range of it). Resolves once the manifest is
 * authenticated (rejects with SealError/PackIntegrityError/BlobNotFoundError/PackRangeError);
 * problems found in the segments afterwards are emitted as 'error' on the stream, before any
 * byte of the offending chunk.
 */
export async function unpackStream(opts: UnpackOptions): Promise<UnpackResult> {
  const { store, objectId, key } = opts;
  checkKey(key);
  checkObjectId(objectId);
  const okey = objectKey(key, objectId);
  const { manifest: m } = await loadManifest(opts, okey);

  const start = opts.range?.start ?? 0;
  const requestedEnd = opts.range?.end;
  if (
    !Number.isSafeInteger(start) ||
    start < 0 ||
    (requestedEnd !== undefined && (!Number.isSafeInteger(requestedEnd) || requestedEnd < start))
  ) {
    throw new PackRangeError(start, requestedEnd, m.size);
  }
  if (start > m.size) throw new PackRangeError(start, requestedEnd, m.size);
  const end = Math.min(requestedEnd ?? m.size - 1, m.size - 1);
  const length = Math.max(0, end - start + 1);
  const full = start === 0 && length === m.size;
  const manifestDir = opts.manifest.slice(0, opts.manifest.lastIndexOf('/') + 1);

  /** Sealed chunks of the range in order, each read into a slot of its own, one segment object at a time. */
  async function* sealedChunks(firstChunk: number, lastChunk: number) {
    for (let si = 0; si < m.segments.length; si++) {
      const seg = m.segments[si]!;
      const segFirst = seg.firstChunk;
      const segLast = seg.firstChunk + seg.chunks.length - 1;
      if (segLast < firstChunk || segFirst > lastChunk) continue;
      const a = Math.max(firstChunk, segFirst);
      const b = Math.min(lastChunk, segLast);
      const [fromOffset] = seg.chunks[a - segFirst]!;
      const [lastOffset, lastLength] = seg.chunks[b - segFirst]!;
      const reader = await openSegment(store, manifestDir + seg.name, fromOffset, lastOffset + lastLength - 1);
      try {
        for (let c = a; c <= b; c++) {
          const length = seg.chunks[c - segFirst]![1] - SEAL_OVERHEAD;
          const slot = takeSlot(m.chunkSize);
          try {
            await reader.read(slotSealed(slot, length));
          } catch (err) {
            releaseSlot(slot);
            throw err;
          }
          yield { segment: si, chunk: c, slot, length };
        }
      } finally {
        await reader.close();
      }
    }
  }

  /**
   * The plain bytes of the range, chunk by chunk, each a view of a slot that is given back when
   * the next one is asked for.
   */
  async function* plainPieces(): AsyncGenerator<Buffer> {
    if (length === 0) return;
    const firstChunk = Math.floor(start / m.chunkSize);
    const lastChunk = Math.floor(end / m.chunkSize);
    const hash = full && opts.verifySha256 ? createHash('sha256') : undefined;
    // Chunks being opened on the sealing threads ahead of the one being delivered, oldest first.
    const opening: { chunk: number; slot: Buffer; length: number; opened: Promise<void> }[] = [];
    let delivered = 0;
    const deliver = async function* () {
      const { chunk, slot, length: chunkLength, opened } = opening.shift()!;
      try {
        await opened;
      } catch (err) {
        releaseSlot(slot); // the thread is done with it; what it holds is never read
        throw err;
      }
      const chunkStart = chunk * m.chunkSize;
      const out = slotData(slot, chunkLength).subarray(Math.max(0, start - chunkStart), Math.min(chunkLength, end - chunkStart + 1));
      hash?.update(out);
      delivered += out.length;
      yield out;
      releaseSlot(slot);
    };
    const chunks = sealedChunks(firstChunk, lastChunk);
    try {
      let failed: { error: unknown } | undefined;
      for (;;) {
        let next: IteratorResult<{ segment: number; chunk: number; slot: Buffer; length: number }>;
        try {
          next = await chunks.next();
        } catch (error) {
          failed = { error }; // a segment that cannot be read: first deliver every chunk before it
          break;
        }
        if (next.done) break;
        const { segment, chunk, slot, length: chunkLength } = next.value;
        const aad = encodeChunkAad({ objectId, segment, chunk, final: chunk === m.chunks - 1 });
        const opened = openSlot(okey, aad, slot, chunkLength);
        opened.catch(() => {});
        opening.push({ chunk, slot, length: chunkLength, opened });
        while (opening.length > OPENS_IN_FLIGHT) yield* deliver();
      }
      while (opening.length > 0) yield* deliver();
      if (failed) throw failed.error;
    } finally {
      // Slots still being opened are left to the collector: their threads may not be done with them.
      await chunks.return(undefined);
    }
    if (delivered !== length) throw new PackIntegrityError(`delivered ${delivered} bytes, expected ${length}`);
    if (hash && hash.digest('hex') !== m.sha256) throw new PackIntegrityError(`sha256 of ${objectId} does not match`);
  }

  async function* copies(): AsyncGenerator<Buffer> {
    for await (const piece of plainPieces()) yield Buffer.from(piece);
  }

  let stream: Readable | undefined;
  return {
    size: m.size,
    sha256: m.sha256,
    keyVersion: m.keyVersion,
    start,
    end: start + length - 1,
    length,
    get stream() {
      stream ??= Readable.from(copies(), { objectMode: false, highWaterMark: 64 * 1024 });
      return stream;
    },
    pieces: plainPieces,
  };
}

/** Reads the sealed chunks of one segment object in order, from `from` to `to` (inclusive). */
interface SegmentReader {
  /** Fills `target` with the next bytes; PackIntegrityError if the object ends first. */
  read(target: Buffer): Promise<void>;
  close(): Promise<void>;
}

async function openSegment(store: BlobStore, name: string, from: number, to: number): Promise<SegmentReader> {
  if (!store.openReader) {
    const reader = new ExactReader(await store.get(name, { start: from, end: to }));
    return { read: async (target) => void (await reader.read(target)), close: () => reader.close() };
  }
  const reader = await store.openReader(name);
  let at = from;
  return {
    async read(target) {
      const n = await reader.read(target, at);
      if (n < target.length) throw new PackIntegrityError(`segment object ${name} is shorter than its manifest says`);
      at += n;
    },
    close: () => reader.close(),
  };
}

// ---------------------------------------------------------------------------------------------
// Deleting

/**
 * Deletes every object of the packed item under `prefix` (the manifest first, so a half-deleted
 * item can no longer be opened). Idempotent. Returns how many objects were deleted.
 */
export async function deletePacked(store: BlobStore, prefix: string): Promise<number> {
  const folder = `${normalizePrefix(prefix)}/`;
  const names: string[] = [];
  for await (const { name } of store.list(folder)) names.push(name);
  const manifestName = folder + MANIFEST_NAME;
  if (names.includes(manifestName)) await store.delete(manifestName);
  const rest = names.filter((n) => n !== manifestName);
  const CONCURRENCY = 8;
  for (let i = 0; i < rest.length; i += CONCURRENCY) {
    await Promise.all(rest.slice(i, i + CONCURRENCY).map((n) => store.delete(n)));
  }
  return names.length;
}

export { EMPTY_SHA256 };
