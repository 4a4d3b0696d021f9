// The server's end of the byte relay: the WebSocket endpoint /v1/relay the sandbox agent opens for
// one import connection or one share sync (docs/agents.md, "The relay").
//
//   GET /v1/relay?environment=<id>&kind=import&service=<name>          (Upgrade: websocket)
//   GET /v1/relay?environment=<id>&kind=share&share=<name>[&final=1]
//   Authorization: Bearer bsc_…
//
// Everything is checked before the upgrade (a refusal is an HTTP answer `{error, code}`). Then
// the environment's node joins: a built-in hot node is this process, which serves the socket
// itself (relay-node.ts). Bytes pass through memory only, never to disk or the database.
import type { IncomingMessage } from 'node:http';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import type { Deps } from '../context';
import type { Log } from '../deps';
import { clientAddress } from '../http/client-address';
import { endWithError } from '../http/protocol-errors';
import { statusOf } from '../rest/status';
import { authenticate } from '../services/auth';
import { DomainError } from '../services/errors';
import { authorizeRelay, recordOutSynced } from '../services/relay';
import { environmentRoot } from './layout';
import { serveRelay } from './relay-node';
import { CLOSE } from './ws-bridge';

export const RELAY_PATH = '/v1/relay';

/** Where the built-in hot pool keeps environment roots. */
export function hotPoolDir(deps: Deps): string {
  return path.join(deps.config.dataDir, 'workspaces');
}

export interface RelayServer {
  /** Handles an upgrade on RELAY_PATH. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  close(): Promise<void>;
}

export function createRelayServer(deps: Deps, log: Log): RelayServer {
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 16 * 1024 * 1024 });
  const live = new Set<WebSocket>();

  const accept = async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://relay');
    const q = (name: string) => url.searchParams.get(name);
    const actor = await authenticate(deps, req.headers.authorization, clientAddress(req, deps.config.trustProxy));
    const { env, job } = await authorizeRelay(deps, actor, {
      environment: q('environment'),
      kind: q('kind'),
      service: q('service'),
      share: q('share'),
      final: q('final'),
    });
    wss.handleUpgrade(req, socket, head, (ws) => {
      live.add(ws);
      ws.once('close', () => live.delete(ws));
      // The built-in hot pool: this process is the node side.
      void serveRelay(ws, job, environmentRoot(hotPoolDir(deps), env.id))
        .then(async (end) => {
          if (job.kind === 'share' && job.final && end.code === CLOSE.normal) await recordOutSynced(deps, env.id, job.share);
        })
        .catch((error) => log('relay failed', error));
    });
  };

  return {
    handleUpgrade(req, socket, head) {
      accept(req, socket, head).catch((error) => {
        if (error instanceof DomainError) return endWithError(socket, statusOf(error.code), error.code, error.message);
        log('relay upgrade failed', error);
        endWithError(socket, 500, 'internal', 'internal error');
      });
    },
    async close() {
      for (const ws of live) ws.close(CLOSE.goingAway, 'the server is stopping');
      for (const ws of live) ws.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
