// The plain byte stream of one snapshot share (what packStream seals): a minimal archive, so a
// share is one packed item however many files it has.
//
//   per file:  u32 BE header length | header JSON {"path","size","mode"} | exactly `size` bytes
//   end:       u32 BE 0
//
// Paths are POSIX, relative to the share folder (as selectFiles yields them). Only regular files
// are stored; folders are implied by paths. A file that shrinks while it is read is padded with
// zeros and one that grows is cut at the size recorded in its header, so the framing always holds.
import { createReadStream } from 'node:fs';
import { mkdir, open } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { type SelectedFile, validateRelativePath } from './sync-rules';

const MAX_HEADER = 64 * 1024;

export interface ArchiveStats {
  files: number;
  bytes: number;
}

interface Header {
  path: string;
  size: number;
  mode: number;
}

function frame(header: Header): Buffer {
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(4);
  len.writeUInt32BE(json.length);
  return Buffer.concat([len, json]);
}

/** Streams the archive of `files` (relative to `root`). */
export function archiveStream(root: string, files: AsyncIterable<SelectedFile>): Readable {
  async function* generate(): AsyncGenerator<Buffer> {
    for await (const file of files) {
      yield frame({ path: file.path, size: file.size, mode: file.mode });
      let sent = 0;
      if (file.size > 0) {
        for await (const piece of createReadStream(path.join(root, file.path), { start: 0, end: file.size - 1 })) {
          sent += (piece as Buffer).length;
          yield piece as Buffer;
        }
      }
      if (sent < file.size) yield Buffer.alloc(file.size - sent);
    }
    yield Buffer.alloc(4);
  }
  return Readable.from(generate(), { objectMode: false });
}

/**
 * Passes an archive through unchanged while checking its framing and counting its files and
 * bytes, so the server records what it received rather than what a node says it sent. Bytes after
 * the end marker, a header that is not JSON or a stream that stops early are errors.
 */
export class ArchiveCounter extends Transform {
  readonly stats: ArchiveStats = { files: 0, bytes: 0 };
  private pending = Buffer.alloc(0);
  /** Bytes of file content still to pass before the next header. */
  private content = 0;
  private ended = false;

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    try {
      this.scan(chunk);
      done(null, chunk);
    } catch (err) {
      done(err as Error);
    }
  }

  override _flush(done: TransformCallback): void {
    done(this.ended ? null : new Error('snapshot archive is truncated'));
  }

  private scan(chunk: Buffer): void {
    let data = chunk;
    while (data.length > 0) {
      if (this.ended) throw new Error('snapshot archive has bytes after its end');
      if (this.content > 0) {
        const n = Math.min(this.content, data.length);
        this.content -= n;
        data = data.subarray(n);
        continue;
      }
      this.pending = Buffer.concat([this.pending, data]);
      data = Buffer.alloc(0);
      if (this.pending.length < 4) return;
      const length = this.pending.readUInt32BE(0);
      if (length === 0) {
        this.ended = true;
        data = this.pending.subarray(4);
        this.pending = Buffer.alloc(0);
        continue;
      }
      if (length > MAX_HEADER) throw new Error('snapshot archive header is too large');
      if (this.pending.length < 4 + length) return;
      const header = JSON.parse(this.pending.subarray(4, 4 + length).toString('utf8')) as Header;
      if (!Number.isSafeInteger(header.size) || header.size < 0) throw new Error('snapshot archive header is malformed');
      this.stats.files++;
      this.stats.bytes += header.size;
      this.content = header.size;
      data = this.pending.subarray(4 + length);
      this.pending = Buffer.alloc(0);
    }
  }
}

/** Reads exact byte counts from a stream. */
class Reader {
  private readonly it: AsyncIterator<Buffer>;
  private rest: Buffer = Buffer.alloc(0);

  constructor(stream: Readable) {
    this.it = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  }

  /** Up to `max` bytes (at least one), or throws at the end of the stream. */
  async some(max: number): Promise<Buffer> {
    if (this.rest.length === 0) {
      const { value, done } = await this.it.next();
      if (done) throw new Error('snapshot archive is truncated');
      this.rest = value;
    }
    const out = this.rest.subarray(0, max);
    this.rest = this.rest.subarray(out.length);
    return out;
  }

  async exact(n: number): Promise<Buffer> {
    const parts: Buffer[] = [];
    let fill = 0;
    while (fill < n) {
      const piece = await this.some(n - fill);
      parts.push(Buffer.from(piece));
      fill += piece.length;
    }
    return Buffer.concat(parts, n);
  }
}

/** Writes the archive's files under `root` (overwriting); refuses paths that leave it. */
export async function extractArchive(stream: Readable, root: string): Promise<ArchiveStats> {
  const reader = new Reader(stream);
  const stats: ArchiveStats = { files: 0, bytes: 0 };
  try {
    for (;;) {
      const length = (await reader.exact(4)).readUInt32BE(0);
      if (length === 0) return stats;
      if (length > MAX_HEADER) throw new Error('snapshot archive header is too large');
      const header = JSON.parse((await reader.exact(length)).toString('utf8')) as Header;
      if (!Number.isSafeInteger(header.size) || header.size < 0 || !Number.isSafeInteger(header.mode)) {
        throw new Error('snapshot archive header is malformed');
      }
      const rel = validateRelativePath(header.path, 'path');
      const target = path.join(root, rel);
      await mkdir(path.dirname(target), { recursive: true });
      const handle = await open(target, 'w', header.mode & 0o777);
      try {
        let left = header.size;
        while (left > 0) {
          const piece = await reader.some(left);
          await handle.write(piece);
          left -= piece.length;
        }
        await handle.chmod(header.mode & 0o777);
      } finally {
        await handle.close();
      }
      stats.files++;
      stats.bytes += header.size;
    }
  } finally {
    stream.destroy();
  }
}
