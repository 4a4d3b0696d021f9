// The relay mux (src/dataplane/relay-mux.ts) over real WebSockets on loopback: streams carry bytes
// and half-closes both ways, each with its own flow control, within its window; a peer out of
// protocol or past its window loses the mux; a reset says why.
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { joinStreams, MUX_FRAME, MUX_STREAMS, MUX_WINDOW, type MuxStream, RelayMux } from '../src/dataplane/relay-mux';

const closers: (() => void)[] = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

/** A WebSocket server whose sockets are accepting muxes (`accept` takes their streams), and a client socket to it. */
async function pair(accept: (stream: MuxStream, request: unknown) => void) {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await once(wss, 'listening');
  const far = new Promise<{ mux: RelayMux; ws: WebSocket }>((resolve) =>
    wss.once('connection', (ws) => resolve({ mux: new RelayMux(ws, { accept }), ws })),
  );
  const ws = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
  closers.push(() => {
    ws.terminate();
    for (const client of wss.clients) client.terminate();
    wss.close();
  });
  await once(ws, 'open');
  return { ws, far: await far };
}

const readAll = async (stream: Duplex) => {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
};

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

describe('relay mux', () => {
  it('carries bytes and each half-close both ways, many streams at once', async () => {
    const asked: unknown[] = [];
    const { ws } = await pair((stream, request) => {
      asked.push(request);
      // An echo that answers its input back, then ends once the input ended.
      stream.pipe(stream);
    });
    const mux = new RelayMux(ws);
    const payloads = Array.from({ length: 20 }, (_, i) => randomBytes(1000 + i * 50_000));
    const echoed = await Promise.all(
      payloads.map((payload, i) => {
        const stream = mux.open({ n: i });
        const back = readAll(stream);
        stream.end(payload);
        return back;
      }),
    );
    expect(echoed.map(sha)).toEqual(payloads.map(sha));
    expect(asked).toEqual(payloads.map((_, i) => ({ n: i })));
    // Every stream ended both ways is gone from both ends.
    expect(mux.size).toBe(0);
  });

  it('a reader that stops holds at most a window, stops only its own stream, and gets every byte once it reads', async () => {
    const streams: MuxStream[] = [];
    const { ws } = await pair((stream, request) => {
      if ((request as { echo?: boolean }).echo) stream.pipe(stream);
      else streams.push(stream);
    });
    const mux = new RelayMux(ws);
    const slow = mux.open({ echo: false });
    const payload = randomBytes(8 * MUX_WINDOW);
    let written = false;
    // In pieces of odd sizes: those that wait for credit go out together, in frames cut anywhere.
    for (let at = 0; at < payload.length; at += 8191) {
      const last = at + 8191 >= payload.length;
      slow.write(payload.subarray(at, at + 8191), () => {
        if (last) written = true;
      });
    }
    slow.end();
    await expect.poll(() => streams.length).toBe(1);
    const held = streams[0]!;
    // Nothing reads the far end: it fills to its window and no further, and the write waits.
    await expect.poll(() => held.readableLength).toBe(MUX_WINDOW);
    // Another stream of the same mux is not held up behind it.
    const other = mux.open({ echo: true });
    const back = readAll(other);
    other.end('still moving');
    expect((await back).toString()).toBe('still moving');
    expect(held.readableLength).toBe(MUX_WINDOW);
    expect(written).toBe(false);
    // Once it reads, everything arrives, in order.
    expect(sha(await readAll(held))).toBe(sha(payload));
    expect(written).toBe(true);
  });

  it('a reset carries its reason to the other end, and the socket closing ends every stream', async () => {
    const { ws, far } = await pair((stream) => {
      stream.destroy(new Error('cannot reach echo on port 7000: connection refused'));
    });
    const mux = new RelayMux(ws);
    const refused = mux.open({});
    const [error] = (await once(refused, 'error')) as [Error];
    expect(error.message).toBe('cannot reach echo on port 7000: connection refused');
    expect(mux.size).toBe(0);

    const { ws: ws2, far: far2 } = await pair(() => undefined);
    const mux2 = new RelayMux(ws2);
    const open = [mux2.open({}), mux2.open({})];
    const errors = open.map((s) => once(s, 'error'));
    far2.ws.close(1001, 'the server is stopping');
    for (const [e] of (await Promise.all(errors)) as [Error][]) expect(e.message).toBe('the server is stopping');
    await mux2.closed;
    expect(() => mux2.open({})).toThrow(/closed/);
    expect(far.mux.size).toBe(0);
  });

  it('a peer that sends past its window, or out of protocol, loses its mux; a full mux resets the next stream', async () => {
    const head = (type: number, id: number, payload = Buffer.alloc(0)) => {
      const bytes = Buffer.alloc(5 + payload.length);
      bytes[0] = type;
      bytes.writeUInt32BE(id, 1);
      payload.copy(bytes, 5);
      return bytes;
    };
    const closeCode = (ws: WebSocket) => new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));

    // Past the window: a stream nobody reads, then one frame more than its window.
    {
      const { ws, far } = await pair(() => undefined);
      const closed = closeCode(ws);
      ws.send(head(1, 1, Buffer.from('{}')));
      for (let sent = 0; sent <= MUX_WINDOW; sent += MUX_FRAME) ws.send(head(2, 1, Buffer.alloc(MUX_FRAME)));
      expect(await closed).toBe(4400);
      await far.mux.closed;
    }
    // Out of protocol: text, a short frame, an unknown type, an open that is not JSON, an id taken
    // twice, credit for bytes never sent (which would let this end send without bound).
    const credit = Buffer.alloc(4);
    credit.writeUInt32BE(1);
    for (const frames of [
      [head(1, 1, Buffer.from('{}')), head(3, 1, credit)],
      ['text'],
      [Buffer.from([2, 0])],
      [head(9, 1)],
      [head(1, 1, Buffer.from('{'))],
      [head(1, 1, Buffer.from('{}')), head(1, 1, Buffer.from('{}'))],
    ]) {
      const { ws } = await pair(() => undefined);
      const closed = closeCode(ws);
      for (const bytes of frames) ws.send(bytes);
      expect(await closed).toBe(4400);
    }
    // The opener's end takes no open of its peer's.
    {
      const { ws, far } = await pair(() => undefined);
      const mux = new RelayMux(ws);
      far.ws.send(head(1, 1, Buffer.from('{}')));
      await mux.closed;
      expect(ws.readyState).toBe(ws.CLOSED);
    }
    // Full: the next stream is reset with why, and the mux carries on.
    {
      const { ws } = await pair((stream) => stream.pipe(stream));
      const mux = new RelayMux(ws);
      expect(mux.canOpen).toBe(true);
      const open = Array.from({ length: MUX_STREAMS }, () => mux.open({}));
      // Full: a caller that asks first goes another way (the agent and the server: a relay socket of its own).
      expect(mux.canOpen).toBe(false);
      expect(() => mux.open({})).toThrow(`the relay carries ${MUX_STREAMS} connections at most`);
      const back = readAll(open[0]!);
      open[0]!.end('one');
      expect((await back).toString()).toBe('one');
      open[1]!.destroy();
      expect(mux.canOpen).toBe(true);
      for (const stream of open) stream.destroy();
      mux.close(1000, 'done');
      await mux.closed;
      expect(mux.canOpen).toBe(false);
    }
    {
      // A peer that opens more than the bound gets a reset for each one past it.
      const { ws } = await pair(() => undefined);
      const resets: string[] = [];
      ws.on('message', (data: Buffer) => {
        if (data[0] === 5) resets.push(data.subarray(5).toString());
      });
      for (let id = 1; id <= MUX_STREAMS + 2; id++) ws.send(head(1, id, Buffer.from('{}')));
      await expect.poll(() => resets.length).toBe(2);
      expect(resets[0]).toBe(`the relay carries ${MUX_STREAMS} connections at most`);
      expect(ws.readyState).toBe(ws.OPEN);
    }
  });

  it('joins two streams: half-closes pass through, and one cut short cuts the other with its reason', async () => {
    const { ws } = await pair((stream) => stream.pipe(stream));
    const echo = new RelayMux(ws);
    const { ws: ws2 } = await pair((stream) => {
      // A service that greets, then resets its connection at the first byte it is sent.
      stream.write('hello');
      stream.once('data', () => stream.destroy(new Error('the service reset its connection')));
    });
    const service = new RelayMux(ws2);
    // The echo sends the greeting back to the service, which then resets: the echo's stream is cut with its reason.
    const x = echo.open({});
    const joined = joinStreams(x, service.open({}));
    const [error] = (await once(x, 'error')) as [Error];
    expect(error.message).toBe('the service reset its connection');
    await joined;

    // Clean ends: each side's half-close reaches the other, and nothing is cut.
    const y = echo.open({});
    const { ws: ws3 } = await pair((stream) => stream.end('bye'));
    const z = new RelayMux(ws3).open({});
    await joinStreams(y, z);
    expect(y.errored).toBeNull();
    expect(z.errored).toBeNull();
  });
});
