import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest } from './helpers/raw-http';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const errorBody = { error: expect.any(String), code: expect.any(String) };

describeBackends('HTTP protocol errors, health', (backend) => {
  let s: TestServer;
  const host = () => new URL(s.url).host;

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it("answers what Node's HTTP parser refuses with an error body", async () => {
    const big = await rawRequest(s.url, `GET /v1/me HTTP/1.1\r\nHost: ${host()}\r\nX-Big: ${'a'.repeat(17 * 1024)}\r\n\r\n`);
    expect(big).toMatchObject({ status: 431, json: { ...errorBody, code: 'headers_too_large' } });
    for (const request of [
      `POST /v1/tokens HTTP/1.1\r\nHost: ${host()}\r\nContent-Length: abc\r\n\r\n{}`,
      `POST /v1/tokens HTTP/1.1\r\nHost: ${host()}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`,
      `POST /v1/tokens HTTP/1.1\r\nHost: ${host()}\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
      'GARBAGE\r\n\r\n',
      `GET /v1/me HTTP/1.1\r\nHost: ${host()}\r\nBad Header Name: x\r\n\r\n`,
    ]) {
      const reply = await rawRequest(s.url, request);
      expect(reply, request).toMatchObject({ status: 400, json: { ...errorBody, code: 'bad_request' } });
    }
  });

  it('answers refused WebSocket upgrades with an error body', async () => {
    const upgrade = (path: string, extra = '') =>
      rawRequest(
        s.url,
        `GET ${path} HTTP/1.1\r\nHost: ${host()}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
          `Sec-WebSocket-Version: 13\r\n${extra}\r\n`,
      );
    const key = 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n';
    expect(await upgrade('/nowhere', key)).toMatchObject({ status: 404, json: { ...errorBody, code: 'not_found' } });
    expect(await upgrade('/graphql')).toMatchObject({ status: 400, json: { ...errorBody, code: 'bad_request' } });
    expect(await upgrade('/graphql', `${key}Origin: https://evil.example\r\n`)).toMatchObject({
      status: 403,
      json: { ...errorBody, code: 'forbidden' },
    });
  });

  it('answers a lying Content-Length without hanging or failing', async () => {
    const auth = `Authorization: Bearer ${BOOTSTRAP}\r\nContent-Type: application/json`;
    const shorter = await rawRequest(
      s.url,
      `POST /v1/tokens HTTP/1.1\r\nHost: ${host()}\r\n${auth}\r\nContent-Length: 5\r\n\r\n{"name":"x"}`,
    );
    expect(shorter).toMatchObject({ status: 400, json: { ...errorBody, code: 'invalid_json' } });
    const longer = await rawRequest(
      s.url,
      `POST /v1/tokens HTTP/1.1\r\nHost: ${host()}\r\n${auth}\r\nContent-Length: 500\r\n\r\n{"name":"x"}`,
      { endAfterWrite: true },
    );
    if (longer) expect(longer).toMatchObject({ status: 400, json: errorBody });
    const graphql = await rawRequest(
      s.url,
      `POST /graphql HTTP/1.1\r\nHost: ${host()}\r\n${auth}\r\nContent-Length: 500\r\n\r\n{"query":"{ viewer { name } }"}`,
      { endAfterWrite: true },
    );
    if (graphql) expect(graphql.status).toBeLessThan(500);
    // The server is fine afterwards.
    expect((await client(() => s.url, BOOTSTRAP).get('/v1/me')).status).toBe(200);
  });

  it('answers other GraphQL transport errors with an error body', async () => {
    const put = await fetch(`${s.url}/graphql`, { method: 'PUT', headers: { authorization: `Bearer ${BOOTSTRAP}` } });
    expect(put.status).toBe(405);
    expect(await put.json()).toMatchObject(errorBody);
  });

  it('answers liveness and readiness with JSON', async () => {
    const live = await fetch(`${s.url}/healthz`);
    expect(live.status).toBe(200);
    expect(await live.json()).toEqual({ status: 'ok' });
    const ready = await fetch(`${s.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', checks: { database: 'ok', migrations: 'ok' } });
  });

  it('is not ready while a migration is missing or the database is unreachable', async () => {
    const { prisma } = s.app.deps;
    const [latest] = await prisma.$queryRawUnsafe<{ id: string; migration_name: string }[]>(
      'SELECT id, migration_name FROM _prisma_migrations ORDER BY migration_name DESC LIMIT 1',
    );
    await prisma.$executeRawUnsafe('UPDATE _prisma_migrations SET finished_at = NULL WHERE id = $1', latest!.id);
    const pending = await fetch(`${s.url}/readyz`);
    expect(pending.status).toBe(503);
    expect(await pending.json()).toMatchObject({ code: 'not_ready', error: expect.stringContaining(latest!.migration_name) });
    await prisma.$executeRawUnsafe('UPDATE _prisma_migrations SET finished_at = now() WHERE id = $1', latest!.id);
    expect((await fetch(`${s.url}/readyz`)).status).toBe(200);

    await s.app.deps.db.close();
    const down = await fetch(`${s.url}/readyz`);
    expect(down.status).toBe(503);
    // The driver's own words (they may name hosts and users) go to the log only.
    expect(await down.json()).toEqual({ code: 'not_ready', error: 'not ready: the database is unreachable' });
    expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
  });
});

describe('CORS', () => {
  let plain: TestServer;
  let open: TestServer;
  const CONSOLE = 'https://console.example';

  beforeAll(async () => {
    plain = await startServer();
    open = await startServer('pglite', { CORS_ORIGINS: `${CONSOLE}, https://other.example` });
  });
  afterAll(async () => {
    await plain?.stop();
    await open?.stop();
  });

  const preflight = (base: string, path: string, origin: string) =>
    fetch(`${base}${path}`, {
      method: 'OPTIONS',
      headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });

  it('allows no other origin by default, REST and GraphQL alike', async () => {
    for (const path of ['/v1/tokens', '/graphql']) {
      const res = await preflight(plain.url, path, 'https://evil.example');
      expect(res.status, path).toBe(403);
      expect(res.headers.get('access-control-allow-origin')).toBeNull();
      expect(await res.json()).toMatchObject({ code: 'forbidden', error: expect.stringContaining('CORS_ORIGINS') });
      const actual = await fetch(`${plain.url}${path === '/graphql' ? '/graphql?query=%7Bviewer%7Bname%7D%7D' : '/v1/me'}`, {
        headers: { origin: 'https://evil.example', authorization: `Bearer ${BOOTSTRAP}`, 'x-graphql-yoga-csrf': '1' },
      });
      expect(actual.headers.get('access-control-allow-origin')).toBeNull();
      expect(actual.headers.get('access-control-allow-credentials')).toBeNull();
    }
  });

  it('allows the origins of CORS_ORIGINS, REST and GraphQL alike', async () => {
    for (const path of ['/v1/tokens', '/graphql']) {
      const res = await preflight(open.url, path, CONSOLE);
      expect(res.status, path).toBe(204);
      expect(res.headers.get('access-control-allow-origin')).toBe(CONSOLE);
      expect(res.headers.get('access-control-allow-methods')).toContain('POST');
      expect(res.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('authorization');
      expect(res.headers.get('vary')?.toLowerCase()).toContain('origin');
      expect(res.headers.get('access-control-allow-credentials')).toBeNull();
      expect((await preflight(open.url, path, 'https://evil.example')).status).toBe(403);
    }
    const actual = await fetch(`${open.url}/v1/me`, { headers: { origin: CONSOLE, authorization: `Bearer ${BOOTSTRAP}` } });
    expect(actual.status).toBe(200);
    expect(actual.headers.get('access-control-allow-origin')).toBe(CONSOLE);
  });
});

describe('TRUST_PROXY', () => {
  let direct: TestServer;
  let proxied: TestServer;
  const limit = { AUTH_FAILURE_LIMIT: '2' };

  beforeAll(async () => {
    direct = await startServer('pglite', limit);
    proxied = await startServer('pglite', { ...limit, TRUST_PROXY: '1' });
  });
  afterAll(async () => {
    await direct?.stop();
    await proxied?.stop();
  });

  const attempt = (base: string, forwardedFor: string, token = 'bct_wrong') =>
    fetch(`${base}/v1/me`, { headers: { authorization: `Bearer ${token}`, 'x-forwarded-for': forwardedFor } }).then((r) => r.status);

  it('locks the client named by the trusted proxy, not the proxy itself', async () => {
    for (let i = 0; i < 3; i++) await attempt(proxied.url, '10.0.0.1');
    expect(await attempt(proxied.url, '10.0.0.1')).toBe(429);
    // Another client behind the same proxy is not locked, nor can a client escape by spoofing.
    expect(await attempt(proxied.url, '10.0.0.2')).toBe(401);
    expect(await attempt(proxied.url, '10.0.0.2', BOOTSTRAP)).toBe(200);
    expect(await attempt(proxied.url, '10.0.0.9, 10.0.0.1', BOOTSTRAP)).toBe(429);
  });

  it('ignores X-Forwarded-For without TRUST_PROXY', async () => {
    for (let i = 0; i < 3; i++) await attempt(direct.url, '10.0.0.1');
    expect(await attempt(direct.url, '10.0.0.2', BOOTSTRAP)).toBe(429);
  });
});

/**
 * Sends `request` and keeps the connection: `answer` settles with the first whole response (or
 * what came before the server closed), `closed` when the server closes the connection.
 */
function held(url: string, request: string) {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  let data = '';
  let settle: (answer: { status: number; headers: string; json: unknown }) => void = () => undefined;
  const answer = new Promise<{ status: number; headers: string; json: unknown }>((resolve) => {
    settle = resolve;
  });
  const tryAnswer = (closing: boolean) => {
    const end = data.indexOf('\r\n\r\n');
    if (end < 0) return;
    const headers = data.slice(0, end).toLowerCase();
    const body = data.slice(end + 4);
    const length = Number(/content-length: (\d+)/.exec(headers)?.[1] ?? Number.NaN);
    if (!closing && !(Buffer.byteLength(body) >= length)) return;
    let json: unknown;
    try {
      json = JSON.parse(body);
    } catch {
      json = undefined;
    }
    settle({ status: Number(/^http\/1\.1 (\d{3})/.exec(headers)?.[1]), headers, json });
  };
  const closed = new Promise<void>((resolve) =>
    socket.on('close', () => {
      tryAnswer(true);
      resolve();
    }),
  );
  socket.on('data', (chunk: Buffer) => {
    data += chunk.toString('latin1');
    tryAnswer(false);
  });
  socket.on('error', () => undefined);
  socket.write(request);
  return { socket, answer, closed };
}

describe('request bodies that stop arriving', () => {
  let s: TestServer;
  const host = () => new URL(s.url).host;
  const auth = `Authorization: Bearer ${BOOTSTRAP}\r\n`;
  /** A JSON POST declaring `length` bytes, of which it sends `sent`. */
  const post = (path: string, length: number, sent = '{"query":', extra = '') =>
    `POST ${path} HTTP/1.1\r\nHost: ${host()}\r\n${auth}Content-Type: application/json\r\nContent-Length: ${length}\r\n${extra}\r\n${sent}`;

  beforeAll(async () => {
    s = await startServer('pglite', { BODY_IDLE_MS: '1500' });
    // Warm: the first authentication opens the database's caches.
    expect((await client(() => s.url, BOOTSTRAP).get('/v1/me')).status).toBe(200);
  });
  afterAll(() => s?.stop());

  it('answers 408 request_timeout and closes the connection, on every route, /graphql included', async () => {
    const requests: Record<string, string> = {
      'a GraphQL query (the direct POST path)': post('/graphql', 100),
      'a GraphQL query that declares a body and sends none': post('/graphql', 100, ''),
      'a GraphQL query over 64 KiB (yoga)': post('/graphql', 200_000),
      'a GraphQL subscription over SSE': post('/graphql', 100, '{"query":', 'Accept: text/event-stream\r\n'),
      'a REST JSON body': post('/v1/tokens', 100, '{"name":'),
    };
    await Promise.all(
      Object.entries(requests).map(async ([label, request]) => {
        const { answer, closed } = held(s.url, request);
        expect(await answer, label).toMatchObject({
          status: 408,
          json: { code: 'request_timeout', error: 'the request body stopped arriving for 1.5s' },
        });
        expect((await answer).headers, label).toContain('connection: close');
        await closed;
      }),
    );
    expect((await client(() => s.url, BOOTSTRAP).get('/v1/me')).status).toBe(200);
  });

  it('answers refused credentials at once, without waiting for a GraphQL body that stalls', async () => {
    const anonymous = `POST /graphql HTTP/1.1\r\nHost: ${host()}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"query":`;
    expect(await rawRequest(s.url, anonymous)).toMatchObject({ status: 401, json: { errors: [{ extensions: { code: 'unauthorized' } }] } });
  });

  it('lets an upload be silent longer: uploads keep their own idle limit', async () => {
    const upload = held(
      s.url,
      `POST /v1/artifacts?name=slow.bin HTTP/1.1\r\nHost: ${host()}\r\n${auth}Content-Type: application/octet-stream\r\n` +
        'Content-Length: 10\r\n\r\n12345',
    );
    // Begun after the upload went silent, and answered 408: the upload has been silent longer than BODY_IDLE_MS.
    const json = held(s.url, post('/v1/tokens', 100, '{"name":'));
    expect(await json.answer).toMatchObject({ status: 408 });
    upload.socket.write('67890');
    expect(await upload.answer).toMatchObject({ status: 201, json: { artifact: { name: 'slow.bin', size: 10 } } });
    upload.socket.destroy();
  });
});
