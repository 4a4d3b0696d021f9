// The preview proxy (docs/environments.md, "Preview URLs"): requests whose Host is under
// PREVIEW_DOMAIN never reach the API. `<port>-<environment name>.<PREVIEW_DOMAIN>` is routed to
// that port inside the environment: each upstream connection is one byte stream the environment's
// node dials inside its network namespace and serves over the relay (relay-server.ts openStream,
// src/dataplane/relay-node.ts), so the proxy reaches nothing but that environment's own ports.
//
//   GET /__berth/preview?token=…   the signed link: sets the host-only HttpOnly cookie, 303 to /
//   anything else                  with that cookie, or `Authorization: Bearer` (a preview token,
//                                  or a Berth credential of the environment's owner, an admin or
//                                  an API key): proxied, HTTP and WebSocket upgrades alike
//
// Bodies stream both ways with backpressure (pipe); headers are bounded by Node's parser. What
// Berth used to authorize (its cookie, a bearer it took) is not passed on to the environment, and
// answers carry none of Berth's CORS headers: a preview's pages are another origin than Berth's.
import { type ClientRequest, type IncomingMessage, request, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Actor, Deps, Log } from '../../app/context';
import { DomainError, UnauthorizedError } from '../../kernel/errors';
import { authenticate } from '../../modules/credentials';
import {
  activityRecorder,
  authorizePreview,
  PREVIEW_COOKIE,
  PREVIEW_LINK_PATH,
  type PreviewHost,
  type PreviewTarget,
  parsePreviewHost,
} from '../../modules/environments';
import { clientAddress } from '../http/client-address';
import { endWithError } from '../http/protocol-errors';
import { sendError } from '../http/respond';
import type { RelayServer } from './relay-server';

/** Headers of one hop only (RFC 9110 7.6.1), never passed on; `connection` names more. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
]);
/** What a client says about the path before Berth: replaced by what Berth saw. */
const FORWARDING = new Set(['forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto']);
/** Environments whose activity recorder is kept; past it the map starts again (each checks the database at most once a minute). */
const MAX_RECORDERS = 1000;

export interface PreviewProxy {
  /** The preview a request's Host names: undefined when it is not a preview host (the API's own). */
  route(req: IncomingMessage): PreviewHost | null | undefined;
  handle(req: IncomingMessage, res: ServerResponse, host: PreviewHost | null): Promise<void>;
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, host: PreviewHost | null): void;
}

const JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/** The value of the preview cookie, and the Cookie header without it. */
function splitCookies(header: string | undefined): { token?: string; rest: string } {
  let token: string | undefined;
  const rest: string[] = [];
  for (const part of (header ?? '').split(';')) {
    const trimmed = part.trim();
    if (!trimmed) continue;
    const eq = trimmed.indexOf('=');
    if (eq > 0 && trimmed.slice(0, eq) === PREVIEW_COOKIE) token ??= trimmed.slice(eq + 1);
    else rest.push(trimmed);
  }
  return { token, rest: rest.join('; ') };
}

export function createPreviewProxy(deps: Deps, relay: RelayServer, log: Log): PreviewProxy {
  const recorders = new Map<string, () => void>();
  const traffic = (target: PreviewTarget) => {
    let record = recorders.get(target.env.id);
    if (!record) {
      if (recorders.size >= MAX_RECORDERS) recorders.clear();
      record = activityRecorder(deps, target.env, (error) => log('preview activity not recorded', error));
      recorders.set(target.env.id, record);
    }
    return record;
  };
  const scheme = () => new URL(deps.config.publicUrl ?? 'http://localhost').protocol.replace(':', '');

  const noPreview = (req: IncomingMessage) =>
    `no preview at ${req.headers.host}: preview hosts are <port>-<environment name>.${deps.config.previewDomain}`;

  /** Who the request is: the cookie, else a bearer (then not passed on). */
  const credentialOf = async (req: IncomingMessage) => {
    const cookies = splitCookies(req.headers.cookie);
    if (cookies.token) return { credential: { token: cookies.token }, cookie: cookies.rest, dropAuthorization: false };
    const header = req.headers.authorization;
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '')?.[1];
    if (!bearer) {
      throw new UnauthorizedError('this preview needs its link opened first (berth preview ENV PORT prints it), or a bearer token');
    }
    if (JWT.test(bearer)) return { credential: { token: bearer }, cookie: cookies.rest, dropAuthorization: true };
    const actor: Actor = await authenticate(deps, header, clientAddress(req, deps.config.trustProxy));
    return { credential: { actor }, cookie: cookies.rest, dropAuthorization: true, actor };
  };

  /** The request's headers for the environment: no hop-by-hop ones (but an upgrade's), none of Berth's credentials. */
  const upstreamHeaders = (req: IncomingMessage, cookie: string, dropAuthorization: boolean, upgrade: boolean) => {
    const named = new Set(
      (req.headers.connection ?? '')
        .split(',')
        .map((h) => h.trim().toLowerCase())
        .filter(Boolean),
    );
    const headers: [string, string][] = [];
    const raw = req.rawHeaders;
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i]!;
      const lower = name.toLowerCase();
      if (lower === 'cookie' || FORWARDING.has(lower)) continue;
      if (lower === 'authorization' && dropAuthorization) continue;
      if ((HOP_BY_HOP.has(lower) || named.has(lower)) && !(upgrade && (lower === 'upgrade' || lower === 'connection'))) continue;
      headers.push([name, raw[i + 1]!]);
    }
    if (cookie) headers.push(['Cookie', cookie]);
    headers.push(['X-Forwarded-For', clientAddress(req, deps.config.trustProxy)]);
    headers.push(['X-Forwarded-Host', req.headers.host ?? '']);
    headers.push(['X-Forwarded-Proto', scheme()]);
    return headers.flat();
  };

  /**
   * One request to the environment's port over a stream its node dials (one stream a request). A
   * plain request's stream is half-closed once the request is sent, as `Connection: close` allows:
   * the end of an answer whose length is the connection's (a 404 of busybox httpd) only comes back
   * once the command dialling inside has both ends of its copy done.
   */
  const upstream = (req: IncomingMessage, target: PreviewTarget, headers: string[], upgrade: boolean): ClientRequest => {
    let opened: Duplex | undefined;
    let sent = false;
    const halfClose = () => {
      if (!upgrade && sent && opened && !opened.writableEnded) opened.end();
    };
    const up = request({
      method: req.method,
      path: req.url,
      headers,
      setHost: false,
      createConnection: ((_options: unknown, done: (error: Error | null, stream?: Duplex) => void) => {
        relay.openStream(target.env.nodeId!, target.job).then(
          (stream) => {
            opened = stream;
            done(null, stream);
            halfClose();
          },
          (error: Error) => done(error),
        );
        return undefined;
      }) as never,
    });
    up.on('finish', () => {
      sent = true;
      halfClose();
    });
    return up;
  };

  const unreachable = (target: PreviewTarget, error: Error) =>
    `nothing answered on port ${target.job.port} of environment ${target.env.name}: ${error.message}`;

  /** The signed link: the cookie for this host only, then `/`. */
  const openLink = async (req: IncomingMessage, res: ServerResponse, host: PreviewHost) => {
    const token = new URL(req.url ?? '/', 'http://preview').searchParams.get('token') ?? '';
    const target = await authorizePreview(deps, host, { token });
    const maxAge = Math.max(0, Math.floor(((target.expires?.getTime() ?? 0) - deps.clock.now().getTime()) / 1000));
    const secure = scheme() === 'https' ? '; Secure' : '';
    res.writeHead(303, {
      location: '/',
      'set-cookie': `${PREVIEW_COOKIE}=${token}; Max-Age=${maxAge}; Path=/; HttpOnly; SameSite=Lax${secure}`,
      'cache-control': 'no-store',
      'referrer-policy': 'no-referrer',
      'content-length': '0',
    });
    res.end();
  };

  const proxy = async (req: IncomingMessage, res: ServerResponse, host: PreviewHost) => {
    const { credential, cookie, dropAuthorization } = await credentialOf(req);
    const target = await authorizePreview(deps, host, credential);
    const touch = traffic(target);
    touch();
    const up = upstream(req, target, upstreamHeaders(req, cookie, dropAuthorization, false), false);
    up.on('response', (answer) => {
      const named = new Set(
        (answer.headers.connection ?? '')
          .split(',')
          .map((h) => h.trim().toLowerCase())
          .filter(Boolean),
      );
      const raw = answer.rawHeaders;
      for (let i = 0; i < raw.length; i += 2) {
        const lower = raw[i]!.toLowerCase();
        if (!HOP_BY_HOP.has(lower) && !named.has(lower)) res.appendHeader(raw[i]!, raw[i + 1]!);
      }
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage);
      answer.on('data', touch);
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    });
    up.on('error', (error) => {
      if (!res.headersSent) sendError(res, 'bad_gateway', unreachable(target, error), { connection: 'close' });
      else res.destroy();
    });
    // The client went away before the answer ended: so does the connection to the environment.
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    req.on('data', touch);
    req.pipe(up);
  };

  return {
    route: (req) => parsePreviewHost(deps, req.headers.host),

    async handle(req, res, host) {
      try {
        if (!host) return sendError(res, 'not_found', noPreview(req));
        if (!(req.url ?? '').startsWith('/')) return sendError(res, 'bad_request', 'a preview takes requests for a path (origin form)');
        if ((req.url ?? '').split('?')[0] === PREVIEW_LINK_PATH && (req.method === 'GET' || req.method === 'HEAD')) {
          return await openLink(req, res, host);
        }
        await proxy(req, res, host);
      } catch (error) {
        if (error instanceof DomainError) return sendError(res, error.code, error.message);
        log('preview request failed', error);
        if (!res.headersSent) sendError(res, 'internal', 'internal error');
        else res.destroy();
      }
    },

    handleUpgrade(req, socket, head, host) {
      const open = async () => {
        if (!host) return endWithError(socket, 'not_found', noPreview(req));
        if (!(req.url ?? '').startsWith('/')) return endWithError(socket, 'bad_request', 'a preview takes requests for a path');
        const { credential, cookie, dropAuthorization, actor } = await credentialOf(req);
        const target = await authorizePreview(deps, host, credential);
        const touch = traffic(target);
        touch();
        const up = upstream(req, target, upstreamHeaders(req, cookie, dropAuthorization, true), true);
        up.on('upgrade', (answer, stream, upstreamHead) => {
          const lines = [`HTTP/1.1 101 ${answer.statusMessage || 'Switching Protocols'}`];
          for (let i = 0; i < answer.rawHeaders.length; i += 2) lines.push(`${answer.rawHeaders[i]}: ${answer.rawHeaders[i + 1]}`);
          socket.write(`${lines.join('\r\n')}\r\n\r\n`);
          if (upstreamHead.length) socket.write(upstreamHead);
          if (head.length) stream.write(head);
          // A session lasts as long as what let it in: the token's expiry, the credential (revoked: cut).
          const ends: (() => void)[] = [];
          const cut = () => {
            stream.destroy();
            socket.destroy();
          };
          if (target.expires) {
            const timer = setTimeout(cut, Math.max(0, target.expires.getTime() - deps.clock.now().getTime()));
            timer.unref();
            ends.push(() => clearTimeout(timer));
          }
          if (actor) ends.push(deps.credentials.hold(actor, cut));
          socket.once('close', () => {
            for (const end of ends) end();
            stream.destroy();
          });
          stream.once('close', () => socket.destroy());
          socket.on('error', () => stream.destroy());
          stream.on('error', () => socket.destroy());
          stream.on('data', touch);
          socket.on('data', touch);
          stream.pipe(socket);
          socket.pipe(stream);
        });
        // Not switched (the app refused the upgrade): its answer, then the connection closes.
        up.on('response', (answer) => {
          const lines = [`HTTP/1.1 ${answer.statusCode} ${answer.statusMessage || STATUS_CODES[answer.statusCode ?? 502] || ''}`];
          for (let i = 0; i < answer.rawHeaders.length; i += 2) {
            const lower = answer.rawHeaders[i]!.toLowerCase();
            if (!HOP_BY_HOP.has(lower)) lines.push(`${answer.rawHeaders[i]}: ${answer.rawHeaders[i + 1]}`);
          }
          lines.push('Connection: close');
          socket.write(`${lines.join('\r\n')}\r\n\r\n`);
          answer.pipe(socket);
        });
        up.on('error', (error) => {
          if (socket.writable) endWithError(socket, 'bad_gateway', unreachable(target, error));
          else socket.destroy();
        });
        socket.once('close', () => up.destroy());
        up.end();
      };
      open().catch((error: unknown) => {
        if (error instanceof DomainError) return endWithError(socket, error.code, error.message);
        log('preview upgrade failed', error);
        endWithError(socket, 'internal', 'internal error');
      });
    },
  };
}
