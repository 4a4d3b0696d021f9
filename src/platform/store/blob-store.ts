import { PassThrough, type Readable } from 'node:stream';

/**
 * Inclusive byte range of a blob, HTTP style. `end` defaults to the last byte; an `end` past the
 * last byte is clamped to it. `start` may equal the blob's size (an empty read from the end) but
 * not exceed it (BlobRangeError).
 */
export interface ByteRange {
  start: number;
  /** Inclusive. */
  end?: number;
}

export interface BlobListing {
  name: string;
  size: number;
}

/**
 * A flat key -> bytes store. Names are slash-separated keys such as
 * `org_x/proj/art_y/seg-000001` (see validateBlobName for the exact rules).
 *
 * Contract shared by every implementation (checked by test/store-conformance.test.ts):
 * - put is atomic: readers see the old object or the complete new one, never a partial one; a put
 *   whose body fails (stream error, size mismatch) leaves no object under that name (and leaves a
 *   previous object under that name intact). On failure the body stream is destroyed (as
 *   stream.pipeline does). A put replaces an existing object.
 * - get resolves only once the object is known to exist; a missing object rejects with
 *   BlobNotFoundError (never a stream error).
 * - delete is idempotent.
 * - list yields every object whose name starts with `prefix` (plain string prefix: `a/b` matches
 *   `a/b/c` and `a/bc`), in lexicographic order of name.
 */
export interface BlobStore {
  /**
   * Stores `body` under `name`. Streams are consumed with backpressure, never buffered whole.
   * `size`, when given, must equal the body's length (else BlobSizeMismatchError and nothing is
   * stored).
   */
  put(name: string, body: Readable | Buffer, size?: number): Promise<void>;
  get(name: string, range?: ByteRange): Promise<Readable>;
  /**
   * Optional, for callers that reuse their buffers (the packer): an object written piece by piece,
   * each write done with its bytes when it resolves, visible only once committed. Without it,
   * openBlobWriter falls back to put (copying each piece).
   */
  openWriter?(name: string): Promise<BlobWriter>;
  /**
   * Optional, for callers that read into their own buffers (the unpacker): positioned reads of an
   * existing object. Rejects with BlobNotFoundError for a missing object.
   */
  openReader?(name: string): Promise<BlobReader>;
  delete(name: string): Promise<void>;
  list(prefix: string): AsyncIterable<BlobListing>;
}

/** An object being written (BlobStore.openWriter). */
export interface BlobWriter {
  /**
   * Writes that may be outstanding at once (default 1: wait for each before the next). Each takes
   * its place in the object in the order write was called.
   */
  readonly parallel?: number;
  /** Appends `data`; once this resolves the store no longer reads `data`, which may be reused. */
  write(data: Uint8Array): Promise<void>;
  /** Makes the object visible, atomically, as put does (replacing an object of that name). */
  commit(): Promise<void>;
  /** Discards what was written: nothing appears under the name. Safe to call more than once. */
  abort(): Promise<void>;
}

/** An object being read (BlobStore.openReader). */
export interface BlobReader {
  /** Bytes in the object when it was opened. */
  readonly size: number;
  /**
   * Reads into all of `target` from `position` of the object; resolves to the bytes read, fewer
   * than `target.length` only at the end of the object.
   */
  read(target: Uint8Array, position: number): Promise<number>;
  close(): Promise<void>;
}

/**
 * The store's own writer, or one over put for a store without it: each write is copied into a
 * stream that put consumes with backpressure.
 */
export async function openBlobWriter(store: BlobStore, name: string): Promise<BlobWriter> {
  if (store.openWriter) return store.openWriter(name);
  validateBlobName(name);
  // The default high-water mark (16 KiB): a write of a chunk waits until the store has taken it.
  const body = new PassThrough();
  body.on('error', () => {}); // failures surface through `stored`
  const stored = store.put(name, body);
  let failure: { error: unknown } | undefined;
  stored.catch((error: unknown) => {
    failure ??= { error };
  });
  const ended = stored.then(() => {
    throw new BlobStoreError(`the store finished ${name} before it was complete`);
  });
  ended.catch(() => {});
  return {
    async write(data) {
      if (failure) throw failure.error;
      if (!body.write(Buffer.from(data))) {
        await Promise.race([new Promise<void>((resolve) => body.once('drain', resolve)), ended]);
      }
    },
    async commit() {
      body.end();
      await stored;
    },
    async abort() {
      body.destroy(new BlobStoreError(`writing ${name} was abandoned`));
      await stored.catch(() => {});
    },
  };
}

export class BlobStoreError extends Error {
  readonly code: string = 'blob_store';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

export class BlobNotFoundError extends BlobStoreError {
  override readonly code = 'not_found';
  constructor(
    readonly blobName: string,
    options?: { cause?: unknown },
  ) {
    super(`blob not found: ${blobName}`, options);
  }
}

export class InvalidBlobNameError extends BlobStoreError {
  override readonly code = 'invalid_blob_name';
  constructor(
    readonly blobName: string,
    reason: string,
  ) {
    super(`invalid blob name ${JSON.stringify(blobName)}: ${reason}`);
  }
}

export class BlobRangeError extends BlobStoreError {
  override readonly code = 'invalid_range';
  constructor(
    readonly blobName: string,
    range: ByteRange,
    readonly blobSize?: number,
  ) {
    super(`invalid range ${range.start}-${range.end ?? ''} for blob ${blobName}${blobSize === undefined ? '' : ` of ${blobSize} bytes`}`);
  }
}

export class BlobSizeMismatchError extends BlobStoreError {
  override readonly code = 'size_mismatch';
  constructor(
    readonly blobName: string,
    readonly expected: number,
    readonly actual: number,
  ) {
    super(`blob ${blobName}: expected ${expected} bytes, body had ${actual === -1 ? 'more' : actual}`);
  }
}

/** Longest name accepted (Azure's limit for blob names is 1,024 characters). */
export const MAX_BLOB_NAME_LENGTH = 1024;

// One path segment: starts with a letter, digit or underscore (so never `.`/`..`, never a hidden
// file, never our `.tmp` files on disk), then a conservative set that is safe on every filesystem
// and in URLs without escaping surprises.
const SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._~=+@-]*$/;

/** Throws InvalidBlobNameError unless `name` is a safe slash-separated key. */
export function validateBlobName(name: string): void {
  if (typeof name !== 'string' || name.length === 0) throw new InvalidBlobNameError(String(name), 'empty');
  if (name.length > MAX_BLOB_NAME_LENGTH) throw new InvalidBlobNameError(name, 'too long');
  for (const segment of name.split('/')) {
    if (segment.length === 0) throw new InvalidBlobNameError(name, 'empty path segment');
    if (!SEGMENT.test(segment)) throw new InvalidBlobNameError(name, `bad path segment ${JSON.stringify(segment)}`);
  }
}

/**
 * A list prefix is any leading part of a valid name: '' (everything), `org/`, `org/pro`, ...
 * Throws InvalidBlobNameError otherwise.
 */
export function validateBlobPrefix(prefix: string): void {
  if (typeof prefix !== 'string') throw new InvalidBlobNameError(String(prefix), 'prefix must be a string');
  if (prefix === '') return;
  if (prefix.length > MAX_BLOB_NAME_LENGTH) throw new InvalidBlobNameError(prefix, 'too long');
  const segments = prefix.split('/');
  segments.forEach((segment, i) => {
    const last = i === segments.length - 1;
    if (segment.length === 0 && !last) throw new InvalidBlobNameError(prefix, 'empty path segment');
    if (segment.length > 0 && !SEGMENT.test(segment)) {
      throw new InvalidBlobNameError(prefix, `bad path segment ${JSON.stringify(segment)}`);
    }
  });
}

/** Checks the shape of a range (not against a size). Throws BlobRangeError. */
export function validateRange(name: string, range: ByteRange | undefined): void {
  if (range === undefined) return;
  const { start, end } = range;
  if (!Number.isSafeInteger(start) || start < 0) throw new BlobRangeError(name, range);
  if (end !== undefined && (!Number.isSafeInteger(end) || end < start)) throw new BlobRangeError(name, range);
}
