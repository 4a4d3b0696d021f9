import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createLogger, logFunction } from '../src/observability/log';
import { loggedPath } from '../src/observability/requests';
import { rawRequest } from './helpers/raw-http';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

type Line = Record<string, any>;

/** Collects a server's log lines; `next` waits for the first line (already seen or to come) that matches. */
function logBook() {
  const raw: string[] = [];
  const lines: Line[] = [];
  const waiting: { match: (l: Line) => boolean; resolve: (l: Line) => void }[] = [];
  return {
    raw,
    lines,
    write(text: string) {
      raw.push(text);
      for (const piece of text.split('\n')) {
        if (!piece) continue;
        const line = JSON.parse(piece) as Line;
        lines.push(line);
        for (const w of waiting.splice(0)) {
          if (w.match(line)) w.resolve(line);
          else waiting.push(w);
        }
      }
    },
    next(match: (l: Line) => boolean): Promise<Line> {
      const seen = lines.find(match);
      return seen ? Promise.resolve(seen) : new Promise((resolve) => waiting.push({ match, resolve }));
    },
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describeBackends('logs', (backend) => {
  let s: TestServer;
  const book = logBook();
  const admin = client(() => s.url, BOOTSTRAP);
  const requestLine = (id: string) => book.next((l) => l.msg === 'request' && l.reqId === id);

  beforeAll(async () => {
    s = await startServer(backend, {}, { logLines: (line) => book.write(line) });
  });
  afterAll(() => s?.stop());

  it('writes one JSON line per request, with its id, caller, status and duration', async () => {
    const res = await admin.get('/v1/me');
    expect(res.status).toBe(200);
    const id = res.headers.get('x-request-id')!;
    expect(id).toMatch(UUID);
    const line = await requestLine(id);
    expect(line).toMatchObject({
      level: 'info',
      msg: 'request',
      method: 'GET',
      path: '/v1/me',
      route: '/v1/me',
      status: 200,
      orgId: expect.any(String),
      actorKind: 'person',
      actorId: expect.any(String),
    });
    expect(line.durationMs).toBeGreaterThanOrEqual(0);
    expect(Date.parse(line.time)).not.toBeNaN();
    expect(book.lines.filter((l) => l.reqId === id)).toHaveLength(1);
  });

  it("keeps a caller's well-formed x-request-id and replaces any other", async () => {
    const own = await admin.get('/v1/me', { 'x-request-id': 'build-42.step:7_a' });
    expect(own.headers.get('x-request-id')).toBe('build-42.step:7_a');
    await requestLine('build-42.step:7_a');
    for (const bad of ['has space', 'x'.repeat(129), 'quote"', '']) {
      const res = await admin.get('/v1/me', { 'x-request-id': bad });
      const id = res.headers.get('x-request-id')!;
      expect(id).toMatch(UUID);
      await requestLine(id);
    }
    expect(book.raw.join('')).not.toContain('has space');
  });

  it('puts the id on every kind of answer: errors, GraphQL, the console, unknown paths', async () => {
    const answers = [
      await fetch(`${s.url}/v1/environments/nope`),
      await fetch(`${s.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"query":"{ me { id } }"}',
      }),
      await fetch(`${s.url}/`),
      await fetch(`${s.url}/no/such/thing`),
      await fetch(`${s.url}/v1/me`, { method: 'OPTIONS' }),
    ];
    const statuses = [];
    for (const res of answers) {
      const line = await requestLine(res.headers.get('x-request-id')!);
      statuses.push([line.route, line.status]);
      expect(line.status).toBe(res.status);
    }
    expect(statuses).toEqual([
      ['/v1/environments/{id}', 401],
      ['/graphql', 401],
      ['console', 200],
      ['other', 404],
      ['/v1/me', 405],
    ]);
  });

  it("puts an id on what Node's HTTP parser refuses, too", async () => {
    const reply = await rawRequest(s.url, 'GARBAGE\r\n\r\n');
    expect(reply?.status).toBe(400);
    expect(reply?.headers['x-request-id']).toMatch(UUID);
  });

  it('writes one line per WebSocket session when it ends, and ids refused upgrades', async () => {
    const ws = new WebSocket(`${s.url.replace('http', 'ws')}/graphql`, 'graphql-transport-ws', {
      headers: { 'x-request-id': 'ws-session-1' },
    });
    const upgrade = new Promise<string | undefined>((resolve) =>
      ws.once('upgrade', (res) => resolve(res.headers['x-request-id'] as string)),
    );
    await new Promise((resolve) => ws.once('open', resolve));
    expect(await upgrade).toBe('ws-session-1');
    const acked = new Promise((resolve) => ws.once('message', resolve));
    ws.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${BOOTSTRAP}` } }));
    await acked;
    ws.close();
    const line = await requestLine('ws-session-1');
    expect(line).toMatchObject({ route: '/graphql', status: 101, websocket: true, actorKind: 'person', orgId: expect.any(String) });

    const refused = await new Promise<{ status?: number; id?: string }>((resolve) => {
      const req = request(`${s.url}/no-socket-here?token=zzz-refused-secret`, {
        headers: {
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-version': '13',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
        },
      });
      req.on('response', (res) => {
        res.resume();
        resolve({ status: res.statusCode, id: res.headers['x-request-id'] as string });
      });
      req.end();
    });
    expect(refused.status).toBe(404);
    const refusedLine = await requestLine(refused.id!);
    expect(refusedLine).toMatchObject({ status: 404, route: 'other', websocket: true, path: '/no-socket-here?token=[redacted]' });
  });

  it('never writes a token, a signed link, a secret query value or a header', async () => {
    const up = await fetch(`${s.url}/v1/artifacts?name=l.bin&link=1h`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream' },
      body: new Uint8Array(Buffer.from('hello')),
    });
    expect(up.status).toBe(201);
    const { link } = await up.json();
    const linkToken = new URL(link.url).pathname.split('/').pop()!;
    const got = await fetch(link.url);
    expect(got.status).toBe(200);
    const viaLink = await requestLine(got.headers.get('x-request-id')!);
    expect(viaLink).toMatchObject({ path: '/v1/links/[redacted]', route: '/v1/links/{token}', status: 200 });
    const queried = await admin.get('/v1/me?token=qq-query-secret&sig=qq-sig-secret&x=visible', { cookie: 'session=qq-cookie-secret' });
    expect(queried.status).toBe(422);
    const line = await requestLine(queried.headers.get('x-request-id')!);
    expect(line.path).toBe('/v1/me?token=[redacted]&sig=[redacted]&x=visible');
    const named = [
      'jwt',
      'JWT',
      'access_token',
      'refresh_token',
      'id_token',
      'key',
      'api_key',
      'ApiKey',
      'signature',
      'X-Amz-Signature',
      'password',
      'passwd',
      'pwd',
      'secret',
      'client_secret',
      'session',
      'client_assertion',
      'code',
    ];
    const sent = named.map((name, i) => `${name}=qq-named-secret-${i}`).join('&');
    const credentials = await admin.get(`/v1/me?${sent}&page=visible`);
    expect(credentials.status).toBe(422);
    const credentialsLine = await requestLine(credentials.headers.get('x-request-id')!);
    expect(credentialsLine.path).toBe(`/v1/me?${named.map((name) => `${name}=[redacted]`).join('&')}&page=visible`);
    await admin.get('/v1/me', { authorization: 'Bearer bct_qq-unknown-token-0123456789abcdef' });
    await new Promise((resolve) => setImmediate(resolve));
    const all = book.raw.join('');
    for (const secret of [
      BOOTSTRAP,
      linkToken,
      'qq-query-secret',
      'qq-sig-secret',
      'qq-named-secret',
      'qq-cookie-secret',
      'qq-unknown-token',
      'zzz-refused-secret',
    ]) {
      expect(all).not.toContain(secret);
    }
    expect(all.toLowerCase()).not.toContain('authorization');
  });
});

describe('log format', () => {
  it('writes errors with their stack at level error, and names the field', () => {
    const out: string[] = [];
    const log = logFunction(createLogger({ format: 'json', level: 'info', destination: { write: (l) => void out.push(l) } }));
    log('could not end env_1', new Error('boom'));
    log('a warning');
    const [error, warning] = out.map((l) => JSON.parse(l));
    expect(error).toMatchObject({ level: 'error', msg: 'could not end env_1', err: { message: 'boom', type: 'Error' } });
    expect(error.err.stack).toMatch(/boom\n\s+at /);
    expect(warning).toMatchObject({ level: 'warn', msg: 'a warning' });
  });

  it('redacts credential-named fields should a line ever carry one', () => {
    const out: string[] = [];
    const logger = createLogger({ format: 'json', level: 'info', destination: { write: (l) => void out.push(l) } });
    logger.info({ token: 'tk-1', err: { headers: { authorization: 'Bearer tk-2' } }, detail: { secret: 'tk-3' } }, 'x');
    expect(out.join('')).not.toMatch(/tk-\d/);
  });

  it('writes readable lines for a terminal', () => {
    const out: string[] = [];
    const logger = createLogger({ format: 'pretty', level: 'info', destination: { write: (l) => void out.push(l) } });
    logger.info({ reqId: 'r1', status: 200 }, 'request');
    logger.error({ err: new Error('boom') }, 'failed');
    expect(out[0]).toMatch(/^\d\d:\d\d:\d\d\.\d{3} INFO {2}request reqId=r1 status=200\n$/);
    expect(out[1]).toMatch(/^\S+ ERROR failed\n {4}Error: boom\n {8}at /);
  });

  it('redacts credential query values, percent-encoded keys included, and bounds the path', () => {
    expect(loggedPath('/v1/x?%74oken=a&Signature=b&apiKey=c&password=d&page=2')).toBe(
      '/v1/x?%74oken=[redacted]&Signature=[redacted]&apiKey=[redacted]&password=[redacted]&page=2',
    );
    expect(loggedPath(`/${'a'.repeat(5000)}`).length).toBeLessThanOrEqual(512);
  });
});
