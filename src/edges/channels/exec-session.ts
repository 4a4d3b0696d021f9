// Interactive commands (docs/agents.md, "Sessions"): a WebSocket per command, opened on the exec
// path of an environment.
//
//   GET /v1/environments/{id or name}/exec?command=sh&command=-c&command=…[&tty=1&rows=24&cols=80]
//   Upgrade: websocket
//   Authorization: Bearer …      (a browser, which cannot set it: subprotocol `berth.bearer.<token>`)
//
// Everything is checked before the upgrade, as for POST …/exec (a refusal is an HTTP answer
// `{error, code}`); without `command`, the template's shell runs. Then:
//   caller → server  binary: bytes for the command's input
//                    text: {"type":"resize","rows","cols"}  {"type":"eof"}
//   server → caller  binary: 0x01 + stdout bytes, 0x02 + stderr bytes (a terminal's output is stdout)
//                    text: {"type":"exit","exitCode","exec"} (then close 1000)
//                          {"type":"error","error","code"}    (then close 1011)
// The first message names the session (`{"type":"session","session":"ses_…"}`). The caller
// closing with 1000 kills the command's whole session (recorded with 137); a drop (any other close,
// an unanswered ping) leaves it running on its node for SESSION_GRACE, to be attached to again:
//   GET /v1/environments/{id or name}/sessions/{session}   (Upgrade: websocket, the same rules)
// which first replays its scrollback. A revoked credential closes it with 4401.
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { type RawData, type WebSocket, WebSocketServer } from 'ws';
import type { Actor, Deps, Log } from '../../app/context';
import { CLOSE } from '../../dataplane/ws-bridge';
import { principalOf } from '../../kernel/access';
import { BadRequestError, DomainError, ForbiddenError, ValidationError } from '../../kernel/errors';
import { authenticate } from '../../modules/credentials';
import { activityRecorder, attachSession, commandEnvironment, execRecord, sessionActivity, startCommand } from '../../modules/environments';
import { findTemplate } from '../../modules/templates';
import { MAX_TERM, type SessionOptions, termSize } from '../../node/command';
import { tagUpgrades } from '../../observability/requests';
import { clientAddress } from '../http/client-address';
import type { CorsPolicy } from '../http/cors';
import { endWithError } from '../http/protocol-errors';
import { queryEncodingProblem } from '../http/text';

/** The exec path of an environment, upgraded; or a session's, to attach to it again. */
export const SESSION_PATH = /^\/v1\/environments\/([^/]+)\/(?:exec|sessions\/([^/]+))$/;

/** The route label of a session path (the log's and the metrics'), else undefined. */
export function sessionRoute(path: string): string | undefined {
  const match = SESSION_PATH.exec(path);
  if (!match) return undefined;
  return match[2] === undefined ? '/v1/environments/{id}/exec' : '/v1/environments/{id}/sessions/{session}';
}
/** The subprotocol of this API; a browser also offers `berth.bearer.<token>`. */
export const SESSION_PROTOCOL = 'berth.exec.v1';
const BEARER_PROTOCOL = 'berth.bearer.';
/** The largest frame a caller may send: input comes in pieces. */
export const MAX_INPUT_FRAME = 64 * 1024;
/** Sessions one member (all their tokens) or API key may hold open on one instance at once. */
export const MAX_SESSIONS = 16;
/** A session's `lastActivity` is written at most this often while input comes. */
const SESSION_ACTIVITY_STEP_MS = 10_000;
/** Silent sockets are pinged this often, and closed when the last ping went unanswered. */
const PING_MS = 20_000;
const STDOUT = 1;
const STDERR = 2;

export interface SessionServer {
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  close(): Promise<void>;
}

/** The credential: the Authorization header, else a `berth.bearer.<token>` subprotocol. */
function credential(req: IncomingMessage): string | undefined {
  if (req.headers.authorization) return req.headers.authorization;
  const offered = String(req.headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim());
  const bearer = offered.find((p) => p.startsWith(BEARER_PROTOCOL));
  return bearer ? `Bearer ${bearer.slice(BEARER_PROTOCOL.length)}` : undefined;
}

/** The session's command and terminal from the query. */
function parseQuery(url: URL): { command: string[] | undefined; session: SessionOptions } {
  const q = url.searchParams;
  const command = q.getAll('command');
  const tty = q.get('tty');
  if (tty !== null && tty !== '0' && tty !== '1' && tty !== 'true' && tty !== 'false')
    throw new ValidationError('tty: must be 1 or 0', 'tty');
  if (tty !== '1' && tty !== 'true') {
    if (q.has('rows') || q.has('cols')) throw new ValidationError('rows, cols: only with tty=1', 'rows');
    return { command: command.length ? command : undefined, session: {} };
  }
  const rows = q.has('rows') ? Number(q.get('rows')) : 24;
  const cols = q.has('cols') ? Number(q.get('cols')) : 80;
  const size = termSize({ rows, cols });
  if (!size) throw new ValidationError(`rows, cols: integers from 1 to ${MAX_TERM}`, Number.isInteger(rows) ? 'cols' : 'rows');
  return { command: command.length ? command : undefined, session: { tty: size } };
}

export function createSessionServer(deps: Deps, cors: CorsPolicy, log: Log): SessionServer {
  const wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    maxPayload: MAX_INPUT_FRAME,
    // The token a browser offered is never echoed back: only the API's own subprotocol is.
    handleProtocols: (protocols) => (protocols.has(SESSION_PROTOCOL) ? SESSION_PROTOCOL : false),
  });
  tagUpgrades(wss);
  const live = new Set<WebSocket>();
  const perPrincipal = new Map<string, number>();

  const accept = async (req: IncomingMessage, socket: Duplex, head: Buffer, envRef: string, sessionId: string | undefined) => {
    const url = new URL(req.url ?? '/', 'http://session');
    const problem = queryEncodingProblem(url.search);
    if (problem) throw new BadRequestError(problem);
    // Browsers do not apply CORS to WebSocket: the same origin policy is enforced here.
    if (req.headers.origin && !cors.allows(req))
      throw new ForbiddenError(`origin ${req.headers.origin} may not open a session here; CORS_ORIGINS lists the origins that may`);
    const actor = await authenticate(deps, credential(req), clientAddress(req, deps.config.trustProxy));
    // Attaching again takes no command: the session's own runs on.
    const { command, session } = sessionId === undefined ? parseQuery(url) : { command: undefined, session: {} };
    if (sessionId !== undefined && [...url.searchParams.keys()].length > 0)
      throw new ValidationError('attaching to a session takes no query: its command and terminal are those it started with', 'command');
    const env = await commandEnvironment(deps, actor, envRef);
    const argv =
      sessionId === undefined
        ? (command ?? [(await findTemplate(deps.prisma, env.orgId, env.template).catch(() => undefined))?.shell ?? '/bin/sh'])
        : [];
    const principal = principalOf(actor);
    const open = perPrincipal.get(principal) ?? 0;
    if (open >= MAX_SESSIONS)
      throw new DomainError(`at most ${MAX_SESSIONS} sessions at once per member or API key: close one first`, 'too_many_sessions');
    perPrincipal.set(principal, open + 1);
    const gone = new AbortController();
    let started: Awaited<ReturnType<typeof startCommand>>;
    try {
      started =
        sessionId === undefined
          ? await startCommand(deps, actor, env, argv, { signal: gone.signal, session })
          : await attachSession(deps, env, sessionId, gone.signal);
    } catch (error) {
      release(principal);
      throw error;
    }
    // The caller gone before the upgrade, or a handshake the upgrade refuses: the command ends here.
    let upgraded = false;
    const abandon = () => {
      if (upgraded) return;
      release(principal);
      // A new command never attached: nothing to come back to (a refused attach only leaves).
      if (sessionId === undefined) started.kill();
      gone.abort();
      // Read to its end: the killed command is recorded like any other.
      void (async () => {
        for await (const _ of started.events);
      })().catch((error) => log('an abandoned session failed', error));
    };
    if (socket.destroyed) return abandon();
    socket.once('close', abandon);
    wss.handleUpgrade(req, socket, head, (ws) => {
      upgraded = true;
      socket.off('close', abandon);
      serve(ws, actor, env.id, env.idleMs, started, gone, principal, sessionId !== undefined);
    });
  };

  const release = (principal: string) => {
    const left = (perPrincipal.get(principal) ?? 1) - 1;
    if (left > 0) perPrincipal.set(principal, left);
    else perPrincipal.delete(principal);
  };

  const serve = (
    ws: WebSocket,
    actor: Actor,
    environmentId: string,
    idleMs: number,
    started: Awaited<ReturnType<typeof startCommand>>,
    gone: AbortController,
    principal: string,
    /** A session attached to again (its id comes with the replay's offset). */
    attached: boolean,
  ) => {
    live.add(ws);
    const hold = deps.credentials.hold(actor, (reason) => ws.close(CLOSE.revoked, reason));
    let answered = true;
    const ping = setInterval(() => {
      if (!answered) return ws.terminate();
      answered = false;
      ws.ping();
    }, PING_MS);
    ws.on('pong', () => {
      answered = true;
    });
    ws.once('close', (code: number) => {
      clearInterval(ping);
      live.delete(ws);
      hold();
      release(principal);
      // A caller closing with 1000 ends the command; a drop (any other close, a ping unanswered)
      // leaves a session running for its grace, to be attached to again.
      if (code === CLOSE.normal) started.kill();
      gone.abort();
    });
    // Typing counts as activity, like a keepalive: the environment's, and the session's.
    const environmentActive = activityRecorder(deps, { id: environmentId, idleMs }, (error) => log('session activity not recorded', error));
    const sessionActive = started.session
      ? sessionActivity(deps, started.session, SESSION_ACTIVITY_STEP_MS, (error) => log('session activity not recorded', error))
      : () => undefined;
    const active = () => {
      environmentActive();
      sessionActive();
    };
    // Input waits for room on its way to the container: meanwhile this socket is not read (what it
    // had already parsed waits in line), and reading resumes once the line is empty.
    let inputs = Promise.resolve();
    let waiting = 0;
    ws.on('message', (data: RawData, binary: boolean) => {
      const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      if (binary) {
        active();
        if (waiting++ === 0) ws.pause();
        inputs = inputs
          .then(() => started.input(bytes))
          .then(() => {
            if (--waiting === 0) ws.resume();
          });
        return;
      }
      let message: { type?: unknown; rows?: unknown; cols?: unknown };
      try {
        message = JSON.parse(bytes.toString('utf8'));
      } catch {
        return ws.close(CLOSE.invalid, 'a text frame must be JSON: {"type":"resize",…} or {"type":"eof"}');
      }
      if (message.type === 'eof') {
        inputs = inputs.then(() => started.endInput());
      } else if (message.type === 'resize') {
        const size = termSize(message);
        if (!size) return ws.close(CLOSE.invalid, `resize: rows and cols must be integers from 1 to ${MAX_TERM}`);
        started.resize(size);
      } else {
        ws.close(CLOSE.invalid, 'unknown message type: "resize" or "eof"');
      }
    });
    const send = (data: Buffer | string) =>
      new Promise<void>((resolve) => {
        if (ws.readyState !== ws.OPEN) return resolve();
        ws.send(data, () => resolve());
      });
    void (async () => {
      try {
        // First, the session's id: what attaches to it again after a drop. Attached again, with the
        // byte of its whole output the replay starts at (a client that saw more skips the difference).
        if (started.session && !attached) await send(JSON.stringify({ type: 'session', session: started.session }));
        for await (const event of started.events) {
          if (event.kind === 'output') {
            await send(Buffer.concat([Buffer.of(event.stream === 'stderr' ? STDERR : STDOUT), event.data]));
          } else if (event.kind === 'replay') {
            await send(JSON.stringify({ type: 'session', session: started.session, offset: event.from }));
          } else {
            const { exec } = event;
            await send(JSON.stringify({ type: 'exit', exitCode: exec.exitCode, exec: execRecord(exec) }));
            ws.close(CLOSE.normal, 'the command ended');
          }
        }
      } catch (error) {
        const known = error instanceof DomainError;
        if (!known) log('session failed', error);
        await send(
          JSON.stringify({ type: 'error', error: known ? error.message : 'internal error', code: known ? error.code : 'internal' }),
        );
        ws.close(CLOSE.internal, 'the session failed');
      }
    })();
  };

  const refuse = (socket: Duplex) => (error: unknown) => {
    if (error instanceof DomainError) return endWithError(socket, error.code, error.message);
    log('session upgrade failed', error);
    endWithError(socket, 'internal', 'internal error');
  };

  return {
    handleUpgrade(req, socket, head) {
      const path = (req.url ?? '/').split('?')[0] ?? '/';
      let envRef: string;
      let sessionId: string | undefined;
      try {
        const match = SESSION_PATH.exec(path);
        envRef = decodeURIComponent(match?.[1] ?? '');
        sessionId = match?.[2] === undefined ? undefined : decodeURIComponent(match[2]);
      } catch {
        return endWithError(socket, 'bad_request', 'the environment or session in the path is not well-formed');
      }
      accept(req, socket, head, envRef, sessionId).catch(refuse(socket));
    },
    async close() {
      for (const ws of live) ws.close(CLOSE.goingAway, 'the server is stopping');
      for (const ws of live) ws.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
