// The other side of bench/artifacts.ts, run in its own process so the server's thread and RSS are
// measured alone. Prints one JSON line.
//   upload   <base url> <token> <bytes>   POST /v1/artifacts, Content-Length, a 4 MiB random block repeated
//   download <base url> <token> <id>      GET /v1/artifacts/{id}/content
//   limit    <bytes>                      the machine's limit: SHA-256 + AES-256-GCM, 4 MiB chunks, one thread
// Upload and download hash what goes over the wire (on this process's core) to check the server's sha256.
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { limitMs } from './limit';

const BLOCK = randomBytes(4 * 1024 * 1024);

function upload(size: number): Promise<object> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const hash = createHash('sha256');
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
        resolve({ status: res.statusCode, ms, sha256: hash.digest('hex'), body: JSON.parse(body) });
      });
    });
    let sent = 0;
    const pump = () => {
      while (sent < size) {
        const piece = BLOCK.subarray(0, Math.min(BLOCK.length, size - sent));
        sent += piece.length;
        hash.update(piece);
        if (!req.write(piece)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

function download(id: string): Promise<object> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const req = request(`${base}/v1/artifacts/${id}/content`, { headers: { authorization: `Bearer ${token}` } });
    req.on('error', reject);
    req.on('response', (res) => {
      const hash = createHash('sha256');
      let bytes = 0;
      res.on('data', (d: Buffer) => {
        bytes += d.length;
        hash.update(d);
      });
      res.on('error', reject);
      res.on('end', () => {
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        resolve({ status: res.statusCode, ms, bytes, sha256: hash.digest('hex'), etag: res.headers.etag });
      });
    });
    req.end();
  });
}

const [mode, base, token, arg] = process.argv.slice(2);
const result = mode === 'upload' ? await upload(Number(arg)) : mode === 'download' ? await download(arg!) : { ms: limitMs(Number(base)) };
process.stdout.write(`${JSON.stringify(result)}\n`);
