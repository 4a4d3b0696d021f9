// The node side of the byte relay (docs/agents.md, "The relay"): what a node does with one relay
// socket: the one it dials back to the server, which joins it to the sandbox's. The socket carries a byte
// stream (ws-bridge.ts): for an import, the bytes of one TCP connection to a port of the
// environment, dialled inside its container (src/node/runtime.ts), and so for a preview URL's
// connection (any port of the environment, never an address off it); for a share, the folder sync of
// folder-sync.ts (in: the node receives; out: the node sends).
import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import type { DialJob, RelayJob } from '../protocol/relay';
import { duplexPair, receiveFolder, sendFolder } from './folder-sync';
import { shareDir } from './layout';
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
      socket = await dial(job);
    } catch (error) {
      const what = job.kind === 'import' ? `${job.service} on port ${job.port}` : `port ${job.port}`;
      const reason = `cannot reach ${what}: ${(error as Error).message}`;
      ws.close(CLOSE.nodeFailed, closeReason(reason));
      return { code: CLOSE.nodeFailed, reason };
    }
    const ended = bridge(ws, socket, onTraffic);
    ws.resume();
    return ended;
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
