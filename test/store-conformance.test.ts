import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BlobNotFoundError,
  BlobRangeError,
  BlobSizeMismatchError,
  type BlobStore,
  createBlobStore,
  FsBlobStore,
  InvalidBlobNameError,
  openBlobWriter,
} from '../src/platform/store';
import { AzureBlobStore } from '../src/platform/store/azure-store';
import { type Azurite, startAzurite } from './helpers/azurite';

async function readAll(stream: Readable): Promise<Buffer> {
  const pieces: Buffer[] = [];
  for await (const piece of stream) pieces.push(piece as Buffer);
  return Buffer.concat(pieces);
}

async function listAll(store: BlobStore, prefix: string) {
  const out: { name: string; size: number }[] = [];
  for await (const item of store.list(prefix)) out.push(item);
  return out;
}

/** A stream of `data` cut into pieces of `piece` bytes, produced lazily. */
function streamOf(data: Buffer, piece = 64 * 1024): Readable {
  return Readable.from(
    (function* () {
      for (let i = 0; i < data.length; i += piece) yield data.subarray(i, i + piece);
    })(),
    { objectMode: false },
  );
}

/** A stream that yields `good` and then fails. */
function failingStream(good: Buffer): Readable {
  return Readable.from(
    (async function* () {
      yield good;
      await new Promise((r) => setTimeout(r, 5));
      throw new Error('source broke');
    })(),
    { objectMode: false },
  );
}

const uid = () => `t${randomBytes(5).toString('hex')}`;

/**
 * The one conformance suite every BlobStore implementation must pass. `setup` runs once per
 * implementation; each test works under its own random prefix.
 */
function blobStoreConformance(label: string, setup: () => Promise<{ store: BlobStore; teardown: () => Promise<void> }>) {
  describe(`BlobStore conformance: ${label}`, () => {
    let store: BlobStore;
    let teardown: (() => Promise<void>) | undefined;

    beforeAll(async () => {
      ({ store, teardown } = await setup());
    });
    afterAll(async () => {
      await teardown?.();
    });

    it('round-trips a Buffer', async () => {
      const p = uid();
      const data = randomBytes(10_000);
      await store.put(`${p}/obj`, data);
      expect((await readAll(await store.get(`${p}/obj`))).equals(data)).toBe(true);
    });

    it('round-trips a multi-piece stream (with and without a size)', async () => {
      const p = uid();
      const data = randomBytes(3 * 1024 * 1024 + 123);
      await store.put(`${p}/a`, streamOf(data, 100_000));
      await store.put(`${p}/b`, streamOf(data, 65_536), data.length);
      expect((await readAll(await store.get(`${p}/a`))).equals(data)).toBe(true);
      expect((await readAll(await store.get(`${p}/b`))).equals(data)).toBe(true);
      expect(await listAll(store, `${p}/`)).toEqual([
        { name: `${p}/a`, size: data.length },
        { name: `${p}/b`, size: data.length },
      ]);
    });

    it('stores empty objects from a Buffer and from a stream', async () => {
      const p = uid();
      await store.put(`${p}/buf`, Buffer.alloc(0));
      await store.put(`${p}/stream`, Readable.from([], { objectMode: false }), 0);
      for (const name of [`${p}/buf`, `${p}/stream`]) {
        expect((await readAll(await store.get(name))).length).toBe(0);
        expect((await readAll(await store.get(name, { start: 0 }))).length).toBe(0);
      }
      expect(await listAll(store, `${p}/`)).toEqual([
        { name: `${p}/buf`, size: 0 },
        { name: `${p}/stream`, size: 0 },
      ]);
    });

    it('reads ranges: start only, start+end (inclusive), last byte, clamped end, empty at end', async () => {
      const p = uid();
      const data = randomBytes(100_000);
      await store.put(`${p}/r`, data);
      const range = async (start: number, end?: number) => readAll(await store.get(`${p}/r`, { start, end }));
      expect((await range(0)).equals(data)).toBe(true);
      expect((await range(12_345)).equals(data.subarray(12_345))).toBe(true);
      expect((await range(10, 19)).equals(data.subarray(10, 20))).toBe(true);
      expect((await range(5, 5)).equals(data.subarray(5, 6))).toBe(true);
      expect((await range(99_999)).equals(data.subarray(99_999))).toBe(true);
      expect((await range(99_999, 99_999)).equals(data.subarray(99_999))).toBe(true);
      expect((await range(99_000, 1_000_000)).equals(data.subarray(99_000))).toBe(true);
      expect((await range(100_000)).length).toBe(0);
    });

    it('rejects impossible ranges with BlobRangeError', async () => {
      const p = uid();
      await store.put(`${p}/r`, randomBytes(100));
      await expect(store.get(`${p}/r`, { start: 101 })).rejects.toBeInstanceOf(BlobRangeError);
      await expect(store.get(`${p}/r`, { start: 10, end: 9 })).rejects.toBeInstanceOf(BlobRangeError);
      await expect(store.get(`${p}/r`, { start: -1 })).rejects.toBeInstanceOf(BlobRangeError);
    });

    it('rejects get of a missing object with BlobNotFoundError (not a stream error)', async () => {
      const p = uid();
      await expect(store.get(`${p}/missing`)).rejects.toBeInstanceOf(BlobNotFoundError);
      await expect(store.get(`${p}/missing`, { start: 3, end: 9 })).rejects.toBeInstanceOf(BlobNotFoundError);
      await store.put(`${p}/dir/x`, Buffer.from('x'));
      await expect(store.get(`${p}/dir`)).rejects.toBeInstanceOf(BlobNotFoundError);
    });

    it('deletes idempotently', async () => {
      const p = uid();
      await store.put(`${p}/d`, Buffer.from('bye'));
      await store.delete(`${p}/d`);
      await store.delete(`${p}/d`);
      await store.delete(`${p}/never/existed`);
      await expect(store.get(`${p}/d`)).rejects.toBeInstanceOf(BlobNotFoundError);
      expect(await listAll(store, `${p}/`)).toEqual([]);
      // the name is usable again after a delete
      await store.put(`${p}/d`, Buffer.from('again'));
      expect((await readAll(await store.get(`${p}/d`))).toString()).toBe('again');
    });

    it('lists by plain string prefix, in name order, with sizes', async () => {
      const p = uid();
      const objects: Record<string, number> = {
        [`${p}/a/1`]: 1,
        [`${p}/a/2`]: 22,
        [`${p}/a/sub/3`]: 333,
        [`${p}/ab/4`]: 4444,
        [`${p}/a.x`]: 5,
        [`${p}/b/6`]: 6,
      };
      await Promise.all(Object.entries(objects).map(([name, size]) => store.put(name, randomBytes(size))));
      const expectList = async (prefix: string, names: string[]) =>
        expect(await listAll(store, prefix)).toEqual(names.map((name) => ({ name, size: objects[name] })));
      await expectList(`${p}/a/`, [`${p}/a/1`, `${p}/a/2`, `${p}/a/sub/3`]);
      await expectList(`${p}/a`, [`${p}/a.x`, `${p}/a/1`, `${p}/a/2`, `${p}/a/sub/3`, `${p}/ab/4`]);
      await expectList(`${p}/a/s`, [`${p}/a/sub/3`]);
      await expectList(`${p}/a/1`, [`${p}/a/1`]);
      await expectList(`${p}/`, Object.keys(objects).sort());
      await expectList(`${p}/zz`, []);
      await expectList(`${uid()}/`, []);
      const everything = (await listAll(store, '')).map((o) => o.name);
      expect(everything).toEqual(expect.arrayContaining(Object.keys(objects)));
      expect([...everything].sort()).toEqual(everything);
    });

    it('overwrites an existing object', async () => {
      const p = uid();
      await store.put(`${p}/o`, randomBytes(5000));
      const second = randomBytes(700);
      await store.put(`${p}/o`, streamOf(second, 100));
      expect((await readAll(await store.get(`${p}/o`))).equals(second)).toBe(true);
      expect(await listAll(store, `${p}/`)).toEqual([{ name: `${p}/o`, size: 700 }]);
    });

    it('handles concurrent puts of different names', async () => {
      const p = uid();
      const items = Array.from({ length: 24 }, (_, i) => ({ name: `${p}/c/${i}`, data: randomBytes(20_000 + i * 997) }));
      await Promise.all(items.map(({ name, data }, i) => store.put(name, i % 2 ? data : streamOf(data, 4096))));
      const back = await Promise.all(items.map(async ({ name }) => readAll(await store.get(name))));
      for (const [i, buf] of back.entries()) expect(buf.equals(items[i]!.data)).toBe(true);
      expect((await listAll(store, `${p}/c/`)).length).toBe(items.length);
    });

    it('does not show an object before its put completes', async () => {
      const p = uid();
      const body = new PassThrough();
      const putting = store.put(`${p}/slow`, body);
      // The store has taken these bytes (the stream drained) and the put is still open.
      if (!body.write(randomBytes(300_000))) await once(body, 'drain');
      await expect(store.get(`${p}/slow`)).rejects.toBeInstanceOf(BlobNotFoundError);
      expect(await listAll(store, `${p}/`)).toEqual([]);
      body.end(randomBytes(10));
      await putting;
      expect(await listAll(store, `${p}/`)).toEqual([{ name: `${p}/slow`, size: 300_010 }]);
    });

    it('leaves nothing (and keeps the previous version) when the body fails', async () => {
      const p = uid();
      await expect(store.put(`${p}/f`, failingStream(randomBytes(50_000)))).rejects.toThrow('source broke');
      await expect(store.get(`${p}/f`)).rejects.toBeInstanceOf(BlobNotFoundError);
      expect(await listAll(store, `${p}/`)).toEqual([]);

      const old = randomBytes(1000);
      await store.put(`${p}/g`, old);
      await expect(store.put(`${p}/g`, failingStream(randomBytes(50_000)))).rejects.toThrow('source broke');
      expect((await readAll(await store.get(`${p}/g`))).equals(old)).toBe(true);
    });

    it('enforces the declared size', async () => {
      const p = uid();
      await expect(store.put(`${p}/s1`, streamOf(randomBytes(1000)), 999)).rejects.toBeInstanceOf(BlobSizeMismatchError);
      await expect(store.put(`${p}/s2`, streamOf(randomBytes(1000)), 1001)).rejects.toBeInstanceOf(BlobSizeMismatchError);
      await expect(store.put(`${p}/s3`, randomBytes(10), 11)).rejects.toBeInstanceOf(BlobSizeMismatchError);
      expect(await listAll(store, `${p}/`)).toEqual([]);
    });

    it('accepts every character the name rules allow', async () => {
      const name = `${uid()}/Org_1/a-b.c~d=e+f@g/_x`;
      await store.put(name, Buffer.from('ok'));
      expect((await readAll(await store.get(name))).toString()).toBe('ok');
      expect(await listAll(store, name)).toEqual([{ name, size: 2 }]);
      await store.delete(name);
    });

    it('rejects names that are not plain slash-separated keys', async () => {
      const bad = ['', '/abs', 'a//b', 'a/../../etc/passwd', '..', 'a/./b', '.hidden', 'a/b/', 'a\\b', 'a/b\0c', 'a b'];
      for (const name of bad) {
        await expect(store.put(name, Buffer.from('x')), name).rejects.toBeInstanceOf(InvalidBlobNameError);
        await expect(store.get(name), name).rejects.toBeInstanceOf(InvalidBlobNameError);
        await expect(store.delete(name), name).rejects.toBeInstanceOf(InvalidBlobNameError);
      }
      await expect(listAll(store, '../')).rejects.toBeInstanceOf(InvalidBlobNameError);
      await expect(listAll(store, '/x')).rejects.toBeInstanceOf(InvalidBlobNameError);
    });

    it('writes an object piece by piece (openBlobWriter), visible only once committed', async () => {
      const p = uid();
      const first = randomBytes(300 * 1024);
      const second = randomBytes(700 * 1024);
      const original = Buffer.concat([first, second]);
      const w = await openBlobWriter(store, `${p}/w`);
      await w.write(first);
      first.fill(0); // the store is done with a piece once its write resolves
      await w.write(second);
      second.fill(0);
      await expect(store.get(`${p}/w`)).rejects.toBeInstanceOf(BlobNotFoundError);
      expect(await listAll(store, `${p}/`)).toEqual([]);
      await w.commit();
      expect((await readAll(await store.get(`${p}/w`))).equals(original)).toBe(true);
      expect(await listAll(store, `${p}/`)).toEqual([{ name: `${p}/w`, size: original.length }]);
    });

    it('keeps writes in the order they were called when the writer takes several at once', async () => {
      const p = uid();
      const w = await openBlobWriter(store, `${p}/par`);
      const pieces = Array.from({ length: 7 }, (_, i) => randomBytes(64 * 1024 + i * 1000));
      for (let i = 0; i < pieces.length; i += w.parallel ?? 1) {
        await Promise.all(pieces.slice(i, i + (w.parallel ?? 1)).map((piece) => w.write(piece)));
      }
      await w.commit();
      expect((await readAll(await store.get(`${p}/par`))).equals(Buffer.concat(pieces))).toBe(true);
    });

    it('leaves nothing, and keeps the previous version, when a writer is abandoned', async () => {
      const p = uid();
      await store.put(`${p}/a`, Buffer.from('previous'));
      const w = await openBlobWriter(store, `${p}/a`);
      await w.write(randomBytes(100 * 1024));
      await w.abort();
      await w.abort();
      expect((await readAll(await store.get(`${p}/a`))).toString()).toBe('previous');
      const fresh = await openBlobWriter(store, `${p}/b`);
      await fresh.write(Buffer.from('never seen'));
      await fresh.abort();
      expect(await listAll(store, `${p}/`)).toEqual([{ name: `${p}/a`, size: 8 }]);
    });

    it("reads at positions into the caller's buffer (openReader, where the store has it)", async () => {
      if (!store.openReader) return;
      const p = uid();
      const data = randomBytes(1000);
      await store.put(`${p}/r`, data);
      const reader = await store.openReader(`${p}/r`);
      try {
        expect(reader.size).toBe(1000);
        const target = Buffer.alloc(300);
        expect(await reader.read(target, 0)).toBe(300);
        expect(target.equals(data.subarray(0, 300))).toBe(true);
        expect(await reader.read(target, 650)).toBe(300);
        expect(target.equals(data.subarray(650, 950))).toBe(true);
        expect(await reader.read(target, 900)).toBe(100); // short only at the end
        expect(target.subarray(0, 100).equals(data.subarray(900))).toBe(true);
        expect(await reader.read(target, 1000)).toBe(0);
      } finally {
        await reader.close();
      }
      await expect(store.openReader(`${p}/missing`)).rejects.toBeInstanceOf(BlobNotFoundError);
    });

    it('lets a reader stop early', async () => {
      const p = uid();
      await store.put(`${p}/big`, randomBytes(4 * 1024 * 1024));
      const stream = await store.get(`${p}/big`);
      for await (const piece of stream) {
        expect((piece as Buffer).length).toBeGreaterThan(0);
        break; // destroys the stream
      }
      expect(stream.destroyed).toBe(true);
      await store.delete(`${p}/big`);
    });
  });
}

// --- filesystem --------------------------------------------------------------------------------

let fsDir: string;
blobStoreConformance('filesystem', async () => {
  fsDir = await mkdtemp(join(tmpdir(), 'berth-fs-store-'));
  return { store: new FsBlobStore(fsDir), teardown: () => rm(fsDir, { recursive: true, force: true }) };
});

// A store with only put/get/delete/list: what openBlobWriter and the unpacker fall back to.
let plainDir: string;
blobStoreConformance('filesystem through put and get only', async () => {
  plainDir = await mkdtemp(join(tmpdir(), 'berth-fs-plain-'));
  const fs = new FsBlobStore(plainDir);
  const store: BlobStore = {
    put: (n, b, s) => fs.put(n, b, s),
    get: (n, r) => fs.get(n, r),
    delete: (n) => fs.delete(n),
    list: (p) => fs.list(p),
  };
  return { store, teardown: () => rm(plainDir, { recursive: true, force: true }) };
});

describe('FsBlobStore specifics', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-fs-extra-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('keeps objects inside the root, mode 0600, and prunes empty folders on delete', async () => {
    const store = new FsBlobStore(dir);
    await store.put('org/proj/art_1/seg-000000', Buffer.from('hello'));
    const path = join(dir, 'org', 'proj', 'art_1', 'seg-000000');
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    await store.delete('org/proj/art_1/seg-000000');
    expect(await readdir(dir)).toEqual([]);
  });

  it('hides and sweeps temp files left by a crashed put', async () => {
    const store = new FsBlobStore(dir);
    await store.put('x/real', Buffer.from('ok'));
    const leftover = join(dir, 'x', '.real.deadbeef0000.tmp');
    await writeFile(leftover, 'partial');
    expect(await listAll(store, '')).toEqual([{ name: 'x/real', size: 2 }]);
    expect(await store.sweepTempFiles(60_000)).toBe(0); // too recent
    expect(await store.sweepTempFiles(-1)).toBe(1);
    expect(await readdir(join(dir, 'x'))).toEqual(['real']);
  });

  it('createBlobStore defaults to <dataDir>/blobs', async () => {
    const store = await createBlobStore({ dataDir: dir });
    expect(store).toBeInstanceOf(FsBlobStore);
    expect((store as FsBlobStore).root).toBe(join(dir, 'blobs'));
    expect((await stat(join(dir, 'blobs'))).isDirectory()).toBe(true);
  });
});

// --- Azure Blob on Azurite ---------------------------------------------------------------------
// No skip: if Azurite cannot start, beforeAll throws and every test below fails.

let azurite: Azurite | undefined;
blobStoreConformance('Azure Blob (Azurite)', async () => {
  azurite = await startAzurite();
  // Small blocks so multi-megabyte bodies are staged as many blocks.
  const store = new AzureBlobStore({
    connectionString: azurite.connectionString,
    container: 'conformance',
    blockSize: 256 * 1024,
    concurrency: 3,
  });
  return {
    store,
    teardown: async () => {
      await azurite?.stop();
    },
  };
});

describe('AzureBlobStore specifics', () => {
  let az: Azurite;
  beforeAll(async () => {
    az = await startAzurite();
  });
  afterAll(async () => {
    await az?.stop();
  });

  it('createBlobStore uses Azure when a connection string is set and creates the container', async () => {
    const store = await createBlobStore({
      dataDir: '/nonexistent',
      azureConnectionString: az.connectionString,
      azureContainer: 'made-here',
    });
    expect(store).toBeInstanceOf(AzureBlobStore);
    await store.put('a/b', Buffer.from('c'));
    expect(await listAll(store, '')).toEqual([{ name: 'a/b', size: 1 }]);
    // a second store on the same container finds it existing
    const again = await createBlobStore({
      dataDir: '/nonexistent',
      azureConnectionString: az.connectionString,
      azureContainer: 'made-here',
    });
    expect((await readAll(await again.get('a/b'))).toString()).toBe('c');
  });

  it('rejects a malformed connection string at construction', async () => {
    await expect(createBlobStore({ dataDir: '/x', azureConnectionString: 'nonsense' })).rejects.toThrow();
  });
});
