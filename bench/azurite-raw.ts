// npx tsx bench/azurite-raw.ts
//
// Azurite alone, as bench/artifacts.ts starts it (disk persistence, a child process): 256 MiB of
// random blocks staged with the Azure SDK (4 MiB x 4, 16 MiB x 2, 64 MiB x 1 in parallel), committed,
// then read back with one GET. No Berth, no crypto: the ceiling Azurite itself puts on the
// artifact benchmark's Azurite rows on this machine.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BlobServiceClient } from '@azure/storage-blob';
import { startAzurite } from '../test/helpers/azurite';

const dir = await mkdtemp(join(tmpdir(), 'az-raw-'));
const az = await startAzurite(30000, { location: dir });
const c = BlobServiceClient.fromConnectionString(az.connectionString).getContainerClient('raw');
await c.createIfNotExists();
const size = 256 * 1024 * 1024;
for (const [blockMiB, conc] of [
  [4, 4],
  [16, 2],
  [64, 1],
] as const) {
  const block = randomBytes(blockMiB * 1024 * 1024);
  const b = c.getBlockBlobClient(`x${blockMiB}`);
  const t = process.hrtime.bigint();
  const ids: string[] = [];
  const n = size / block.length;
  let next = 0;
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (next < n) {
        const i = next++;
        const id = Buffer.from(String(i).padStart(8, '0')).toString('base64');
        ids[i] = id;
        await b.stageBlock(id, block, block.length);
      }
    }),
  );
  await b.commitBlockList(ids);
  const up = Number(process.hrtime.bigint() - t) / 1e6;
  const t2 = process.hrtime.bigint();
  const res = await b.download(0);
  let got = 0;
  for await (const p of res.readableStreamBody as any) got += p.length;
  const down = Number(process.hrtime.bigint() - t2) / 1e6;
  console.log(
    `block ${blockMiB} MiB x${conc}: stage+commit ${(size / 1e3 / up).toFixed(0)} MB/s, download ${(got / 1e3 / down).toFixed(0)} MB/s`,
  );
}
await az.stop();
await rm(dir, { recursive: true, force: true });
