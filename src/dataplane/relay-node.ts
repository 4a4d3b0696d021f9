// The node side of the byte relay (docs/agents.md, "The relay"): what a node does with one relay
// socket: the one it dials back to the server, which joins it to the sandbox's. The socket carries a byte
// stream (ws-bridge.ts): for an import, the bytes of one TCP connection to a port of the
// environment, dialled inside its container (src/node/runtime.ts), and so for a preview URL's
// connection (any port of the environment, never an address off it); for a share, the folder sync of
// folder-sync.ts (in: the node receives; out: the node sends). A connection can also come as a
// stream of the node's standing mux (serveMuxStream), which costs no socket of its own.
import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import { type DialJob, RelayJob } from '../protocol/relay';
import { duplexPair, receiveFolder, sendFolder } from './folder-sync';
import { shareDir } from './layout';
import { joinStreams, type MuxStream } from './relay-mux';
import { type BridgeEnd, bridge, CLOSE, closeReason } from './ws-bridge';

/**
 * Serves one relay socket for an environment whose root on this node is `envRoot`; `dial` opens an
 * import's or a preview's connection inside the environment. Resolves when the socket closed, with how it closed. `onTraffic` is called for every chunk carried either way.
 */
export async function serveRelay(
  ws: WebSocket,
  job: RelayJob,
  envRoot: string,
  dial: (job: DialJob) => Promise<Duplex>,
  onTraffic?: () => void,
): Promise<BridgeEnd> {
  if (job.kind === 'import' || job.kind === 'preview') {
    // Messages that arrive while we connect wait in the socket, not in memory.
    ws.pause();
    let socket: Duplex;
    try {
      socket = await dialed(job, dial);
    } catch (error) {
      const reason = (error as Error).message;
      ws.close(CLOSE.nodeFailed, closeReason(reason));
      return { code: CLOSE.nodeFailed, reason };
    }
    return bridge(ws, socket, onTraffic);
  }
  const [near, far] = duplexPair();
  const ended = bridge(ws, near, onTraffic);
  const root = shareDir(envRoot, job.envPath);
  const work =
    job.direction === 'in'
      ? receiveFolder(far, { root })
      : sendFolder(far, { root, rules: { include: job.sync.include, noIgnore: job.sync.noIgnore }, watch: !job.final, final: job.final });
  work.catch((error: Error) => {
    if (ws.readyState === ws.OPEN) ws.close(CLOSE.nodeFailed, closeReason(`share ${job.share}: ${error.message}`));
    far.destroy();
  });
  return ended;
}

/** The job's connection, or an error that says which port could not be reached. */
async function dialed(job: DialJob, dial: (job: DialJob) => Promise<Duplex>): Promise<Duplex> {
  try {
    return await dial(job);
  } catch (error) {
    const what = job.kind === 'import' ? `${job.service} on port ${job.port}` : `port ${job.port}`;
    throw new Error(`cannot reach ${what}: ${(error as Error).message}`);
  }
}

/**
 * Serves one stream of the node's mux (src/dataplane/relay-mux.ts): the connection it asks for is
 * dialled and joined to it; what came before the dial waits in the stream, within its window.
 */
export async function serveMuxStream(stream: MuxStream, request: unknown, dial: (job: DialJob) => Promise<Duplex>): Promise<void> {
  const job = RelayJob.safeParse(request);
  if (!job.success || job.data.kind === 'share') return void stream.destroy(new Error('a mux stream carries one connection to a port'));
  let socket: Duplex;
  try {
    socket = await dialed(job.data, dial);
  } catch (error) {
    return void stream.destroy(error as Error);
  }
  if (stream.destroyed) return void socket.destroy();
  await joinStreams(stream, socket);
}
