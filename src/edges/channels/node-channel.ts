// The node control channel (docs/agents.md): a WebSocket at /v1/nodes/channel that a node agent
// opens with its node credential (`Authorization: Bearer bnd_…` on the upgrade). Frames are JSON
// text, one message each, dispatched by `type`; the messages of both directions are
// src/protocol/node-channel.ts. Every frame a node sends is parsed there first: one that is not a
// message of the protocol is answered `{type: 'error', error, code}` and changes nothing. Besides
// its own answers (`welcome`, `hello-again`, `drained`, `error`) this end forwards whatever
// sendToNode() publishes on `node:<id>` (prepare, release, discard, …).
//
// This instance forwards what any instance publishes for the node while the socket is open; the
// node's liveness is its `lastSeen` in the database, not this socket.
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer } from 'ws';
import type { Actor, Deps, Log } from '../../app/context';
import { closeCodeOf } from '../../kernel/error-codes';
import { DomainError, ForbiddenError, ValidationError } from '../../kernel/errors';
import { authenticate } from '../../modules/credentials';
import {
  appendEnvironmentLog,
  endSessionsNotRunning,
  recordSessionAttached,
  recordSessionEnd,
  recordUsage,
} from '../../modules/environments';
import {
  actsForEveryOrg,
  nodeEngine,
  nodeEnvironmentEnded,
  nodeHeartbeat,
  nodeHello,
  nodeImagesHeld,
  nodeLeaving,
  nodeWarmFailed,
  nodeWarmHeld,
  nodeWarmReady,
  type WarmFailure,
} from '../../modules/nodes';
import { resumeNodeBuilds } from '../../modules/templates';
import { tagUpgrades } from '../../observability/requests';
import { topics } from '../../platform/events';
import { nodeTopics } from '../../protocol/node-bus';
import { type NodeToServer, parseNodeToServer, type ServerToNode } from '../../protocol/node-channel';
import { clientAddress } from '../http/client-address';
import { endWithError } from '../http/protocol-errors';
import { findTextIssue } from '../http/text';
import { clientCodeOf, toClientError } from '../schema/errors';

export { NODE_CHANNEL_PATH } from '../../protocol/dataplane';

export interface NodeChannel {
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  close(): Promise<void>;
}

const MAX_FRAME = 1024 * 1024;

export function serveNodeChannel(deps: Deps, log: Log): NodeChannel {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME });
  tagUpgrades(wss);

  function serve(ws: WebSocket, actor: Actor): void {
    const nodeId = actor.nodeId!;
    const send = (message: ServerToNode) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
    };
    const fail = (error: unknown) => {
      const err = toClientError(error, log);
      send({ type: 'error', error: err.message, code: String(err.extensions.code ?? 'internal') });
    };
    // Messages for this node from any instance.
    const inbox = deps.events.subscribe(nodeTopics.node(nodeId))[Symbol.asyncIterator]();
    void (async () => {
      for (let next = await inbox.next(); !next.done; next = await inbox.next()) {
        if (next.value.type === 'revoked') {
          ws.close(closeCodeOf('unauthorized'), 'this node was removed');
          break;
        }
        send(next.value);
      }
    })().catch((err) => log('node channel forwarding failed', err));
    // Revoking the node's credential (its removal) closes the channel at once, on every instance.
    const release = deps.credentials.hold(actor, () => ws.close(closeCodeOf('unauthorized'), 'this node was removed'));
    ws.on('close', () => {
      release();
      void inbox.return?.();
    });
    let queue = Promise.resolve();
    ws.on('message', (data, isBinary) => {
      // One message at a time, in order.
      queue = queue.then(async () => {
        let frame: object;
        try {
          const parsed: unknown = isBinary ? undefined : JSON.parse(data.toString());
          if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not a JSON object');
          frame = parsed;
        } catch {
          return fail(new DomainError('every frame must be one JSON object with a type', 'bad_request'));
        }
        // As at every edge (src/edges/http/text.ts): a string PostgreSQL cannot store is refused here,
        // before a query fails on it (a NUL in a hello's environments was an internal error).
        const issue = findTextIssue(frame, '');
        if (issue) return fail(new ValidationError(`${issue.field || 'frame'}: ${issue.problem}`, issue.field));
        try {
          await dispatch(parseNodeToServer(frame));
        } catch (error) {
          fail(error);
        }
      });
    });

    /** The log says each warm container that failed, naming the node, and when it is made again. */
    function said(failures: WarmFailure[]): void {
      const who = actsForEveryOrg(actor) ? 'built-in node' : `node ${actor.name}`;
      for (const f of failures) {
        log(
          `${who}: the warm container of ${f.template} on slot ${f.slot} failed (tried again in ${Math.round(f.retryMs / 1000)} s): ${f.error}`,
        );
      }
    }

    async function dispatch(message: NodeToServer): Promise<void> {
      switch (message.type) {
        case 'hello':
          send({ type: 'welcome', ...(await nodeHello(deps, actor, message)) });
          await endSessionsNotRunning(deps, nodeId, message.sessions ?? []);
          await resumeNodeBuilds(deps, actor);
          return;
        case 'heartbeat': {
          const state = await nodeHeartbeat(deps, nodeId);
          if (state === 'revoked') ws.close(closeCodeOf('unauthorized'), 'this node was removed');
          else if (state === 'lost') send({ type: 'hello-again' });
          else if (state === 'offline') send({ type: 'drained' });
          return;
        }
        case 'reply':
          // The schema holds it to a reply topic's shape.
          await deps.events.send(nodeTopics.nodeReply(message.reply)!, message);
          return;
        case 'ended':
          await nodeEnvironmentEnded(deps, actor, message.environment, message.reason);
          return;
        case 'leaving':
          await nodeLeaving(deps, actor);
          return;
        case 'images-held':
          await nodeImagesHeld(deps, actor, message.images);
          return;
        case 'engine':
          await nodeEngine(deps, actor, message.error);
          return;
        case 'usage':
          await recordUsage(deps, nodeId, message.environment, message.sample);
          return;
        case 'env-log':
          await appendEnvironmentLog(deps, nodeId, message);
          return;
        case 'exec-exit':
          // A session's end is recorded here, once, whoever is attached (or no one).
          if (message.session) {
            const recorded = await recordSessionEnd(deps, nodeId, message.exec, message.exitCode);
            await deps.events.send(nodeTopics.exec(nodeId, message.exec), { ...message, ...(recorded ? { recorded } : {}) });
            return;
          }
          await deps.events.send(nodeTopics.exec(nodeId, message.exec), message);
          return;
        case 'exec-output':
        case 'exec-input-credit':
        case 'exec-replay':
          // A node speaks only for the commands it was sent: the topic carries its own id. Straight
          // to the caller when its request is served here, else through the database.
          await deps.events.send(nodeTopics.exec(nodeId, message.exec), message);
          return;
        case 'exec-attached':
          await recordSessionAttached(deps, nodeId, message.exec, message.attached);
          return;
        case 'warm-ready':
          await nodeWarmReady(deps, actor, message);
          return;
        case 'warm-failed':
          return said(await nodeWarmFailed(deps, actor, message));
        case 'warm-held':
          said(await nodeWarmHeld(deps, actor, message));
          // The last word of a node taking up its welcome (src/agent/node-agent.ts): the built-in
          // node's supervisor waits for it; no one waits for another node's.
          if (actsForEveryOrg(actor)) await deps.events.send(topics.nodeSettled(nodeId), {});
          return;
      }
    }
  }

  return {
    handleUpgrade(req, socket, head) {
      const address = clientAddress(req, deps.config.trustProxy);
      authenticate(deps, req.headers.authorization, address)
        .then((actor) => {
          if (actor.kind !== 'node' || !actor.nodeId) throw new ForbiddenError('the node channel takes a node credential (bnd_…)');
          wss.handleUpgrade(req, socket, head, (ws) => serve(ws, actor));
        })
        .catch((error) => {
          const err = toClientError(error, log);
          endWithError(socket, clientCodeOf(err), err.message);
        });
    },
    async close() {
      for (const client of wss.clients) client.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
