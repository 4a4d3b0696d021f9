// A stand-in for a node agent on the control channel (/v1/nodes/channel), for tests that need a
// frame to arrive exactly when they say: what it sends and, in order, what it is answered.
import { once } from 'node:events';
import WebSocket from 'ws';

export async function nodeChannel(url: string, secret: string) {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/v1/nodes/channel`, { headers: { authorization: `Bearer ${secret}` } });
  const inbox: Record<string, unknown>[] = [];
  const waiters: (() => void)[] = [];
  ws.on('message', (data) => {
    inbox.push(JSON.parse(data.toString()));
    for (const wake of waiters.splice(0)) wake();
  });
  await once(ws, 'open');
  return {
    ws,
    /** Sends a frame: a string as it is (to send what is not JSON), anything else as JSON. */
    send: (frame: unknown) => ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame)),
    /** The next frame the server sent. */
    next: async () => {
      while (inbox.length === 0) await new Promise<void>((resolve) => waiters.push(resolve));
      return inbox.shift()!;
    },
  };
}
