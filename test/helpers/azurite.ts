import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/** Azurite's well-known development account (public, documented by Microsoft). */
export const AZURITE_ACCOUNT = 'devstoreaccount1';
export const AZURITE_KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

export interface Azurite {
  connectionString: string;
  port: number;
  stop(): Promise<void>;
}

const require = createRequire(import.meta.url);

/**
 * Starts azurite-blob (npm package `azurite`, 3.35) on 127.0.0.1 with an OS-chosen port and
 * in-memory persistence (or, with `location`, on disk in that folder), waits until it listens, and
 * returns its connection string. Throws (so the calling suite fails loudly, never skips) if it
 * cannot start within `timeoutMs`.
 */
export async function startAzurite(timeoutMs = 30_000, options: { location?: string } = {}): Promise<Azurite> {
  const main = join(dirname(require.resolve('azurite/package.json')), 'dist', 'src', 'blob', 'main.js');
  // In-memory persistence writes nothing, but give it an empty working folder all the same.
  const cwd = await mkdtemp(join(tmpdir(), 'berth-azurite-'));
  const child = spawn(
    process.execPath,
    [
      main,
      ...(options.location ? ['--location', options.location] : ['--inMemoryPersistence', '--extentMemoryLimit', '2048']),
      '--blobHost',
      '127.0.0.1',
      '--blobPort',
      '0', // supported by 3.35: it prints the port it got
      '--skipApiVersionCheck',
      '--loose',
      '--disableTelemetry',
    ],
    { cwd, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => fail(new Error(`azurite did not start within ${timeoutMs} ms`)), timeoutMs);
    const onData = (data: Buffer) => {
      output += data.toString();
      const m = /successfully listens on https?:\/\/[^:\s]+:(\d+)/.exec(output);
      if (m && !settled) {
        settled = true;
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(new Error(`${err.message}\n--- azurite output ---\n${output}`));
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    child.once('error', fail);
    child.once('exit', (code, sig) => fail(new Error(`azurite exited early (code ${code}, signal ${sig})`)));
  }).catch(async (err: unknown) => {
    await rm(cwd, { recursive: true, force: true });
    throw err;
  });
  // Keep draining its output so a chatty access log can never block it on a full pipe.
  child.stdout!.resume();
  child.stderr!.resume();
  const connectionString =
    `DefaultEndpointsProtocol=http;AccountName=${AZURITE_ACCOUNT};AccountKey=${AZURITE_KEY};` +
    `BlobEndpoint=http://127.0.0.1:${port}/${AZURITE_ACCOUNT};`;
  return {
    connectionString,
    port,
    stop: async () => {
      await stopChild(child);
      await rm(cwd, { recursive: true, force: true });
    },
  };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
