// npm run bench:artifacts [-- 256 1024]   (sizes in MiB; default 256 and 1024)
//
// For each store (BENCH_STORES, default `fs,azurite`) starts Berth as a user does, `npm start`
// (the server bundle with its flags) on a temporary DATA_DIR (embedded PGlite, default 4 MiB
// chunks / 64 MiB segments): `fs` keeps blobs on the filesystem (with fdatasync), `azurite` in an
// Azurite blob service (a child process, disk persistence in a temporary folder). For each size it
// uploads and downloads an artifact through HTTP with a client in a child process. Throughput is
// shown next to this machine's own limit, measured right before each transfer (so both see the
// same load) in a child process: one thread doing SHA-256 + AES-256-GCM over the same number of
// bytes in 4 MiB chunks, the work the server does per byte on upload; and, for uploads, the disk
// under DATA_DIR taking the same bytes as the fs store writes them (4 MiB writes, fdatasync per 64
// MiB segment), which on a slow disk is the bound. Each upload runs twice: from the Node client and
// from curl (-T, streamed from a file written first), as a user sends one. The server process's CPU
// (every thread, from /proc) and peak RSS (sampled every 50 ms) are measured over each transfer.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Azurite, startAzurite } from '../test/helpers/azurite';
import { kib, npmStart, tree } from './environments/startup';
import { cpuSeconds } from './process-cpu';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const MiB = 1024 * 1024;
const GOAL_RATIO = 0.8;
const sizes = (process.argv.length > 2 ? process.argv.slice(2) : ['256', '1024']).map((s) => Number(s) * MiB);
const stores = (process.env.BENCH_STORES ?? 'fs,azurite').split(',').filter(Boolean) as ('fs' | 'azurite')[];
const TOKEN = 'bct_bench-token-0123456789abcdefghij';
const mbps = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);
const mib = (bytes: number) => (bytes / MiB).toFixed(0);

interface Measured<T> {
  result: T;
  peak: number;
  before: number;
  /** CPU time (user + system, every thread) the server spent meanwhile. */
  cpuMs: number;
}

/** Runs `work` while sampling the server's RSS; returns its result, the peak and the server's CPU. */
async function measured<T>(pid: number, work: () => Promise<T>): Promise<Measured<T>> {
  const rss = () => kib(`/proc/${pid}/status`, 'VmRSS');
  const before = await rss();
  const cpuBefore = (await cpuSeconds(pid)) * 1000;
  let peak = before;
  const timer = setInterval(() => void rss().then((r) => (peak = Math.max(peak, r))), 50);
  try {
    const result = await work();
    return { result, peak: Math.max(peak, await rss()), before, cpuMs: (await cpuSeconds(pid)) * 1000 - cpuBefore };
  } finally {
    clearInterval(timer);
  }
}

/** `npm start` as a user runs it (the bundle, its flags), on `env`, with its server process's pid. */
async function startServer(env: Record<string, string>): Promise<{ url: string; pid: number; stop: () => Promise<void> }> {
  const started = await npmStart(REPO, env);
  const { server } = await tree(started.child.pid!);
  if (!server) {
    await started.stop();
    throw new Error('no process running dist/server/main.js under npm start');
  }
  return { url: started.url, pid: server.pid, stop: started.stop };
}

function client(...args: string[]): Promise<Record<string, any>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', new URL('./artifacts-client.ts', import.meta.url).pathname, ...args], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`client exited with ${code}`))));
  });
}

type Direction = 'upload' | 'upload (curl)' | 'download';
const rows = [
  '| store | size | direction | MB/s | machine limit MB/s | ratio | disk MB/s | ratio to disk | server CPU ms/MB | client CPU ms/MB | peak RSS | RSS before |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|',
];
const ratios: Record<string, number[]> = {};
const peaks: Record<string, number[]> = {};
/** Uploads against the disk taking the same bytes without Berth. */
const diskRatios: Record<string, number[]> = {};

async function run(store: 'fs' | 'azurite', azurite: Azurite | undefined): Promise<void> {
  const dataDir = await mkdtemp(join(tmpdir(), 'berth-bench-'));
  const env = {
    DATA_DIR: dataDir,
    BOOTSTRAP_TOKEN: TOKEN,
    NODE_ENV: 'production',
    ...(azurite ? { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString } : {}),
  };
  // A first start migrates the empty DATA_DIR, which leaves ~400 MiB to the collector for the next
  // 5-10 s; the measured server starts on the prepared one, as a running service does.
  await (await startServer(env)).stop();
  const app = await startServer(env);
  const row = (size: number, direction: Direction, limit: number, rss: Measured<Record<string, any>>, disk?: number) => {
    const rate = mbps(size, rss.result.ms);
    const perMB = (cpuMs: number) => (cpuMs / (size / 1e6)).toFixed(2);
    const k = `${store} ${direction}`;
    ratios[k] = [...(ratios[k] ?? []), rate / limit];
    if (disk) diskRatios[k] = [...(diskRatios[k] ?? []), rate / disk];
    peaks[k] = [...(peaks[k] ?? []), rss.peak];
    rows.push(
      `| ${store} | ${mib(size)} MiB | ${direction} | ${rate.toFixed(0)} | ${limit.toFixed(0)} | ${(rate / limit).toFixed(2)} | ${disk ? disk.toFixed(0) : '–'} | ${disk ? (rate / disk).toFixed(2) : '–'} | ${perMB(rss.cpuMs)} | ${perMB(rss.result.cpuMs)} | ${mib(rss.peak)} MiB | ${mib(rss.before)} MiB |`,
    );
  };
  try {
    // Warm-up: the sealing threads start on the first transfer.
    const warm = await client('upload', app.url, TOKEN, String(32 * MiB));
    if (warm.status !== 201) throw new Error(`warm-up upload failed: ${JSON.stringify(warm).slice(0, 500)}`);
    for (const size of sizes) {
      // Both limits right before the transfer: the crypto pass, and the disk under DATA_DIR taking
      // the same bytes as the fs store writes them (on a slow disk, the write is the bound).
      const diskRate = async () => mbps(size, (await client('disk', dataDir, String(size))).ms);
      let disk = await diskRate();
      const upLimit = mbps(size, (await client('limit', String(size))).ms);
      const up = await measured(app.pid, () => client('upload', app.url, TOKEN, String(size)));
      if (up.result.status !== 201 || up.result.body.artifact.sha256 !== up.result.sha256) {
        throw new Error(`upload failed: ${JSON.stringify(up.result).slice(0, 500)}`);
      }
      row(size, 'upload', upLimit, up, disk);
      const id = up.result.body.artifact.id as string;

      // The same upload as a user sends a file: curl, streamed from disk (the file cached first).
      disk = await diskRate();
      const curlLimit = mbps(size, (await client('limit', String(size))).ms);
      const curled = await measured(app.pid, () => client('curl-upload', app.url, TOKEN, String(size)));
      if (curled.result.status !== 201 || curled.result.body.artifact.sha256 !== curled.result.sha256) {
        throw new Error(`curl upload failed: ${JSON.stringify(curled.result).slice(0, 500)}`);
      }
      row(size, 'upload (curl)', curlLimit, curled, disk);
      await fetch(`${app.url}/v1/artifacts/${curled.result.body.artifact.id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${TOKEN}` },
      });

      const downLimit = mbps(size, (await client('limit', String(size))).ms);
      const down = await measured(app.pid, () => client('download', app.url, TOKEN, id));
      if (down.result.status !== 200 || down.result.bytes !== size) {
        throw new Error(`download failed: ${JSON.stringify(down.result).slice(0, 500)}`);
      }
      row(size, 'download', downLimit, down);
      await fetch(`${app.url}/v1/artifacts/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
    }
  } finally {
    await app.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

let azurite: Azurite | undefined;
let azuriteDir: string | undefined;
try {
  for (const store of stores) {
    if (store === 'azurite' && !azurite) {
      // On disk (not in memory): a 2 GiB artifact would not fit Azurite's in-memory extent limit.
      azuriteDir = await mkdtemp(join(tmpdir(), 'berth-bench-azurite-'));
      azurite = await startAzurite(30_000, { location: azuriteDir });
    }
    await run(store, store === 'azurite' ? azurite : undefined);
  }
  console.log(rows.join('\n'));
  console.log('');
  for (const store of stores) {
    for (const d of ['upload', 'upload (curl)', 'download'] as const) {
      const r = ratios[`${store} ${d}`] ?? [];
      const p = peaks[`${store} ${d}`] ?? [];
      const worst = Math.min(...r);
      const growth =
        sizes.length > 1
          ? `; peak RSS from ${mib(sizes[0]!)} MiB to ${mib(sizes.at(-1)!)} MiB artifacts: ${((p.at(-1)! - p[0]!) / MiB).toFixed(0)} MiB`
          : '';
      console.log(
        `- Goal 4 (${store}, ${d}): lowest ratio ${worst.toFixed(2)} (goal ≥ ${GOAL_RATIO})${growth}: ${worst >= GOAL_RATIO ? 'met' : 'MISSED'}`,
      );
      const onDisk = diskRatios[`${store} ${d}`];
      if (onDisk)
        console.log(
          `  against the disk alone taking the same bytes: lowest ${Math.min(...onDisk).toFixed(2)}, highest ${Math.max(...onDisk).toFixed(2)}`,
        );
    }
  }
  console.log(
    `node ${process.version}, ${cpus().length} CPUs, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}; MB = 10^6 bytes`,
  );
} finally {
  await azurite?.stop();
  if (azuriteDir) await rm(azuriteDir, { recursive: true, force: true });
}
