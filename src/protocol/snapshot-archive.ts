// The plain byte stream of one snapshot share (what packStream seals): a POSIX tar archive (ustar
// with pax headers for long paths, written and read by `tar-stream`), so a share is one packed
// item however many files it has and any `tar` can read it.
//
// Paths are POSIX, relative to the share folder (as selectFiles yields them). Only regular files
// are stored, each opened beneath the folder (src/dataplane/beneath.ts: never through a link, never
// a FIFO, socket or device); folders are implied by paths. A file that shrinks while it is read is padded with
// zeros and one that grows is cut at the size recorded in its header, so the entry's size holds.
import type { Stats } from 'node:fs';
import { type FileHandle, open, unlink } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import * as tar from 'tar-stream';
import { Beneath, isGone, NEW_FILE, openRegular, replace } from '../dataplane/beneath';
import { ValidationError } from '../kernel/errors';
import { type SelectedFile, validateRelativePath } from '../kernel/sync-rules';

/** The media type of a share's archive on the node HTTP calls (docs/snapshots.md). */
export const ARCHIVE_CONTENT_TYPE = 'application/x-tar';

export interface ArchiveStats {
  files: number;
  bytes: number;
}

/** The file `rel` opened beneath the folder; null when it is gone or is no regular file there now. */
async function openBeneath(beneath: Beneath, rel: string): Promise<{ handle: FileHandle; stats: Stats } | null> {
  let file: string;
  try {
    file = beneath.file(rel);
  } catch (error) {
    if (isGone(error)) return null; // a name on its way is no longer a folder
    throw error;
  }
  return openRegular(file);
}

/** The content of an open file, exactly `size` bytes long whatever the file does meanwhile. */
async function* exactly(handle: FileHandle, size: number): AsyncGenerator<Buffer> {
  let sent = 0;
  if (size > 0) {
    for await (const piece of handle.createReadStream({ start: 0, end: size - 1, autoClose: false })) {
      sent += (piece as Buffer).length;
      yield piece as Buffer;
    }
  }
  if (sent < size) yield Buffer.alloc(size - sent);
}

/**
 * Streams the tar archive of `files` (relative to `root`). Each is opened beneath the folder as it
 * is now, never through a link: one that is gone, or is no longer a regular file (a link, a FIFO),
 * is left out, and its size and mode are the open file's.
 */
export function archiveStream(root: string, files: AsyncIterable<SelectedFile>): Readable {
  const pack = tar.pack();
  (async () => {
    const beneath = Beneath.open(root);
    try {
      await packAll(pack, beneath, files);
    } finally {
      beneath.close();
    }
    pack.finalize();
  })().catch((err: Error) => pack.destroy(err));
  // tar-stream streams are streamx streams; this makes a Node stream of it for pipeline().
  return Readable.from(pack as AsyncIterable<Buffer>, { objectMode: false });
}

async function packAll(pack: tar.Pack, beneath: Beneath, files: AsyncIterable<SelectedFile>): Promise<void> {
  for await (const file of files) {
    const opened = await openBeneath(beneath, file.path);
    if (!opened) continue;
    const { handle, stats } = opened;
    try {
      await new Promise<void>((resolve, reject) => {
        const entry = pack.entry({ name: file.path, size: stats.size, mode: stats.mode & 0o777, type: 'file' }, (err) =>
          err ? reject(err) : resolve(),
        );
        Readable.from(exactly(handle, stats.size))
          .on('error', reject)
          .pipe(entry as unknown as NodeJS.WritableStream);
      });
    } finally {
      await handle.close().catch(() => undefined);
    }
  }
}

/** What an entry's header must be: a regular file with a safe relative path and a size. */
function checkedEntry(header: tar.Header): { rel: string; size: number; mode: number } {
  if (header.type !== 'file') throw new Error(`snapshot archive entry ${JSON.stringify(header.name)} is not a regular file`);
  const size = header.size ?? 0;
  if (!Number.isSafeInteger(size) || size < 0) throw new Error('snapshot archive header is malformed');
  return { rel: validateRelativePath(header.name, 'path'), size, mode: (header.mode ?? 0o644) & 0o777 };
}

/**
 * Passes an archive through unchanged while checking it (a valid tar of regular files with safe
 * paths) and counting its files and bytes, so the server records what it received rather than
 * what a node says it sent. A stream that stops early or is not a tar archive is an error.
 */
export class ArchiveCounter extends Transform {
  readonly stats: ArchiveStats = { files: 0, bytes: 0 };
  private readonly extract = tar.extract();
  private failure: Error | undefined;
  private readonly finished: Promise<void>;

  constructor() {
    super();
    this.extract.on('entry', (header, body, next) => {
      try {
        const { size } = checkedEntry(header);
        this.stats.files++;
        this.stats.bytes += size;
      } catch (err) {
        // Remembered, and the stream fails on its next chunk or at its end.
        this.failure ??= err as Error;
      }
      body.on('end', () => next());
      body.resume();
    });
    this.finished = new Promise((resolve, reject) => {
      this.extract.on('finish', () => resolve());
      this.extract.on('error', (err: Error) => {
        this.failure ??= err;
        reject(err);
      });
    });
    this.finished.catch(() => undefined);
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    if (this.failure) return void done(archiveError(this.failure));
    if (this.extract.write(chunk)) return void done(null, chunk);
    // Backpressure: the next chunk waits until the checker has taken this one.
    const onDrain = () => {
      this.extract.off('error', onError);
      done(this.failure ? archiveError(this.failure) : null, chunk);
    };
    const onError = (err: Error) => {
      this.extract.off('drain', onDrain);
      done(archiveError(err));
    };
    this.extract.once('drain', onDrain);
    this.extract.once('error', onError);
  }

  override _flush(done: TransformCallback): void {
    if (this.failure) return void done(archiveError(this.failure));
    (this.extract as unknown as NodeJS.WritableStream).end();
    this.finished.then(
      () => done(this.failure ? archiveError(this.failure) : null),
      (err: Error) => done(archiveError(err)),
    );
  }
}

/** A bad archive is its sender's mistake: a node's PUT of one is answered `422 invalid`, not a 500. */
function archiveError(err: Error): Error {
  if (/unexpected end/i.test(err.message)) return new ValidationError('snapshot archive is truncated');
  return new ValidationError(err.message.startsWith('snapshot archive') ? err.message : `snapshot archive is invalid: ${err.message}`);
}

/**
 * Writes the archive's files under `root` (overwriting). Nothing is written outside `root`: paths
 * are relative without `..`, and every name on the way is resolved beneath `root` without
 * following a link (a link or file where a folder goes is replaced by the folder). Each file is
 * written to a new name and renamed over its place, so whatever stood there (a link, a FIFO, a
 * folder, removed beneath `root`) is replaced, never opened.
 */
export async function extractArchive(stream: Readable, root: string): Promise<ArchiveStats> {
  const extract = tar.extract();
  const stats: ArchiveStats = { files: 0, bytes: 0 };
  const beneath = Beneath.open(root);
  const source = stream.on('error', (err) => extract.destroy(err));
  source.pipe(extract as unknown as NodeJS.WritableStream);
  let counter = 0;
  try {
    for await (const entry of extract) {
      const { rel, size, mode } = checkedEntry(entry.header);
      const folder = beneath.folder(path.posix.dirname(rel), true);
      const tmp = `${folder}/.berth-restore-${process.pid}-${counter++}.tmp`;
      const handle = await open(tmp, NEW_FILE, mode);
      try {
        let written = 0;
        for await (const piece of entry as AsyncIterable<Buffer>) {
          await handle.write(piece);
          written += piece.length;
        }
        if (written !== size) throw new Error('snapshot archive is truncated');
        await handle.chmod(mode);
      } catch (err) {
        await unlink(tmp).catch(() => undefined);
        throw err;
      } finally {
        await handle.close();
      }
      await replace(tmp, folder, path.posix.basename(rel));
      stats.files++;
      stats.bytes += size;
    }
    return stats;
  } catch (err) {
    // The folder failing under it (a build that swaps a name while it is written: ENOTDIR, ELOOP,
    // …) is not the archive's fault, and says so as it is.
    if ((err as NodeJS.ErrnoException).syscall) throw err;
    throw archiveError(err as Error);
  } finally {
    beneath.close();
    stream.destroy();
  }
}
