// What a relay socket's far end sends right behind the answer to the upgrade (a service that
// speaks first, an out share's first batch) reaches the agent's side: openRelay holds it in the
// socket until bridge listens. A WebSocket server on loopback plays the server, sending its first
// message in the same write as the upgrade's answer, so the agent reads both in one chunk.
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { openRelay, openRelayMux } from '../src/agent/sandbox-agent';
import { duplexPair } from '../src/dataplane/folder-sync';
import { bridge, CLOSE } from '../src/dataplane/ws-bridge';

const FIRST = 'SSH-2.0-the service speaks first\r\n';
let server: http.Server;
let url: string;

beforeAll(async () => {
  server = http.createServer();
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    // Corked: the 101 and the first message leave in one write.
    socket.cork();
    wss.handleUpgrade(req, socket, head, (ws) => {
      // To a mux: an open of a stream, which only the agent's end may open.
      if (req.url?.startsWith('/v1/relay/mux')) ws.send(Buffer.from([1, 0, 0, 0, 1, ...Buffer.from('{}')]), { binary: true });
      else ws.send(Buffer.from(FIRST), { binary: true });
      process.nextTick(() => socket.uncork());
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => {
  server.closeAllConnections();
  server.close();
});

it('the first bytes behind the upgrade reach the connection bridged to the relay socket', async () => {
  for (let i = 0; i < 10; i++) {
    const ws = await openRelay(url, 'bsc_test', { environment: 'env_1', kind: 'import', service: 'ssh' });
    const [near, far] = duplexPair();
    void bridge(ws, near);
    const [chunk] = (await once(far, 'data')) as [Buffer];
    expect(chunk.toString()).toBe(FIRST);
    ws.terminate();
  }
});

it('a mux whose first frame came with the upgrade reads that frame', async () => {
  // The frame is out of protocol (the server's end opens no streams): read, it loses the mux (4400).
  const mux = await openRelayMux(url, 'bsc_test');
  const [code] = (await once(mux.ws, 'close')) as [number];
  expect(code).toBe(CLOSE.invalid);
});
