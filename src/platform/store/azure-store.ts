import { randomBytes } from 'node:crypto';
import { pipeline, Readable, Transform } from 'node:stream';
import { BlobServiceClient, type ContainerClient } from '@azure/storage-blob';
import {
  type BlobListing,
  BlobNotFoundError,
  BlobRangeError,
  BlobSizeMismatchError,
  type BlobStore,
  type BlobWriter,
  type ByteRange,
  validateBlobName,
  validateBlobPrefix,
  validateRange,
} from './blob-store';

export interface AzureBlobStoreOptions {
  connectionString: string;
  container: string;
  /** Size of each staged block for stream uploads. Default 4 MiB. */
  blockSize?: number;
  /** Blocks staged in parallel (each holds one block in memory). Default 4. */
  concurrency?: number;
}

/**
 * Blob store on Azure Blob Storage (block blobs in one container, created if missing).
 *
 * put streams the body as staged blocks (BlockBlobClient.uploadStream: memory is about
 * blockSize x concurrency) and commits the block list only once the whole body has arrived and
 * matched `size`, so a failed put never leaves a partial blob (uncommitted blocks are discarded
 * by the service). get downloads a byte range and resumes on connection drops.
 */
export class AzureBlobStore implements BlobStore {
  readonly containerName: string;
  private readonly container: ContainerClient;
  private readonly blockSize: number;
  private readonly concurrency: number;
  private ready: Promise<void> | undefined;

  constructor(options: AzureBlobStoreOptions) {
    // fromConnectionString throws on a malformed string: fail at construction, not first use.
    const service = BlobServiceClient.fromConnectionString(options.connectionString);
    this.containerName = options.container;
    this.container = service.getContainerClient(options.container);
    this.blockSize = options.blockSize ?? 4 * 1024 * 1024;
    this.concurrency = options.concurrency ?? 4;
  }

  /** Creates the container if it does not exist (memoized; retried after a failure). */
  init(): Promise<void> {
    this.ready ??= this.container.createIfNotExists().then(
      () => undefined,
      (err: unknown) => {
        this.ready = undefined;
        throw err;
      },
    );
    return this.ready;
  }

  async put(name: string, body: Readable | Buffer, size?: number): Promise<void> {
    try {
      validateBlobName(name);
      if (size !== undefined && (!Number.isSafeInteger(size) || size < 0)) throw new RangeError(`bad size ${size}`);
      if (Buffer.isBuffer(body) && size !== undefined && size !== body.length) {
        throw new BlobSizeMismatchError(name, size, body.length);
      }
      await this.init();
    } catch (err) {
      if (!Buffer.isBuffer(body)) body.destroy();
      throw err;
    }
    const blob = this.container.getBlockBlobClient(name);
    const blobHTTPHeaders = { blobContentType: 'application/octet-stream' };
    if (Buffer.isBuffer(body)) {
      await blob.uploadData(body, { blockSize: this.blockSize, concurrency: this.concurrency, blobHTTPHeaders });
      return;
    }
    // Count bytes on the way; an error in flush (before 'end') stops uploadStream from committing.
    let count = 0;
    const counter = new Transform({
      highWaterMark: this.blockSize,
      transform(chunk: Buffer, _enc, callback) {
        count += chunk.length;
        if (size !== undefined && count > size) callback(new BlobSizeMismatchError(name, size, -1));
        else callback(null, chunk);
      },
      flush(callback) {
        if (size !== undefined && count !== size) callback(new BlobSizeMismatchError(name, size, count));
        else callback();
      },
    });
    // pipeline destroys both streams with the error if either fails (including a body destroyed
    // without an error, reported as ERR_STREAM_PREMATURE_CLOSE), so uploadStream always settles.
    pipeline(body, counter, () => {});
    try {
      await blob.uploadStream(counter, this.blockSize, this.concurrency, { blobHTTPHeaders });
    } catch (err) {
      body.destroy();
      counter.destroy();
      throw err;
    }
  }

  /**
   * Each write is staged as a block of its own (its bytes go out as they are, no copy; up to
   * `concurrency` at once, each given its place when write is called) and the block list is
   * committed at the end; abort leaves the uncommitted blocks for the service to
   * discard. Block ids carry a random prefix, so writers of the same name never commit each
   * other's blocks.
   */
  async openWriter(name: string): Promise<BlobWriter> {
    validateBlobName(name);
    await this.init();
    const blob = this.container.getBlockBlobClient(name);
    const prefix = randomBytes(12).toString('hex');
    const ids: string[] = [];
    const staging: Promise<unknown>[] = [];
    let open = true;
    const check = () => {
      if (!open) throw new Error(`${name} is already committed or abandoned`);
    };
    return {
      parallel: this.concurrency,
      async write(data) {
        check();
        const id = Buffer.from(`${prefix}-${String(ids.length).padStart(8, '0')}`).toString('base64');
        ids.push(id);
        const staged = blob.stageBlock(id, data, data.byteLength);
        staging.push(staged.catch(() => {}));
        await staged;
      },
      async commit() {
        check();
        open = false;
        await Promise.all(staging); // a block still on its way would be missing from the list
        await blob.commitBlockList(ids, { blobHTTPHeaders: { blobContentType: 'application/octet-stream' } });
      },
      async abort() {
        open = false;
      },
    };
  }

  async get(name: string, range?: ByteRange): Promise<Readable> {
    validateBlobName(name);
    validateRange(name, range);
    await this.init();
    const blob = this.container.getBlobClient(name);
    const start = range?.start ?? 0;
    const count = range?.end === undefined ? undefined : range.end - start + 1;
    try {
      const res = await blob.download(start, count, { maxRetryRequests: 5 });
      const body = res.readableStreamBody;
      if (!body) throw new Error(`Azure returned no body for ${name}`);
      return body instanceof Readable ? body : Readable.from(body as AsyncIterable<Buffer>, { objectMode: false });
    } catch (err) {
      const status = statusOf(err);
      if (status === 404) throw new BlobNotFoundError(name, { cause: err });
      if (status === 416) {
        // Range starts at or past the end: an empty read at exactly the end is allowed.
        let size: number;
        try {
          size = (await blob.getProperties()).contentLength ?? 0;
        } catch (propsErr) {
          if (statusOf(propsErr) === 404) throw new BlobNotFoundError(name, { cause: propsErr });
          throw propsErr;
        }
        if (start === size) return Readable.from([], { objectMode: false });
        if (start < size) return this.get(name, range); // the blob changed between the two calls
        throw new BlobRangeError(name, range!, size);
      }
      throw err;
    }
  }

  async delete(name: string): Promise<void> {
    validateBlobName(name);
    await this.init();
    await this.container.getBlobClient(name).deleteIfExists({ deleteSnapshots: 'include' });
  }

  async *list(prefix: string): AsyncIterable<BlobListing> {
    validateBlobPrefix(prefix);
    await this.init();
    for await (const item of this.container.listBlobsFlat(prefix === '' ? {} : { prefix })) {
      yield { name: item.name, size: item.properties.contentLength ?? 0 };
    }
  }
}

function statusOf(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null && 'statusCode' in err ? (err as { statusCode?: number }).statusCode : undefined;
}
