import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { SEAL_OVERHEAD, SealError } from '../src/platform/crypto/seal';
import { BlobNotFoundError, type BlobStore, type ByteRange, FsBlobStore } from '../src/platform/store';
import { AzureBlobStore } from '../src/platform/store/azure-store';
import {
  deletePacked,
  EMPTY_SHA256,
  PackAbortedError,
  PackIntegrityError,
  type PackOptions,
  PackRangeError,
  type PackResult,
  packStream,
  readManifest,
  TooLargeError,
  unpackStream,
} from '../src/platform/store/pack';
import { type Azurite, startAzurite } from './helpers/azurite';

const CHUNK = 1024;
const SEGMENT = 4096; // a segment closes once it holds >= 4096 sealed bytes: 4 chunks of 1052
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const uid = () => randomBytes(5).toString('hex');

function streamOf(data: Buffer, piece = 777): Readable {
  return Readable.from(
    (function* () {
      for (let i = 0; i < data.length; i += piece) yield data.subarray(i, i + piece);
    })(),
    { objectMode: false },
  );
}

async function readAll(stream: Readable): Promise<Buffer> {
  const pieces: Buffer[] = [];
  for await (const piece of stream) pieces.push(piece as Buffer);
  return Buffer.concat(pieces);
}

/** Reads until the stream fails; returns what arrived and the error (undefined if it ended). */
async function readUntilError(stream: Readable): Promise<{ data: Buffer; error: unknown }> {
  const pieces: Buffer[] = [];
  try {
    for await (const piece of stream) pieces.push(piece as Buffer);
    return { data: Buffer.concat(pieces), error: undefined };
  } catch (error) {
    return { data: Buffer.concat(pieces), error };
  }
}

/**
 * `got` is a prefix of `data` no longer than `max` (the stream may drop verified bytes it had
 * buffered when it fails, but never delivers a wrong or unverified byte).
 */
function expectPrefix(got: Buffer, data: Buffer, max: number): void {
  expect(got.length).toBeLessThanOrEqual(max);
  expect(got.equals(data.subarray(0, got.length))).toBe(true);
}

async function names(store: BlobStore, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const { name } of store.list(prefix)) out.push(name);
  return out;
}

async function getAll(store: BlobStore, name: string): Promise<Buffer> {
  return readAll(await store.get(name));
}

interface Ctx {
  store: BlobStore;
  key: Buffer;
}

function pack(ctx: Ctx, data: Buffer, extra: Partial<PackOptions> = {}): Promise<PackResult & { prefix: string; objectId: string }> {
  const objectId = extra.objectId ?? `art_${uid()}`;
  const prefix = extra.prefix ?? `org_t/proj/${objectId}`;
  return packStream({
    store: ctx.store,
    prefix,
    objectId,
    key: ctx.key,
    keyVersion: 3,
    source: streamOf(data),
    chunkSize: CHUNK,
    segmentSize: SEGMENT,
    ...extra,
  }).then((r) => ({ ...r, prefix, objectId }));
}

async function unpack(ctx: Ctx, r: { manifest: string; objectId: string }, range?: { start: number; end?: number }) {
  const u = await unpackStream({ store: ctx.store, manifest: r.manifest, objectId: r.objectId, key: ctx.key, range });
  return { ...u, data: await readAll(u.stream) };
}

// ---------------------------------------------------------------------------------------------

describe('pack/unpack on the filesystem store', () => {
  let dir: string;
  const ctx = {} as Ctx;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-pack-'));
    ctx.store = new FsBlobStore(dir, { durable: false });
    ctx.key = randomBytes(32);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  const sizes = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 4 * CHUNK, 4 * CHUNK + 1, 9 * CHUNK + 517, 40 * CHUNK];
  it.each(sizes)('round-trips %i bytes', async (n) => {
    const data = randomBytes(n);
    const r = await pack(ctx, data);
    const chunks = Math.ceil(n / CHUNK);
    expect(r.size).toBe(n);
    expect(r.sha256).toBe(sha(data));
    expect(r.chunks).toBe(chunks);
    expect(r.sealedBytes).toBe(n + chunks * SEAL_OVERHEAD);
    expect(r.segments.length).toBe(Math.ceil(chunks / 4));
    expect(r.segments.reduce((s, x) => s + x.objects, 0)).toBe(chunks);
    expect(r.segments.reduce((s, x) => s + x.size, 0)).toBe(r.sealedBytes);
    expect(r.manifest).toBe(`${r.prefix}/manifest`);
    // exactly the segments and the manifest are stored, with the sizes reported
    const listed: Record<string, number> = {};
    for await (const { name, size } of ctx.store.list(`${r.prefix}/`)) listed[name] = size;
    const expected = Object.fromEntries(r.segments.map((s) => [s.name, s.size]));
    expect(Object.keys(listed).sort()).toEqual([...Object.keys(expected), r.manifest].sort());
    for (const [name, size] of Object.entries(expected)) expect(listed[name]).toBe(size);

    const u = await unpack(ctx, r);
    expect(u.size).toBe(n);
    expect(u.sha256).toBe(sha(data));
    expect(u.keyVersion).toBe(3);
    expect(u.length).toBe(n);
    expect(u.data.equals(data)).toBe(true);
  });

  it('packs an empty source as a manifest and no chunks', async () => {
    const r = await pack(ctx, Buffer.alloc(0));
    expect(r).toMatchObject({ size: 0, sha256: EMPTY_SHA256, chunks: 0, segments: [], sealedBytes: 0 });
    expect(await names(ctx.store, `${r.prefix}/`)).toEqual([r.manifest]);
    const u = await unpack(ctx, r);
    expect(u.data.length).toBe(0);
    expect(u.sha256).toBe(EMPTY_SHA256);
    expect((await unpack(ctx, r, { start: 0 })).data.length).toBe(0);
    await expect(unpack(ctx, r, { start: 1 })).rejects.toBeInstanceOf(PackRangeError);
  });

  it('is independent of how the source is cut into pieces', async () => {
    const data = randomBytes(6 * CHUNK + 100);
    for (const piece of [1, 7, CHUNK, CHUNK + 3, 5 * CHUNK, data.length]) {
      const r = await pack(ctx, data, { source: streamOf(data, piece) });
      expect(r.sha256).toBe(sha(data));
      expect(r.chunks).toBe(7);
      expect((await unpack(ctx, r)).data.equals(data)).toBe(true);
    }
  });

  it('works with the default chunk and segment sizes', async () => {
    const data = randomBytes(9 * 1024 * 1024 + 5);
    const r = await packStream({
      store: ctx.store,
      prefix: `org_t/proj/art_${uid()}`,
      objectId: 'art_default',
      key: ctx.key,
      keyVersion: 1,
      source: streamOf(data, 65536),
    });
    expect(r.chunks).toBe(3);
    expect(r.segments.length).toBe(1);
    const u = await unpackStream({ store: ctx.store, manifest: r.manifest, objectId: 'art_default', key: ctx.key, verifySha256: true });
    expect((await readAll(u.stream)).equals(data)).toBe(true);
  });

  describe('ranges', () => {
    const data = randomBytes(13 * CHUNK + 300); // 14 chunks, 4 segments (4+4+4+2)
    let r: Awaited<ReturnType<typeof pack>>;
    beforeAll(async () => {
      r = await pack(ctx, data);
      expect(r.segments.length).toBe(4);
    });
    const cases: [string, number, number | undefined][] = [
      ['inside one chunk', 10, 20],
      ['a single byte', 5000, 5000],
      ['a whole chunk exactly', CHUNK, 2 * CHUNK - 1],
      ['across two chunks', CHUNK - 5, CHUNK + 5],
      ['across segments', 3 * CHUNK + 1, 9 * CHUNK + 7],
      ['from a start to the end', 6000, undefined],
      ['the last byte', 13 * CHUNK + 299, undefined],
      ['everything, explicitly', 0, 13 * CHUNK + 299],
      ['an end past the size (clamped)', 13 * CHUNK, 10 ** 9],
      ['empty at the very end', 13 * CHUNK + 300, undefined],
    ];
    it.each(cases)('%s', async (_label, start, end) => {
      const u = await unpack(ctx, r, { start, end });
      const expected = data.subarray(start, end === undefined ? undefined : end + 1);
      expect(u.data.equals(expected)).toBe(true);
      expect(u.length).toBe(expected.length);
      expect(u.start).toBe(start);
      expect(u.size).toBe(data.length);
    });

    it('rejects ranges that cannot be satisfied', async () => {
      await expect(unpack(ctx, r, { start: data.length + 1 })).rejects.toBeInstanceOf(PackRangeError);
      await expect(unpack(ctx, r, { start: 10, end: 9 })).rejects.toBeInstanceOf(PackRangeError);
      await expect(unpack(ctx, r, { start: -1 })).rejects.toBeInstanceOf(PackRangeError);
    });

    it('reads only the bytes of the chunks it needs', async () => {
      const gets: { name: string; range?: ByteRange }[] = [];
      const spy: BlobStore = {
        put: (n, b, s) => ctx.store.put(n, b, s),
        delete: (n) => ctx.store.delete(n),
        list: (p) => ctx.store.list(p),
        get: (name, range) => {
          gets.push({ name, range });
          return ctx.store.get(name, range);
        },
      };
      const u = await unpackStream({
        store: spy,
        manifest: r.manifest,
        objectId: r.objectId,
        key: ctx.key,
        range: { start: 5 * CHUNK + 1, end: 5 * CHUNK + 2 },
      });
      expect((await readAll(u.stream)).equals(data.subarray(5 * CHUNK + 1, 5 * CHUNK + 3))).toBe(true);
      // the manifest, then chunk 5 = second chunk of segment 1, and nothing else
      const c = CHUNK + SEAL_OVERHEAD;
      expect(gets).toEqual([
        { name: r.manifest, range: undefined },
        { name: `${r.prefix}/seg-000001`, range: { start: c, end: 2 * c - 1 } },
      ]);
    });
  });

  describe('integrity', () => {
    const data = randomBytes(10 * CHUNK + 10); // 11 chunks, 3 segments (4+4+3)

    it('fails, without wrong data, when a byte of a segment is flipped', async () => {
      for (const [segment, offset, badChunk] of [
        [0, 0, 0], // nonce of chunk 0
        [0, 500, 0], // ciphertext
        [1, CHUNK + SEAL_OVERHEAD + 1030, 5], // tag area of chunk 5
        [2, 2 * (CHUNK + SEAL_OVERHEAD) + 12, 10], // first ciphertext byte of the last chunk
      ] as const) {
        const r = await pack(ctx, data);
        const name = r.segments[segment]!.name;
        const bytes = await getAll(ctx.store, name);
        bytes[offset]! ^= 0x01;
        await ctx.store.put(name, bytes);
        const { data: got, error } = await readUntilError(
          (await unpackStream({ ...ctx, manifest: r.manifest, objectId: r.objectId })).stream,
        );
        expect(error).toBeInstanceOf(SealError);
        // everything before the damaged chunk, and not one byte of it
        expectPrefix(got, data, badChunk * CHUNK);
        // a range touching only that chunk fails too
        const u = await unpackStream({
          ...ctx,
          manifest: r.manifest,
          objectId: r.objectId,
          range: { start: badChunk * CHUNK + 3, end: badChunk * CHUNK + 3 },
        });
        const partial = await readUntilError(u.stream);
        expect(partial.error).toBeInstanceOf(SealError);
        expect(partial.data.length).toBe(0);
      }
    });

    it('rejects a tampered manifest', async () => {
      const r = await pack(ctx, data);
      const original = await getAll(ctx.store, r.manifest);
      for (const offset of [0, 9, 8 + 4 + 3, 40, original.length - 1]) {
        const bytes = Buffer.from(original);
        bytes[offset]! ^= 0x20;
        await ctx.store.put(r.manifest, bytes);
        await expect(unpackStream({ ...ctx, manifest: r.manifest, objectId: r.objectId })).rejects.toBeInstanceOf(SealError);
      }
      await ctx.store.put(r.manifest, original.subarray(0, 30));
      await expect(unpackStream({ ...ctx, manifest: r.manifest, objectId: r.objectId })).rejects.toBeInstanceOf(SealError);
      await ctx.store.put(r.manifest, original);
      expect((await unpack(ctx, r)).data.equals(data)).toBe(true);
    });

    it('rejects the wrong key and the wrong object id', async () => {
      const r = await pack(ctx, data);
      await expect(unpackStream({ ...ctx, key: randomBytes(32), manifest: r.manifest, objectId: r.objectId })).rejects.toBeInstanceOf(
        SealError,
      );
      await expect(unpackStream({ ...ctx, manifest: r.manifest, objectId: 'art_other' })).rejects.toBeInstanceOf(SealError);
      await expect(readManifest({ ...ctx, key: randomBytes(32), manifest: r.manifest, objectId: r.objectId })).rejects.toBeInstanceOf(
        SealError,
      );
      const m = await readManifest({ ...ctx, manifest: r.manifest, objectId: r.objectId });
      expect(m).toMatchObject({ objectId: r.objectId, keyVersion: 3, chunkSize: CHUNK, size: data.length, chunks: 11, sha256: sha(data) });
    });

    it('fails when chunks are swapped within a segment', async () => {
      const r = await pack(ctx, data);
      const name = r.segments[0]!.name;
      const bytes = await getAll(ctx.store, name);
      const c = CHUNK + SEAL_OVERHEAD;
      const swapped = Buffer.concat([bytes.subarray(c, 2 * c), bytes.subarray(0, c), bytes.subarray(2 * c)]);
      await ctx.store.put(name, swapped);
      const { data: got, error } = await readUntilError(
        (await unpackStream({ ...ctx, manifest: r.manifest, objectId: r.objectId })).stream,
      );
      expect(error).toBeInstanceOf(SealError);
      expect(got.length).toBe(0);
    });

    it('fails when segment objects are swapped', async () => {
      const r = await pack(ctx, data);
      const [a, b] = [r.segments[0]!.name, r.segments[1]!.name];
      const [ba, bb] = [await getAll(ctx.store, a), await getAll(ctx.store, b)];
      await ctx.store.put(a, bb);
      await ctx.store.put(b, ba);
      const { data: got, error } = await readUntilError(
        (await unpackStream({ ...ctx, manifest: r.manifest, objectId: r.objectId })).stream,
      );
      expect(error).toBeInstanceOf(SealError);
      expect(got.length).toBe(0);
    });

    it('fails when a segment comes from another object sealed under the same key', async () => {
      const r1 = await pack(ctx, data);
      const r2 = await pack(ctx, randomBytes(data.length));
      await ctx.store.put(r1.segments[1]!.name, await getAll(ctx.store, r2.segments[1]!.name));
      const { data: got, error } = await readUntilError(
        (await unpackStream({ ...ctx, manifest: r1.manifest, objectId: r1.objectId })).stream,
      );
      expect(error).toBeInstanceOf(SealError);
      expectPrefix(got, data, 4 * CHUNK);
    });

    it('fails when the last chunk is cut off or a segment is missing', async () => {
      const r = await pack(ctx, data);
      const last = r.segments[2]!.name;
      const bytes = await getAll(ctx.store, last);
      await ctx.store.put(last, bytes.subarray(0, bytes.length - (10 + SEAL_OVERHEAD)));
      let res = await readUntilError((await unpackStream({ ...ctx, manifest: r.manifest, objectId: r.objectId })).stream);
      expect(res.error).toBeInstanceOf(PackIntegrityError);
      expectPrefix(res.data, data, 10 * CHUNK);

      await ctx.store.delete(last);
      res = await readUntilError((await unpackStream({ ...ctx, manifest: r.manifest, objectId: r.objectId })).stream);
      expect(res.error).toBeInstanceOf(BlobNotFoundError);
      expectPrefix(res.data, data, 8 * CHUNK);
    });

    it('fails when the final chunk is replaced by a non-final one (truncation at a chunk boundary)', async () => {
      // Two objects with the same id under the same key: one 8 chunks long, one 12. Serving the
      // first 8 chunks of the longer one as the shorter one fails, because chunk 7 of the long
      // one was sealed as "not final".
      const objectId = `art_${uid()}`;
      const long = randomBytes(12 * CHUNK);
      const short = long.subarray(0, 8 * CHUNK);
      const rLong = await pack(ctx, long, { objectId, prefix: `org_t/proj/${objectId}-long` });
      const rShort = await pack(ctx, short, { objectId, prefix: `org_t/proj/${objectId}-short` });
      for (const i of [0, 1]) await ctx.store.put(rShort.segments[i]!.name, await getAll(ctx.store, rLong.segments[i]!.name));
      const res = await readUntilError((await unpackStream({ ...ctx, manifest: rShort.manifest, objectId })).stream);
      expect(res.error).toBeInstanceOf(SealError);
      expectPrefix(res.data, short, 7 * CHUNK);
    });
  });

  describe('failures while packing leave nothing behind', () => {
    it('TooLargeError as soon as maxBytes is passed', async () => {
      const prefix = `org_t/proj/art_${uid()}`;
      const source = streamOf(randomBytes(30 * CHUNK), 500);
      await expect(pack(ctx, Buffer.alloc(0), { prefix, source, maxBytes: 20 * CHUNK })).rejects.toBeInstanceOf(TooLargeError);
      expect(await names(ctx.store, `${prefix}/`)).toEqual([]);
      expect(source.destroyed).toBe(true);
      // the limit itself is allowed
      const ok = await pack(ctx, Buffer.alloc(0), { source: streamOf(randomBytes(20 * CHUNK)), maxBytes: 20 * CHUNK });
      expect(ok.size).toBe(20 * CHUNK);
      await expect(pack(ctx, Buffer.alloc(0), { source: streamOf(randomBytes(1)), maxBytes: 0 })).rejects.toBeInstanceOf(TooLargeError);
    });

    it('keepSourceOpen leaves the source alive on failure', async () => {
      const prefix = `org_t/proj/art_${uid()}`;
      const source = new PassThrough();
      source.write(randomBytes(3 * CHUNK));
      const packing = pack(ctx, Buffer.alloc(0), { prefix, source, maxBytes: 2 * CHUNK, keepSourceOpen: true });
      await expect(packing).rejects.toBeInstanceOf(TooLargeError);
      expect(source.destroyed).toBe(false);
      source.end();
      source.resume();
      expect(await names(ctx.store, `${prefix}/`)).toEqual([]);
    });

    it('the source failing after several segments', async () => {
      const prefix = `org_t/proj/art_${uid()}`;
      const source = Readable.from(
        (async function* () {
          for (let i = 0; i < 25; i++) yield randomBytes(CHUNK / 2);
          throw new Error('client went away');
        })(),
        { objectMode: false },
      );
      await expect(pack(ctx, Buffer.alloc(0), { prefix, source })).rejects.toThrow('client went away');
      expect(await names(ctx.store, `${prefix}/`)).toEqual([]);
    });

    it('an abort through the signal, including while the source is stalled', async () => {
      const prefix = `org_t/proj/art_${uid()}`;
      const source = new PassThrough();
      source.write(randomBytes(10 * CHUNK)); // then nothing more arrives
      const ac = new AbortController();
      const packing = pack(ctx, Buffer.alloc(0), { prefix, source, signal: ac.signal });
      await vi.waitFor(async () => expect((await names(ctx.store, `${prefix}/`)).length).toBeGreaterThan(0)); // segments were written
      ac.abort();
      await expect(packing).rejects.toBeInstanceOf(PackAbortedError);
      expect(await names(ctx.store, `${prefix}/`)).toEqual([]);
      expect(source.destroyed).toBe(true);

      const already = AbortSignal.abort();
      await expect(pack(ctx, randomBytes(10), { prefix, signal: already })).rejects.toBeInstanceOf(PackAbortedError);
      expect(await names(ctx.store, `${prefix}/`)).toEqual([]);
    });

    it('a store failing in the middle', async () => {
      const prefix = `org_t/proj/art_${uid()}`;
      let puts = 0;
      const flaky: BlobStore = {
        get: (n, r) => ctx.store.get(n, r),
        delete: (n) => ctx.store.delete(n),
        list: (p) => ctx.store.list(p),
        put: async (n, body, s) => {
          if (++puts === 3 && !Buffer.isBuffer(body)) {
            // consume a little, then fail like a full disk
            for await (const _ of body) break;
            throw new Error('ENOSPC (simulated)');
          }
          return ctx.store.put(n, body, s);
        },
      };
      await expect(pack({ ...ctx, store: flaky }, randomBytes(30 * CHUNK), { prefix })).rejects.toThrow('ENOSPC');
      expect(await names(ctx.store, `${prefix}/`)).toEqual([]);
    });
  });

  it('deletePacked removes one item and nothing else', async () => {
    const base = `org_t/proj/art_${uid()}`;
    const a = await pack(ctx, randomBytes(9 * CHUNK), { prefix: `${base}1` });
    const b = await pack(ctx, randomBytes(9 * CHUNK), { prefix: `${base}10` });
    expect(await deletePacked(ctx.store, a.prefix)).toBe(4); // 3 segments + manifest
    expect(await names(ctx.store, `${a.prefix}/`)).toEqual([]);
    expect((await names(ctx.store, `${b.prefix}/`)).length).toBe(4);
    expect(await deletePacked(ctx.store, `${a.prefix}/`)).toBe(0);
    await expect(unpackStream({ ...ctx, manifest: a.manifest, objectId: a.objectId })).rejects.toBeInstanceOf(BlobNotFoundError);
  });

  it('keeps memory flat: bounded read-ahead while packing and unpacking', async () => {
    // A store that consumes slowly; the packer must not read the source far ahead of it.
    const chunkSize = 64 * 1024;
    const total = 64 * chunkSize;
    let produced = 0;
    let consumed = 0;
    let maxLead = 0;
    const source = Readable.from(
      (function* () {
        for (let i = 0; i < total / 16384; i++) {
          produced += 16384;
          maxLead = Math.max(maxLead, produced - consumed);
          yield randomBytes(16384);
        }
      })(),
      { objectMode: false },
    );
    const slow: BlobStore = {
      get: (n, r) => ctx.store.get(n, r),
      delete: (n) => ctx.store.delete(n),
      list: (p) => ctx.store.list(p),
      put: (n, body, s) => {
        if (Buffer.isBuffer(body)) return ctx.store.put(n, body, s);
        const counted = body.pipe(
          new Transform({
            highWaterMark: 1024,
            transform(piece: Buffer, _e, cb) {
              setTimeout(() => {
                consumed += piece.length;
                cb(null, piece);
              }, 1);
            },
          }),
        );
        return ctx.store.put(n, counted, s);
      },
    };
    const r = await packStream({
      store: slow,
      prefix: `org_t/proj/art_${uid()}`,
      objectId: 'art_flat',
      key: ctx.key,
      keyVersion: 1,
      source,
      chunkSize,
      segmentSize: 16 * chunkSize,
    });
    expect(r.size).toBe(total);
    // the chunk being filled + the held-back chunk + one in flight + stream buffers
    expect(maxLead).toBeLessThan(6 * chunkSize);

    // A slow consumer: the unpacker must not read the store far ahead of it. (Read buffers of
    // 16 KiB here; the store's own read-ahead, 1 MiB by default, adds a constant.)
    const smallReads = new FsBlobStore(dir, { durable: false, readHighWaterMark: 16 * 1024 });
    let fetched = 0;
    const counting: BlobStore = {
      ...slow,
      get: async (n, range) => {
        const s = await smallReads.get(n, range);
        return s.pipe(
          new Transform({
            transform(piece: Buffer, _e, cb) {
              fetched += piece.length;
              cb(null, piece);
            },
          }),
        );
      },
    };
    const u = await unpackStream({ store: counting, manifest: r.manifest, objectId: 'art_flat', key: ctx.key });
    let delivered = 0;
    let maxAhead = 0;
    await pipeline(
      u.stream,
      new Writable({
        highWaterMark: 1024,
        write(piece: Buffer, _e, cb) {
          delivered += piece.length;
          maxAhead = Math.max(maxAhead, fetched - delivered);
          setTimeout(cb, 1);
        },
      }),
    );
    expect(delivered).toBe(total);
    expect(maxAhead).toBeLessThan(5 * (chunkSize + SEAL_OVERHEAD));
  });
});

// ---------------------------------------------------------------------------------------------
// Fails (never skips) when Azurite cannot start.

describe('pack/unpack on Azure Blob (Azurite)', () => {
  let az: Azurite;
  const ctx = {} as Ctx;
  beforeAll(async () => {
    az = await startAzurite();
    ctx.store = new AzureBlobStore({ connectionString: az.connectionString, container: 'packs', blockSize: 1024 * 1024 });
    ctx.key = randomBytes(32);
  });
  afterAll(async () => {
    await az?.stop();
  });

  it('round-trips a multi-segment item, with ranges, and deletes it', async () => {
    const data = randomBytes(5 * 1024 * 1024 + 12345);
    const objectId = `art_${uid()}`;
    const prefix = `org_t/proj/${objectId}`;
    const r = await packStream({
      store: ctx.store,
      prefix,
      objectId,
      key: ctx.key,
      keyVersion: 7,
      source: streamOf(data, 100_000),
      chunkSize: 256 * 1024,
      segmentSize: 1024 * 1024,
    });
    expect(r.sha256).toBe(sha(data));
    expect(r.chunks).toBe(21);
    expect(r.segments.length).toBe(6);
    const u = await unpackStream({ store: ctx.store, manifest: r.manifest, objectId, key: ctx.key, verifySha256: true });
    expect((await readAll(u.stream)).equals(data)).toBe(true);
    const start = 1024 * 1024 - 7;
    const end = 3 * 1024 * 1024 + 99;
    const part = await unpackStream({ store: ctx.store, manifest: r.manifest, objectId, key: ctx.key, range: { start, end } });
    expect((await readAll(part.stream)).equals(data.subarray(start, end + 1))).toBe(true);
    expect(await deletePacked(ctx.store, prefix)).toBe(7);
    expect(await names(ctx.store, `${prefix}/`)).toEqual([]);
  });

  it('leaves nothing behind after TooLargeError', async () => {
    const prefix = `org_t/proj/art_${uid()}`;
    await expect(
      packStream({
        store: ctx.store,
        prefix,
        objectId: 'art_big',
        key: ctx.key,
        keyVersion: 1,
        source: streamOf(randomBytes(3 * 1024 * 1024), 65536),
        chunkSize: 128 * 1024,
        segmentSize: 512 * 1024,
        maxBytes: 2 * 1024 * 1024,
      }),
    ).rejects.toBeInstanceOf(TooLargeError);
    expect(await names(ctx.store, `${prefix}/`)).toEqual([]);
  });
});
