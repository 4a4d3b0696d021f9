// A body over a limit is refused while the client still sends it: the client gets the whole 413
// answer and can go on writing without a reset, what it sends is dropped (never kept) up to a
// bound, and then the connection closes. Clients here are raw sockets that keep writing.
import { connect } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { LINGER_BYTES } from '../src/edges/http/early-answer';
import { parseResponse, type RawReply, rawRequest } from './helpers/raw-http';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const MiB = 1024 * 1024;
const PIECE = Buffer.alloc(64 * 1024, 'x');

/** A connection that sends a request's head, then a body as the test says; it reads the answer meanwhile. */
function rawSender(url: string, head: string, chunked = false) {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  let data = Buffer.alloc(0);
  let error: string | undefined;
  let answered: (reply: RawReply) => void;
  const reply = new Promise<RawReply>((resolve) => (answered = resolve));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('data', (chunk: Buffer) => {
    data = Buffer.concat([data, chunk]);
    const parsed = parseResponse(data);
    if (parsed) answered(parsed);
  });
  socket.on('error', (err: NodeJS.ErrnoException) => {
    error = err.code;
  });
  socket.write(head);
  const frame = (piece: Buffer) =>
    chunked ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]) : piece;
  return {
    reply,
    closed,
    /** The error the connection ended with, if any (EPIPE, ECONNRESET). */
    error: () => error,
    /** Writes `size` bytes of body (a last chunk after them with `last`); resolves how many went out before the connection closed. */
    async send(size: number, last = false): Promise<number> {
      let sent = 0;
      while (sent < size && socket.writable) {
        const piece = PIECE.subarray(0, Math.min(PIECE.length, size - sent));
        if (!socket.write(frame(piece))) await Promise.race([new Promise((resolve) => socket.once('drain', resolve)), closed]);
        if (socket.writable) sent += piece.length;
      }
      if (chunked && last && socket.writable) socket.write('0\r\n\r\n');
      return sent;
    },
    destroy: () => socket.destroy(),
  };
}

describeBackends('bodies over a limit', (backend) => {
  let s: TestServer;
  const head = (path: string, framing: string) =>
    `POST ${path} HTTP/1.1\r\nHost: ${new URL(s.url).host}\r\nAuthorization: Bearer ${BOOTSTRAP}\r\n` +
    `Content-Type: application/json\r\n${framing}\r\n\r\n`;
  const tooLarge = { status: 413, headers: { connection: 'close' }, json: { error: expect.any(String), code: 'too_large' } };

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it('answer 413 to a client still sending, which may finish its body without a reset', async () => {
    const cases = [
      { path: '/v1/environments', size: 20 * MiB, chunked: false },
      { path: '/v1/environments', size: 5 * MiB, chunked: true },
      { path: '/graphql', size: 5 * MiB, chunked: false },
      { path: '/graphql', size: 5 * MiB, chunked: true },
    ];
    for (const { path, size, chunked } of cases) {
      const name = `${path} ${chunked ? 'chunked' : 'Content-Length'}`;
      const c = rawSender(s.url, head(path, chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${size}`), chunked);
      expect(await c.send(size, true), name).toBe(size);
      expect(await c.reply, name).toMatchObject(tooLarge);
      await c.closed;
      expect(c.error(), name).toBeUndefined();
    }
  });

  it('leave a chunked body within the limit served, GraphQL read before yoga included', async () => {
    const query = JSON.stringify({ query: '{ viewer { name } }' });
    for (const [path, body] of [
      ['/graphql', query],
      ['/v1/tokens', JSON.stringify({ name: 'chunked' })],
    ] as const) {
      const framed = `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`;
      const reply = await rawRequest(s.url, head(path, 'Transfer-Encoding: chunked') + framed);
      expect(reply, path).toMatchObject({ status: path === '/graphql' ? 200 : 201 });
      expect(reply!.headers.connection, path).not.toBe('close');
    }
  });

  it('drop a bounded number of bytes of what follows, then close', async () => {
    const declared = 1024 * MiB;
    const c = rawSender(s.url, head('/v1/environments', `Content-Length: ${declared}`));
    const sent = await c.send(declared);
    expect(await c.reply).toMatchObject({ ...tooLarge, json: { error: expect.stringContaining(String(MiB)), code: 'too_large' } });
    await c.closed;
    // Closed after at most LINGER_BYTES dropped (or LINGER_MS), long before the declared end.
    expect(sent).toBeLessThan(Math.min(declared, 2 * LINGER_BYTES));
  });

  it('leave other connections served, and close one whose client stops sending', async () => {
    const c = rawSender(s.url, head('/v1/environments', `Content-Length: ${20 * MiB}`));
    await c.send(2 * MiB);
    expect(await c.reply).toMatchObject(tooLarge);
    // The refused body is still due; another connection is served meanwhile.
    const me = await client(() => s.url, BOOTSTRAP).get('/v1/me');
    expect(me.status).toBe(200);
    await c.closed;
    c.destroy();
  });

  it('apply to every answer given before the body arrived, a refused credential included', async () => {
    const size = 20 * MiB;
    const c = rawSender(s.url, head('/v1/environments', `Content-Length: ${size}`).replace(BOOTSTRAP, 'bct_nobody-0123456789abcdef'));
    expect(await c.send(size)).toBe(size);
    expect(await c.reply).toMatchObject({ status: 401, headers: { connection: 'close' }, json: { code: 'unauthorized' } });
    await c.closed;
    expect(c.error()).toBeUndefined();
  });
});
