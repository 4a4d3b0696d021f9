import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { firstPage } from '../scripts/console-size';
import { createConsoleHandler } from '../src/edges/console';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';

const HTML = { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' };
const BUDGET = 250 * 1000;

describe('the web console, as served', () => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let script: string;

  beforeAll(async () => {
    s = await startServer('pglite');
  });
  afterAll(() => s?.stop());

  it('serves index.html at / with a strict policy and no caching', async () => {
    const res = await fetch(`${s.url}/`, { headers: HTML });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('cache-control')).toBe('no-cache');
    const csp = res.headers.get('content-security-policy')!;
    const host = new URL(s.url).host;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("style-src 'self'");
    expect(csp).toContain(`connect-src 'self' ws://${host} wss://${host}`);
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).not.toContain('unsafe-eval');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    const html = await res.text();
    // Nothing inline: every script and style is a file of this origin.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/<style|\sstyle=/);
    expect(html).not.toMatch(/https?:\/\//);
    script = /<script[^>]*src="([^"]+)"/.exec(html)![1]!;
    expect(script).toMatch(/^\/assets\/.+\.js$/);
  });

  it('serves hashed assets as immutable for a year, compressed when asked', async () => {
    const plain = await fetch(`${s.url}${script}`, { headers: { 'accept-encoding': 'identity' } });
    expect(plain.status).toBe(200);
    expect(plain.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(plain.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    const body = Buffer.from(await plain.arrayBuffer());
    // React's production build (a NODE_ENV left at test or development would build the other one).
    expect(body.toString()).not.toContain('Each child in a list should have a unique');
    // fetch() would decode a compressed body itself; node:http shows the bytes as sent.
    const gzipped = await rawGet(s.url, script, { 'accept-encoding': 'gzip' });
    expect(gzipped.headers['content-encoding']).toBe('gzip');
    expect(gzipped.headers.vary).toBe('Accept-Encoding');
    expect(gunzipSync(gzipped.body).equals(body)).toBe(true);
    const brotli = await rawGet(s.url, script, { 'accept-encoding': 'gzip, br' });
    expect(brotli.headers['content-encoding']).toBe('br');
    const etag = plain.headers.get('etag')!;
    expect((await fetch(`${s.url}${script}`, { headers: { 'if-none-match': etag, 'accept-encoding': 'identity' } })).status).toBe(304);
  });

  it('answers client routes with index.html, but never API paths or missing assets', async () => {
    const route = await fetch(`${s.url}/environments/brave-otter-4821`, { headers: HTML });
    expect(route.status).toBe(200);
    expect(route.headers.get('content-type')).toContain('text/html');
    expect(route.headers.get('cache-control')).toBe('no-cache');
    expect(await route.text()).toContain(script);

    // What is neither a file nor a page gets the server's JSON 404, like any unknown path.
    const missing = await fetch(`${s.url}/assets/index-gone.js`, { headers: HTML });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ code: 'not_found' });
    const image = await fetch(`${s.url}/no-such-file.png`, { headers: { accept: 'image/*' } });
    expect(image.status).toBe(404);
    expect(await image.json()).toMatchObject({ code: 'not_found' });
    // Paths that climb out of the console's folder (sent as is: fetch would resolve them).
    for (const path of ['/%2e%2e/package.json', '/assets/..%2f..%2fpackage.json', '/..%2f..%2fsrc/edges/console.ts']) {
      const res = await rawGet(s.url, path, HTML);
      expect(res.status, path).toBe(404);
      expect(JSON.parse(res.body.toString())).toMatchObject({ code: 'not_found' });
    }

    // The API keeps its own answers beside the console.
    const unknownApi = await fetch(`${s.url}/v1/nope`, { headers: HTML });
    expect(unknownApi.status).toBe(404);
    expect(await unknownApi.json()).toMatchObject({ code: 'not_found' });
    expect((await admin.get('/v1/me')).status).toBe(200);
    const gql = await admin.post('/graphql', { query: '{ viewer { name } }' });
    expect(gql.body).toEqual({ data: { viewer: { name: 'admin@berth.local' } } });
    expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${s.url}/graphql/x`, { headers: HTML })).status).toBe(404);
    expect((await fetch(`${s.url}/`, { method: 'POST', body: 'x' })).status).toBe(404);
  });

  it(`keeps the first page's JavaScript within ${BUDGET / 1000} KB gzipped`, async () => {
    const page = await firstPage();
    expect(page.files.filter((f) => f.kind === 'script').map((f) => f.path)).toContain(script);
    console.log(`console first page: ${(page.scriptGzip / 1024).toFixed(1)} KiB of JavaScript gzipped`);
    expect(page.scriptGzip).toBeGreaterThan(0);
    expect(page.scriptGzip).toBeLessThanOrEqual(BUDGET);
  });
});

describe('the web console when it is not built', () => {
  let server: Server;
  let dir: string;
  let base: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-console-'));
    const web = createConsoleHandler(dir);
    server = createServer(async (req, res) => {
      if (!(await web.handle(req, res))) res.writeHead(404).end('not the console');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });

  it('answers / with a clear message instead of failing', async () => {
    const res = await fetch(`${base}/`);
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await res.text()).toContain('npm install');
    expect((await fetch(`${base}/environments`, { headers: HTML })).status).toBe(503);
    expect(await (await fetch(`${base}/v1/me`)).text()).toBe('not the console');
    expect(await (await fetch(`${base}/assets/x.js`)).text()).toBe('not the console');
  });
});

/** A GET of `path` exactly as written, whose body is returned exactly as sent (fetch would normalize and decode). */
function rawGet(base: string, path: string, headers: Record<string, string>) {
  const { hostname, port } = new URL(base);
  return new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }>((resolve, reject) => {
    request({ host: hostname, port, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
    })
      .on('error', reject)
      .end();
  });
}
