// What one request (or WebSocket session) is known by while it runs: its id, route template and
// caller. The edges note what they learn (the REST table its route, authentication its actor);
// the server writes the one log line and the metrics when it ends (src/app/server.ts).
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { WebSocketServer } from 'ws';
import type { Actor } from '../app/context';

export interface RequestInfo {
  id: string;
  /** A bounded label: a route template, `/graphql`, `console`, or `other`. */
  route: string;
  /** Set for upgrades: what the raw socket was answered (101 once it became a WebSocket). */
  status?: number;
  orgId?: string;
  actorKind?: Actor['kind'];
  actorId?: string;
}

const scope = new AsyncLocalStorage<RequestInfo>();
const byRequest = new WeakMap<IncomingMessage, RequestInfo>();
const bySocket = new WeakMap<Duplex, RequestInfo>();

/** A caller's own id is kept only when it could not smuggle anything into a header or a log. */
const WELL_FORMED_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Starts tracking `req`: the caller's well-formed X-Request-Id, otherwise a new one. */
export function beginRequest(req: IncomingMessage, route: string, socket?: Duplex): RequestInfo {
  const given = req.headers['x-request-id'];
  const id = typeof given === 'string' && WELL_FORMED_ID.test(given) ? given : randomUUID();
  const info: RequestInfo = { id, route };
  byRequest.set(req, info);
  if (socket) bySocket.set(socket, info);
  return info;
}

/** Runs `fn` (and everything it awaits) as part of `info`'s request. */
export function withinRequest<T>(info: RequestInfo, fn: () => T): T {
  return scope.run(info, fn);
}

export const currentRequest = (): RequestInfo | undefined => scope.getStore();
export const requestInfoOf = (req: IncomingMessage): RequestInfo | undefined => byRequest.get(req);
export const socketInfoOf = (socket: Duplex): RequestInfo | undefined => bySocket.get(socket);

/** The REST table's route template for the request being answered. */
export function noteRoute(route: string): void {
  const info = scope.getStore();
  if (info) info.route = route;
}

/** Who the request turned out to be (its organization and credential), for its log line. */
export function noteActor(actor: Actor, info: RequestInfo | undefined = scope.getStore()): void {
  if (!info) return;
  info.orgId = actor.orgId;
  info.actorKind = actor.kind;
  info.actorId = actor.personId ?? actor.nodeId ?? actor.sandboxId ?? actor.credentialId;
}

/** Every WebSocket answer (101) carries its request's id, and the session's line shows 101. */
export function tagUpgrades(wss: WebSocketServer): void {
  wss.on('headers', (headers: string[], req: IncomingMessage) => {
    const info = byRequest.get(req);
    if (!info) return;
    info.status = 101;
    headers.push(`X-Request-Id: ${info.id}`);
  });
}

/**
 * Query parameters whose values are credentials or signatures, by a part of their name (any case):
 * `token` (access_token, refresh_token, id_token), `jwt`, `sig` (signature, X-Amz-Signature),
 * `secret`, `key` (api_key, apikey), `pass` (password, passwd, passphrase), `pwd`, `auth`,
 * `credential`, `session`, `assertion` (client_assertion), `bearer`, `ticket`, `code` (OAuth's).
 * A harmless parameter caught by it (`keyword`) is only hidden from the log.
 */
const SECRET_PARAMS = /token|jwt|sig|secret|key|pass|pwd|auth|credential|session|assertion|bearer|ticket|code/i;
/** Path segments that are credentials: a signed link's token. */
const SECRET_PATHS: [RegExp, string][] = [[/^\/v1\/links\/[^/]+/, '/v1/links/[redacted]']];

/** The request's path and query as a log line may show them: credentials and signatures redacted, length bounded. */
export function loggedPath(url: string): string {
  const at = url.indexOf('?');
  let path = at < 0 ? url : url.slice(0, at);
  for (const [pattern, replacement] of SECRET_PATHS) path = path.replace(pattern, replacement);
  path = path.slice(0, 512);
  if (at < 0) return path;
  const query = url
    .slice(at + 1)
    .split('&')
    .slice(0, 50)
    .map((pair) => {
      const eq = pair.indexOf('=');
      const key = eq < 0 ? pair : pair.slice(0, eq);
      let name = key;
      try {
        name = decodeURIComponent(key);
      } catch {
        // a malformed key is tested as sent
      }
      return eq >= 0 && SECRET_PARAMS.test(name) ? `${key}=[redacted]` : pair;
    })
    .join('&');
  return `${path}?${query.slice(0, 512)}`;
}

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** A bounded method label: Node's parser accepts dozens of methods Berth has no use for. */
export const methodLabel = (method: string | undefined): string => (method && METHODS.has(method) ? method : 'other');
