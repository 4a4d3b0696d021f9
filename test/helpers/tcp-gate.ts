import type { AddressInfo } from 'node:net';
import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of a server that can hold what clients send, or drop every connection: after `holdAfter(n)`, once n
 * more bytes went upstream, it stops reading from clients until `release()`. Socket buffers fill
 * and the sender stalls mid-request, as on a slow link, without any timer.
 */
export interface TcpGate {
  url: string;
  holdAfter(bytes: number): void;
  release(): void;
  /** Cuts every connection through it at once, as a network that went away (new ones still pass). */
  drop(): void;
  close(): Promise<void>;
}

export async function startTcpGate(target: string): Promise<TcpGate> {
  const { hostname, port } = new URL(target);
  let budget = Number.POSITIVE_INFINITY;
  const held: { client: Socket; upstream: Socket; rest: Buffer }[] = [];
  const sockets = new Set<Socket>();

  const server: Server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    sockets.add(client).add(upstream);
    client.on('data', (chunk: Buffer) => {
      if (chunk.length <= budget) {
        budget -= chunk.length;
        upstream.write(chunk);
        return;
      }
      const allowed = Math.max(0, budget);
      if (allowed > 0) upstream.write(chunk.subarray(0, allowed));
      budget = 0;
      client.pause();
      held.push({ client, upstream, rest: chunk.subarray(allowed) });
    });
    upstream.pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${address.port}`,
    holdAfter(bytes) {
      budget = bytes;
    },
    release() {
      budget = Number.POSITIVE_INFINITY;
      for (const { client, upstream, rest } of held.splice(0)) {
        upstream.write(rest);
        client.resume();
      }
    },
    drop() {
      for (const socket of sockets) socket.destroy();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
