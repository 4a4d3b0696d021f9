import { randomBytes } from 'node:crypto';
import { type Dir, constants as fsc } from 'node:fs';
import { type FileHandle, mkdir, open, opendir, rename, rmdir, stat, unlink } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import {
  type BlobListing,
  BlobNotFoundError,
  BlobRangeError,
  type BlobReader,
  BlobSizeMismatchError,
  type BlobStore,
  type BlobWriter,
  type ByteRange,
  validateBlobName,
  validateBlobPrefix,
  validateRange,
} from './blob-store';

export interface FsBlobStoreOptions {
  /**
   * fdatasync each object before it is renamed into place, and fsync its directory after, so a
   * completed put survives a power loss. Default true. (Turning it off only makes sense for tests.)
   */
  durable?: boolean;
  /** Read buffer size for get streams. Default 1 MiB. */
  readHighWaterMark?: number;
}

const TMP_SUFFIX = '.tmp';

/**
 * Blob store on the local filesystem: object `a/b/c` is the file `<root>/a/b/c` (mode 0600).
 *
 * - put writes `<dir>/.c.<random>.tmp`, fdatasyncs it, then renames it over `c`: a crash mid-write
 *   leaves at most a dot-temp file (never listed, never readable as an object), never a partial `c`.
 *   Leftover temp files from a crash can be removed with sweepTempFiles().
 * - Names are validated (validateBlobName) and resolved strictly inside the root.
 * - delete removes the file and then any directories it leaves empty.
 * - Limitation compared with Azure: a name cannot be both an object and a "directory" of other
 *   objects (`a/b` and `a/b/c`); such a put fails with the filesystem's ENOTDIR/EISDIR error.
 */
export class FsBlobStore implements BlobStore {
  readonly root: string;
  private readonly durable: boolean;
  private readonly readHighWaterMark: number;

  constructor(root: string, options: FsBlobStoreOptions = {}) {
    this.root = resolve(root);
    this.durable = options.durable ?? true;
    this.readHighWaterMark = options.readHighWaterMark ?? 1024 * 1024;
  }

  /** Creates the root folder. Optional: put creates folders as needed. */
  async init(): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o700 });
  }

  private pathOf(name: string): string {
    validateBlobName(name);
    const path = resolve(this.root, ...name.split('/'));
    // Belt and braces: validateBlobName already rules out `..`, absolute names and backslashes.
    if (!path.startsWith(this.root + sep)) throw new Error(`blob name escapes the store root: ${name}`);
    return path;
  }

  async put(name: string, body: Readable | Buffer, size?: number): Promise<void> {
    let writer: BlobWriter;
    try {
      if (size !== undefined && (!Number.isSafeInteger(size) || size < 0)) throw new RangeError(`bad size ${size}`);
      if (Buffer.isBuffer(body) && size !== undefined && size !== body.length) throw new BlobSizeMismatchError(name, size, body.length);
      writer = await this.openWriter(name);
    } catch (err) {
      if (!Buffer.isBuffer(body)) body.destroy();
      throw err;
    }
    try {
      if (Buffer.isBuffer(body)) await writer.write(body);
      else {
        let written = 0;
        for await (const piece of body) {
          const buf: Buffer = typeof piece === 'string' ? Buffer.from(piece) : piece;
          written += buf.length;
          if (size !== undefined && written > size) throw new BlobSizeMismatchError(name, size, -1);
          await writer.write(buf);
        }
        if (size !== undefined && written !== size) throw new BlobSizeMismatchError(name, size, written);
      }
      await writer.commit();
    } catch (err) {
      if (!Buffer.isBuffer(body)) body.destroy();
      await writer.abort();
      throw err;
    }
  }

  /**
   * Writes `<dir>/.<name>.<random>.tmp`; commit fdatasyncs it, renames it over the name and
   * fsyncs the folder (see the class comment).
   */
  async openWriter(name: string): Promise<BlobWriter> {
    const finalPath = this.pathOf(name);
    const dir = dirname(finalPath);
    const tmpPath = join(dir, `.${finalPath.slice(dir.length + 1)}.${randomBytes(6).toString('hex')}${TMP_SUFFIX}`);
    let handle: FileHandle | undefined = await this.openTemp(dir, tmpPath);
    const open = () => {
      if (!handle) throw new Error(`${name} is already committed or abandoned`);
      return handle;
    };
    return {
      write: (data) => writeAll(open(), data),
      commit: async () => {
        const h = open();
        try {
          if (this.durable) await h.datasync();
          handle = undefined;
          await h.close();
          await rename(tmpPath, finalPath);
        } catch (err) {
          handle = undefined;
          await h.close().catch(() => {});
          await unlink(tmpPath).catch(() => {});
          throw err;
        }
        if (this.durable) await fsyncDir(dir);
      },
      abort: async () => {
        const h = handle;
        if (!h) return;
        handle = undefined;
        await h.close().catch(() => {});
        await unlink(tmpPath).catch(() => {});
      },
    };
  }

  /** Positioned reads on an open handle: the object stays readable even if replaced meanwhile. */
  async openReader(name: string): Promise<BlobReader> {
    const { handle, size } = await this.openExisting(name);
    return {
      size,
      async read(target, position) {
        let filled = 0;
        while (filled < target.length) {
          const { bytesRead } = await handle.read(target, filled, target.length - filled, position + filled);
          if (bytesRead === 0) break;
          filled += bytesRead;
        }
        return filled;
      },
      close: () => handle.close(),
    };
  }

  /** Opens the temp file, creating its folders; retries when a concurrent delete pruned them. */
  private async openTemp(dir: string, tmpPath: string): Promise<FileHandle> {
    for (let attempt = 0; ; attempt++) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      try {
        return await open(tmpPath, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o600);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' && attempt < 5) continue;
        throw err;
      }
    }
  }

  async get(name: string, range?: ByteRange): Promise<Readable> {
    validateRange(name, range);
    const { handle, size } = await this.openExisting(name);
    try {
      const start = range?.start ?? 0;
      if (start > size) throw new BlobRangeError(name, range!, size);
      const end = Math.min(range?.end ?? size - 1, size - 1);
      if (end < start) {
        await handle.close();
        return Readable.from([], { objectMode: false });
      }
      // The open handle keeps reading the same file even if it is replaced or deleted meanwhile.
      return handle.createReadStream({ start, end, highWaterMark: this.readHighWaterMark, autoClose: true });
    } catch (err) {
      await handle.close().catch(() => {});
      throw err;
    }
  }

  /** Opens an object for reading, with its size; BlobNotFoundError unless it is a file. */
  private async openExisting(name: string): Promise<{ handle: FileHandle; size: number }> {
    const path = this.pathOf(name);
    let handle: FileHandle;
    try {
      handle = await open(path, 'r');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'EISDIR') throw new BlobNotFoundError(name, { cause: err });
      throw err;
    }
    try {
      const stat = await handle.stat();
      if (!stat.isFile()) throw new BlobNotFoundError(name);
      return { handle, size: stat.size };
    } catch (err) {
      await handle.close().catch(() => {});
      throw err;
    }
  }

  async delete(name: string): Promise<void> {
    const path = this.pathOf(name);
    try {
      await unlink(path);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      throw err;
    }
    await this.pruneEmptyDirs(dirname(path));
  }

  private async pruneEmptyDirs(dir: string): Promise<void> {
    while (dir.startsWith(this.root + sep)) {
      try {
        await rmdir(dir);
      } catch {
        return; // not empty (ENOTEMPTY/EEXIST), already gone, or busy: stop climbing
      }
      dir = dirname(dir);
    }
  }

  async *list(prefix: string): AsyncIterable<BlobListing> {
    validateBlobPrefix(prefix);
    const cut = prefix.lastIndexOf('/');
    const baseName = cut === -1 ? '' : prefix.slice(0, cut); // folder holding every match
    const baseDir = baseName === '' ? this.root : resolve(this.root, ...baseName.split('/'));
    yield* this.walk(baseDir, baseName, prefix);
  }

  private async *walk(dir: string, dirName: string, prefix: string): AsyncGenerator<BlobListing> {
    let handle: Dir;
    try {
      handle = await opendir(dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      throw err;
    }
    const entries: { name: string; key: string; dir: boolean }[] = [];
    for await (const entry of handle) {
      if (entry.name.startsWith('.')) continue; // temp files
      if (entry.isDirectory()) entries.push({ name: entry.name, key: `${entry.name}/`, dir: true });
      else if (entry.isFile()) entries.push({ name: entry.name, key: entry.name, dir: false });
    }
    // Sorting directories as `name/` makes this depth-first walk yield names in plain
    // lexicographic order (`a.x` < `a/b`), the order Azure lists in.
    entries.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    for (const entry of entries) {
      const full = dirName === '' ? entry.name : `${dirName}/${entry.name}`;
      if (entry.dir) {
        const asDir = `${full}/`;
        // Descend only where something below can match the prefix.
        if (asDir.startsWith(prefix) || prefix.startsWith(asDir)) yield* this.walk(join(dir, entry.name), full, prefix);
      } else if (full.startsWith(prefix)) {
        const size = await statSize(join(dir, entry.name));
        if (size !== undefined) yield { name: full, size };
      }
    }
  }

  /**
   * Removes temp files left by puts that crashed (older than `olderThanMs`, default one hour, so
   * puts in flight are not disturbed). Returns how many were removed.
   */
  async sweepTempFiles(olderThanMs = 3600_000): Promise<number> {
    let removed = 0;
    const cutoff = Date.now() - olderThanMs;
    const visit = async (dir: string): Promise<void> => {
      let handle: Dir;
      try {
        handle = await opendir(dir);
      } catch {
        return;
      }
      for await (const entry of handle) {
        const path = join(dir, entry.name);
        if (entry.isDirectory()) await visit(path);
        else if (entry.isFile() && entry.name.startsWith('.') && entry.name.endsWith(TMP_SUFFIX)) {
          try {
            const { mtimeMs } = await stat(path);
            if (mtimeMs < cutoff) {
              await unlink(path);
              removed++;
            }
          } catch {
            /* raced with its rename or another sweep */
          }
        }
      }
    };
    await visit(this.root);
    return removed;
  }
}

async function writeAll(handle: FileHandle, buf: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < buf.length) {
    const { bytesWritten } = await handle.write(buf, offset, buf.length - offset);
    offset += bytesWritten;
  }
}

async function statSize(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch {
    return undefined; // deleted while listing
  }
}

/** Makes a rename or create in `dir` durable. */
export async function fsyncDir(dir: string): Promise<void> {
  if (process.platform === 'win32') return;
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
