// The other side of bench/artifacts.ts, run in its own process so the server's thread and RSS are
// measured alone. Prints one JSON line.
//   upload   <base url> <token> <bytes>   POST /v1/artifacts, Content-Length, a 4 MiB random block repeated
//   curl-upload <base url> <token> <bytes>  the same upload by curl (-T, streamed from a file written
//                                          first), timed with curl's own CPU (/usr/bin/time)
//   download <base url> <token> <id>      GET /v1/artifacts/{id}/content
//   limit    <bytes>                      the machine's limit: SHA-256 + AES-256-GCM, 4 MiB chunks, one thread
//   disk     <dir> <bytes>                the disk's: the same bytes written into a file in <dir>, 4 MiB
//                                          writes, fdatasync every 64 MiB as the fs store's segments
// Upload checks the server's sha256 against one computed before the clock starts; download compares
// every byte with what upload sent (memcmp, much cheaper than hashing): this process shares the
// machine's two cores with the server, so it spends as little of them as it can.
import { execFile } from 'node:child_process';
import { createCipheriv, createHash } from 'node:crypto';
import { closeSync, fdatasyncSync, openSync, writeSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { limitMs } from './limit';

// The same incompressible block in every run of this process (AES-CTR under a fixed key), so a
// download can be checked against what an earlier process uploaded.
const BLOCK = createCipheriv('aes-256-ctr', Buffer.alloc(32, 7), Buffer.alloc(16)).update(Buffer.alloc(4 * 1024 * 1024));

/** What upload sends, `size` bytes: BLOCK repeated, the last piece cut short. */
function* pieces(size: number): Generator<Buffer> {
  for (let n = 0; n < size; n += BLOCK.length) yield BLOCK.subarray(0, Math.min(BLOCK.length, size - n));
}

/** SHA-256 of what upload sends. */
function expectedSha256(size: number): string {
  const hash = createHash('sha256');
  for (const piece of pieces(size)) hash.update(piece);
  return hash.digest('hex');
}

/** Checks that `piece`, received at `at`, is what upload sent there; returns the next offset. */
function checkPiece(piece: Buffer, at: number): number {
  for (let done = 0; done < piece.length; ) {
    const inBlock = (at + done) % BLOCK.length;
    const n = Math.min(piece.length - done, BLOCK.length - inBlock);
    if (!piece.subarray(done, done + n).equals(BLOCK.subarray(inBlock, inBlock + n))) throw new Error(`byte ${at + done}.. differ`);
    done += n;
  }
  return at + piece.length;
}

function upload(size: number): Promise<Record<string, unknown>> {
  const sha256 = expectedSha256(size); // before the clock starts: this process's core is the server's peer, not its rival
  cpuFrom = process.cpuUsage();
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const req = request(`${base}/v1/artifacts?name=bench.bin&retention=1h`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', 'content-length': size },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => {
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        resolve({ status: res.statusCode, ms, sha256, body: JSON.parse(body) });
      });
    });
    const sending = pieces(size);
    const pump = () => {
      for (let next = sending.next(); !next.done; next = sending.next()) {
        if (!req.write(next.value)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

/** The upload by curl, as a user would send a file; the file is written (and cached) before the clock starts. */
async function curlUpload(size: number): Promise<Record<string, unknown>> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-bench-curl-'));
  try {
    const file = join(dir, 'bench.bin');
    await writeFile(file, [...pieces(size)]);
    const sha256 = expectedSha256(size);
    const times = join(dir, 'times');
    const started = process.hrtime.bigint();
    const { stdout } = await promisify(execFile)(
      '/usr/bin/time',
      [
        '-f',
        '%U %S',
        '-o',
        times,
        'curl',
        '-sS',
        '--fail-with-body',
        '-X',
        'POST',
        '-T',
        file,
        '-H',
        `authorization: Bearer ${token}`,
        '-H',
        'content-type: application/octet-stream',
        '-w',
        '\\n%{http_code}',
        `${base}/v1/artifacts?name=bench.bin&retention=1h`,
      ],
      { maxBuffer: 1024 * 1024 },
    );
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    const [user, system] = (await readFile(times, 'utf8')).trim().split(/\s+/).map(Number);
    const status = Number(stdout.slice(stdout.lastIndexOf('\n') + 1));
    const body = JSON.parse(stdout.slice(0, stdout.lastIndexOf('\n')));
    return { status, ms, sha256, body, curlCpuMs: ((user ?? 0) + (system ?? 0)) * 1000 };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const SEGMENT = 64 * 1024 * 1024;

/** Writes `size` bytes into a new file in `dir` as the fs store does (no crypto, no HTTP); ms. */
async function diskMs(dir: string, size: number): Promise<number> {
  const folder = await mkdtemp(join(dir, 'berth-bench-disk-'));
  try {
    const fd = openSync(join(folder, 'segment'), 'wx');
    const started = process.hrtime.bigint();
    let written = 0;
    for (const piece of pieces(size)) {
      writeSync(fd, piece);
      written += piece.length;
      if (written % SEGMENT === 0 || written === size) fdatasyncSync(fd);
    }
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    closeSync(fd);
    return ms;
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
}

function download(id: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const req = request(`${base}/v1/artifacts/${id}/content`, { headers: { authorization: `Bearer ${token}` } });
    req.on('error', reject);
    req.on('response', (res) => {
      let bytes = 0;
      res.on('data', (d: Buffer) => {
        try {
          bytes = checkPiece(d, bytes);
        } catch (err) {
          res.destroy(err as Error);
        }
      });
      res.on('error', reject);
      res.on('end', () => {
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        resolve({ status: res.statusCode, ms, bytes, etag: res.headers.etag });
      });
    });
    req.end();
  });
}

const [mode, base, token, arg] = process.argv.slice(2);
let cpuFrom = process.cpuUsage();
const result: Record<string, unknown> =
  mode === 'upload'
    ? await upload(Number(arg))
    : mode === 'curl-upload'
      ? await curlUpload(Number(arg))
      : mode === 'download'
        ? await download(arg!)
        : mode === 'disk'
          ? { ms: await diskMs(base!, Number(token)) }
          : { ms: limitMs(Number(base)) };
const cpu = process.cpuUsage(cpuFrom);
// For curl the client's CPU is curl's; this process only waited.
const cpuMs = typeof result.curlCpuMs === 'number' ? result.curlCpuMs : (cpu.user + cpu.system) / 1000;
process.stdout.write(`${JSON.stringify({ ...result, cpuMs })}\n`);
