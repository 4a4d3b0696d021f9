import { join } from 'node:path';
import type { BlobStore } from './blob-store';
import { FsBlobStore } from './fs-store';

export type { AzureBlobStore, AzureBlobStoreOptions } from './azure-store';
export {
  BlobNotFoundError,
  BlobRangeError,
  BlobSizeMismatchError,
  type BlobStore,
  type ByteRange,
  InvalidBlobNameError,
  openBlobWriter,
} from './blob-store';
export { FsBlobStore, type FsBlobStoreOptions } from './fs-store';

export interface BlobStoreConfig {
  /** DATA_DIR; the filesystem store keeps its objects in `<dataDir>/blobs`. */
  dataDir: string;
  /** AZURE_STORAGE_CONNECTION_STRING: when set, objects go to Azure Blob Storage instead. */
  azureConnectionString?: string;
  /** AZURE_STORAGE_CONTAINER (default `berth`). */
  azureContainer?: string;
}

export const DEFAULT_AZURE_CONTAINER = 'berth';

/**
 * The configured blob store, ready to use: the Azure container exists (created if missing) or the
 * local folder exists. Rejects at start-up on bad configuration (malformed connection string,
 * unreachable account, unwritable folder) instead of on the first upload.
 */
export async function createBlobStore(config: BlobStoreConfig): Promise<BlobStore> {
  if (config.azureConnectionString) {
    // Loaded only when configured: the Azure SDK holds ~35 MiB that the filesystem store never needs.
    const { AzureBlobStore } = await import('./azure-store');
    const store = new AzureBlobStore({
      connectionString: config.azureConnectionString,
      container: config.azureContainer || DEFAULT_AZURE_CONTAINER,
    });
    await store.init();
    return store;
  }
  const store = new FsBlobStore(join(config.dataDir, 'blobs'));
  await store.init();
  return store;
}
