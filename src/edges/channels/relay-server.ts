// The server's end of the byte relay: the WebSocket endpoint /v1/relay the sandbox agent opens for
// one import connection or one share sync (docs/agents.md, "The relay").
//
//   GET /v1/relay?environment=<id>&kind=import&service=<name>          (Upgrade: websocket)
//   GET /v1/relay?environment=<id>&kind=share&share=<name>[&final=1]
//   Authorization: Bearer bsc_…
//
//   GET /v1/relay/node?relay=<id>     the node agent dialling back (Authorization: Bearer bnd_…)
//
// Everything is checked before the upgrade (a refusal is an HTTP answer `{error, code}`). Then
// the environment's node joins: it is asked on its control channel (`{type: 'relay', relay, url,
// job}` through sendToNode, from whichever instance holds that channel) to dial back to `url` —
// this instance's PUBLIC_URL, or for the built-in node this instance's own address — and the two
// sockets are joined here, message by message (the node serves its end: src/dataplane/relay-node.ts).
// The sandbox's upgrade is answered only once the node joined (or 503 when it did not within
// NODE_JOIN_MS). Pending rendezvous live in memory: they belong to the sockets of this instance.
// Bytes pass through memory only, never to disk or the database.
//
//   GET /v1/relay/mux        a sandbox agent's standing mux (src/dataplane/relay-mux.ts): each
//                            stream one import connection, `{environment, service}`, checked as above
//   GET /v1/relay/node/mux   a node's standing mux: each stream one connection into one of its
//                            environments (an import's or a preview's), opened here
//
// A connection on a mux costs no upgrade: its stream is checked, then joined to a stream this
// instance opens on the node's mux, or, when the node holds none here, to a socket the node dials
// back as above.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import type { Actor, Deps, Log } from '../../app/context';
import { joinStreams, MUX_MAX_PAYLOAD, type MuxStream, NODE_MUX_STREAMS, RelayMux } from '../../dataplane/relay-mux';
import { CLOSE, heartbeat, joinSockets, RELAY_SOCKET_OPTIONS, socketStream } from '../../dataplane/ws-bridge';
import type { Environment } from '../../generated/prisma/client';
import { requireNodeAgent } from '../../kernel/access';
import { BadRequestError, DomainError, ForbiddenError, NotFoundError, UnavailableError } from '../../kernel/errors';
import { authenticate } from '../../modules/credentials';
import { activityRecorder, authorizeRelay, recordOutSynced, recordRelayed } from '../../modules/environments';
import { tagUpgrades } from '../../observability/requests';
import { sendToNode } from '../../protocol/node-bus';
import { type DialJob, MuxImport, type PreviewJob, RELAY_NODE_PATH, type RelayJob } from '../../protocol/relay';
import { clientAddress } from '../http/client-address';
import { endWithError } from '../http/protocol-errors';
import { queryEncodingProblem } from '../http/text';

/** How long a remote node has to dial back. */
export const NODE_JOIN_MS = 15_000;

interface Pending {
  nodeId: string;
  join(node: WebSocket): void;
}

export interface RelayServer {
  /** Handles an upgrade on RELAY_PATH (the sandbox's end). */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** Handles an upgrade on RELAY_NODE_PATH (a remote node's end). */
  handleNodeUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** Handles an upgrade on RELAY_MUX_PATH (a sandbox agent's mux). */
  handleMuxUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** Handles an upgrade on RELAY_NODE_MUX_PATH (a node's mux). */
  handleNodeMuxUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /**
   * A byte stream to the job's port inside its environment, served by the environment's node like
   * an import's (a preview's connection, src/edges/channels/preview-proxy.ts; the caller checked the job).
   */
  openStream(nodeId: string, job: PreviewJob): Promise<Duplex>;
  close(): Promise<void>;
}

export function createRelayServer(deps: Deps, log: Log): RelayServer {
  const wss = new WebSocketServer({ noServer: true, ...RELAY_SOCKET_OPTIONS, maxPayload: 16 * 1024 * 1024 });
  const muxes = new WebSocketServer({ noServer: true, ...RELAY_SOCKET_OPTIONS, maxPayload: MUX_MAX_PAYLOAD });
  tagUpgrades(wss);
  tagUpgrades(muxes);
  const live = new Set<WebSocket>();
  const pending = new Map<string, Pending>();
  /** Each node's mux to this instance, the newest when it opened more than one. */
  const nodeMuxes = new Map<string, RelayMux>();

  /** The request's URL; a query that is not well-formed UTF-8 is refused, as on every route. */
  const urlOf = (req: IncomingMessage) => {
    const url = new URL(req.url ?? '/', 'http://relay');
    const problem = queryEncodingProblem(url.search);
    if (problem) throw new BadRequestError(problem);
    return url;
  };

  /** The node of a checked relay's environment (503 without one), the environment marked as relayed to. */
  const relayedNode = async (env: Environment): Promise<string> => {
    if (!env.relayed) await recordRelayed(deps, env.id);
    if (!env.nodeId) throw new UnavailableError(`environment ${env.name} is on no node`);
    return env.nodeId;
  };

  /** Traffic on a relay of `env`, as read by its check, counted as its activity. */
  const trafficOf = (env: Environment) => activityRecorder(deps, env, (error) => log('relay activity not recorded', error));

  const accept = async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = urlOf(req);
    const q = (name: string) => url.searchParams.get(name);
    const actor = await authenticate(deps, req.headers.authorization, clientAddress(req, deps.config.trustProxy));
    const { env, job } = await authorizeRelay(deps, actor, {
      environment: q('environment'),
      kind: q('kind'),
      service: q('service'),
      share: q('share'),
      final: q('final'),
    });
    const nodeId = await relayedNode(env);
    const finished = async (code: number) => {
      if (job.kind === 'share' && job.final && code === CLOSE.normal) await recordOutSynced(deps, env.id, job.share);
    };
    const traffic = trafficOf(env);
    // The environment's node dials back here, then the two sockets are joined.
    const node = await nodeJoins(nodeId, job);
    if (socket.destroyed) return void node.terminate(); // the sandbox gave up while the node dialled
    wss.handleUpgrade(req, socket, head, (ws) => {
      track(ws, actor);
      let code = 0;
      ws.once('close', (c) => {
        code = c;
      });
      void joinSockets(ws, node, traffic)
        .then(() => finished(code))
        .catch((error) => log('relay failed', error));
    });
  };

  /** A relay socket lives as long as the credential that opened it (and the server), and its peer (heartbeat). */
  const track = (ws: WebSocket, actor: Actor) => {
    live.add(ws);
    heartbeat(ws);
    const release = deps.credentials.hold(actor, (reason) => ws.close(CLOSE.revoked, reason));
    ws.once('close', () => {
      live.delete(ws);
      release();
    });
  };

  /** Asks the node to dial back and waits for its socket (UnavailableError after NODE_JOIN_MS). */
  const nodeJoins = async (nodeId: string, job: RelayJob): Promise<WebSocket> => {
    const relay = randomUUID();
    const joined = new Promise<WebSocket>((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(relay);
        reject(new UnavailableError(`the environment's node did not join the relay within ${NODE_JOIN_MS / 1000}s`));
      }, NODE_JOIN_MS);
      pending.set(relay, {
        nodeId,
        join(node) {
          clearTimeout(timer);
          pending.delete(relay);
          resolve(node);
        },
      });
    });
    // The built-in node runs beside this instance: it dials this instance's own address.
    const reach = nodeId === deps.builtin.id ? (deps.config.localUrl ?? deps.config.publicUrl) : deps.config.publicUrl;
    const base = (reach ?? '').replace(/^http/, 'ws').replace(/\/+$/, '');
    await sendToNode(deps, nodeId, { type: 'relay', relay, url: `${base}${RELAY_NODE_PATH}?relay=${relay}`, job: { ...job } });
    return joined;
  };

  const acceptNode = async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = urlOf(req);
    const actor = await authenticate(deps, req.headers.authorization, clientAddress(req, deps.config.trustProxy));
    const nodeId = requireNodeAgent(actor);
    const waiting = pending.get(url.searchParams.get('relay') ?? '');
    // Another node's relay answers like an unknown one.
    if (!waiting || waiting.nodeId !== nodeId) throw new NotFoundError(`relay ${url.searchParams.get('relay') ?? ''}`);
    wss.handleUpgrade(req, socket, head, (ws) => {
      track(ws, actor);
      waiting.join(ws);
    });
  };

  /**
   * A byte stream to the job's port inside its environment: on the node's mux where this instance
   * holds one that has room, else dialled back (a full mux costs speed, never a connection).
   */
  const nodeStream = async (nodeId: string, job: DialJob): Promise<Duplex> => {
    const mux = nodeMuxes.get(nodeId);
    return mux?.canOpen ? mux.open({ ...job }) : socketStream(await nodeJoins(nodeId, job));
  };

  const acceptMux = async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    urlOf(req);
    const actor = await authenticate(deps, req.headers.authorization, clientAddress(req, deps.config.trustProxy));
    // authorizeRelay checks each stream; a credential that could open none is refused here already.
    if (actor.kind !== 'sandbox') throw new ForbiddenError("only a sandbox's own credential opens relay sockets (berth agent does)");
    muxes.handleUpgrade(req, socket, head, (ws) => {
      track(ws, actor);
      new RelayMux(ws, { accept: (stream, request) => void serveImport(actor, stream, request) });
    });
  };

  /** One import connection on a sandbox's mux: checked as a relay socket is, then joined to the environment's node. */
  const serveImport = async (actor: Actor, stream: MuxStream, request: unknown) => {
    try {
      const asked = MuxImport.safeParse(request);
      if (!asked.success) throw new BadRequestError('a relay stream names an environment and a service');
      const { env, job } = await authorizeRelay(deps, actor, { ...asked.data, kind: 'import' });
      if (job.kind !== 'import') throw new BadRequestError('a relay stream carries an import connection');
      const far = await nodeStream(await relayedNode(env), job);
      // The sandbox's connection ended while the node was asked.
      if (stream.destroyed) return void far.destroy();
      await joinStreams(stream, far, trafficOf(env));
    } catch (error) {
      if (!(error instanceof DomainError)) log('relay failed', error);
      stream.destroy(error instanceof DomainError ? error : new Error('internal error'));
    }
  };

  const acceptNodeMux = async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    urlOf(req);
    const actor = await authenticate(deps, req.headers.authorization, clientAddress(req, deps.config.trustProxy));
    const nodeId = requireNodeAgent(actor);
    muxes.handleUpgrade(req, socket, head, (ws) => {
      track(ws, actor);
      const mux = new RelayMux(ws, { maxStreams: NODE_MUX_STREAMS });
      nodeMuxes.set(nodeId, mux);
      ws.once('close', () => {
        if (nodeMuxes.get(nodeId) === mux) nodeMuxes.delete(nodeId);
      });
    });
  };

  const refuse = (socket: Duplex) => (error: unknown) => {
    if (error instanceof DomainError) return endWithError(socket, error.code, error.message);
    log('relay upgrade failed', error);
    endWithError(socket, 'internal', 'internal error');
  };

  return {
    handleUpgrade(req, socket, head) {
      accept(req, socket, head).catch(refuse(socket));
    },
    handleNodeUpgrade(req, socket, head) {
      acceptNode(req, socket, head).catch(refuse(socket));
    },
    handleMuxUpgrade(req, socket, head) {
      acceptMux(req, socket, head).catch(refuse(socket));
    },
    handleNodeMuxUpgrade(req, socket, head) {
      acceptNodeMux(req, socket, head).catch(refuse(socket));
    },
    openStream: nodeStream,
    async close() {
      for (const ws of live) ws.close(CLOSE.goingAway, 'the server is stopping');
      for (const ws of live) ws.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      await new Promise<void>((resolve) => muxes.close(() => resolve()));
    },
  };
}
