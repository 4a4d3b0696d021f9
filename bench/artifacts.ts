// npm run bench:artifacts [-- 256 1024]   (sizes in MiB; default 256 and 1024)
//
// Starts Berth in this process on a temporary DATA_DIR (embedded PGlite, filesystem blobs with
// fdatasync, default 4 MiB chunks / 64 MiB segments), then for each size uploads and downloads an
// artifact through HTTP with a client in a child process (so the server's thread and memory are
// measured alone). Throughput is shown next to this machine's own limit, measured right before each
// transfer (so both see the same load) in a child process (so its garbage does not sit in the
// server's RSS): one thread doing SHA-256 + AES-256-GCM over the same number of bytes in 4 MiB
// chunks, the work the server does per byte on upload. Peak RSS is sampled in this (the server's)
// process every 50 ms.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config';
import { startApp } from '../src/server';

const MiB = 1024 * 1024;
const sizes = (process.argv.length > 2 ? process.argv.slice(2) : ['256', '1024']).map((s) => Number(s) * MiB);
const TOKEN = 'bct_bench-token-0123456789abcdefghij';
const mbps = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);
const mib = (bytes: number) => (bytes / MiB).toFixed(0);

interface Measured<T> {
  result: T;
  peak: number;
  before: number;
}

/** Runs `work` while sampling this process's RSS; returns its result and the peak. */
async function withPeakRss<T>(work: () => Promise<T>): Promise<Measured<T>> {
  const before = process.memoryUsage.rss();
  let peak = before;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 50);
  try {
    const result = await work();
    return { result, peak: Math.max(peak, process.memoryUsage.rss()), before };
  } finally {
    clearInterval(timer);
  }
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

const dataDir = await mkdtemp(join(tmpdir(), 'berth-bench-'));
const app = await startApp({
  config: loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, BOOTSTRAP_TOKEN: TOKEN, NODE_ENV: 'production' }),
  log: (message, err) => console.error(message, err ?? ''),
});
const rows = ['| size | direction | MB/s | machine limit MB/s | ratio | peak RSS | RSS before |', '|---|---|---|---|---|---|---|'];
const peaks: Record<'upload' | 'download', number[]> = { upload: [], download: [] };
const row = (size: number, direction: 'upload' | 'download', ms: number, limit: number, rss: Measured<unknown>) => {
  const rate = mbps(size, ms);
  peaks[direction].push(rss.peak);
  rows.push(
    `| ${mib(size)} MiB | ${direction} | ${rate.toFixed(0)} | ${limit.toFixed(0)} | ${(rate / limit).toFixed(2)} | ${mib(rss.peak)} MiB | ${mib(rss.before)} MiB |`,
  );
};

try {
  for (const size of sizes) {
    const upLimit = mbps(size, (await client('limit', String(size))).ms);
    global.gc?.();
    const up = await withPeakRss(() => client('upload', app.url, TOKEN, String(size)));
    if (up.result.status !== 201 || up.result.body.artifact.sha256 !== up.result.sha256) {
      throw new Error(`upload failed: ${JSON.stringify(up.result).slice(0, 500)}`);
    }
    row(size, 'upload', up.result.ms, upLimit, up);
    const id = up.result.body.artifact.id as string;

    const downLimit = mbps(size, (await client('limit', String(size))).ms);
    global.gc?.();
    const down = await withPeakRss(() => client('download', app.url, TOKEN, id));
    if (down.result.status !== 200 || down.result.bytes !== size || down.result.sha256 !== up.result.sha256) {
      throw new Error(`download failed: ${JSON.stringify(down.result).slice(0, 500)}`);
    }
    row(size, 'download', down.result.ms, downLimit, down);
    await fetch(`${app.url}/v1/artifacts/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
  }
  console.log(rows.join('\n'));
  if (sizes.length > 1) {
    const growth = (d: 'upload' | 'download') => `${((peaks[d].at(-1)! - peaks[d][0]!) / MiB).toFixed(0)} MiB`;
    console.log(
      `peak RSS from ${mib(sizes[0]!)} MiB to ${mib(sizes.at(-1)!)} MiB artifacts: upload ${growth('upload')}, download ${growth('download')}`,
    );
  }
  console.log(
    `node ${process.version}, ${cpus().length} CPUs, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}; MB = 10^6 bytes`,
  );
} finally {
  await app.stop();
  await rm(dataDir, { recursive: true, force: true });
}
