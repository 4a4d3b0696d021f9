// The node agent's part of the byte relay (docs/agents.md, "The relay"): on a `relay` message it
// dials back to the instance holding the sandbox's socket, with its node credential, and serves
// the socket like the built-in hot pool does (relay-node.ts), on an environment it holds.
import WebSocket from 'ws';
import { type RelayJob, serveRelay } from '../dataplane/relay-node';
import type { NodeAgent } from './node-agent';

export function installRelay(agent: NodeAgent, token: string, log: (line: string) => void = (l) => console.log(`berth node: ${l}`)): void {
  agent.handlers.set('relay', async (_agent, message) => {
    const job = message.job as RelayJob;
    const url = String(message.url);
    if (!job || typeof job.environment !== 'string' || !agent.held.has(job.environment)) {
      log(`refused a relay for ${String(job?.environment)}: not an environment of this node`);
      return undefined;
    }
    const ws = new WebSocket(url, {
      headers: { authorization: `Bearer ${token}` },
      perMessageDeflate: false,
      // A zero mask: see openRelay in sandbox-agent.ts.
      generateMask: (mask) => void mask.fill(0),
    });
    ws.once('unexpected-response', (_req, res) => {
      log(`relay ${String(message.relay)}: the server answered ${res.statusCode}`);
      ws.terminate();
    });
    ws.once('error', (error) => log(`relay ${String(message.relay)}: ${error.message}`));
    ws.once('open', () => {
      void serveRelay(ws, job, agent.root(job.environment)).catch((error: Error) =>
        log(`relay ${String(message.relay)}: ${error.message}`),
      );
    });
    return undefined;
  });
}
