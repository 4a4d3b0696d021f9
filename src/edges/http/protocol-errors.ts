import { randomUUID } from 'node:crypto';
import { type IncomingMessage, type Server, type ServerResponse, STATUS_CODES } from 'node:http';
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { type ErrorCode, statusOf } from '../../kernel/error-codes';
import { socketInfoOf } from '../../observability/requests';
import { LINGER_MS } from './early-answer';
import { boundMessage } from './respond';

// Requests Node's HTTP parser refuses (headers over 16 KiB, a bad or duplicated Content-Length,
// chunked with Content-Length, a bad request line, bytes after a body shorter than its
// Content-Length said) never reach a handler: Node answers them itself, with an empty body. Here
// they get the `{error, code}` body every other error has.

/** Answers on the raw socket (no ServerResponse exists: a refused request, a WebSocket upgrade) and closes it. */
export function endWithError(socket: Duplex, code: ErrorCode, error: string): void {
  const status = statusOf(code);
  const body = JSON.stringify({ error: boundMessage(error), code });
  // A refused upgrade is a request too: its id, and its status on its log line. What Node's parser
  // refused has no request to log, but its answer carries an id all the same.
  const info = socketInfoOf(socket);
  if (info) info.status = status;
  const id = info?.id ?? randomUUID();
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `X-Request-Id: ${id}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
  if (socket instanceof Socket) socket.setTimeout(LINGER_MS, () => socket.destroy());
}

function answerFor(err: NodeJS.ErrnoException & { reason?: string }): { code: ErrorCode; error: string } {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return { code: 'headers_too_large', error: 'the request line and headers are larger than 16 KiB' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { code: 'request_timeout', error: 'the request took too long to arrive' };
    default:
      return { code: 'bad_request', error: `malformed HTTP request: ${err.reason ?? err.message}` };
  }
}

/** The request each connection is answering now, so a protocol error after it does not cut its answer. */
const inFlight = new WeakMap<Socket, { req: IncomingMessage; res: ServerResponse }>();

export function trackRequest(req: IncomingMessage, res: ServerResponse): void {
  const socket = req.socket;
  inFlight.set(socket, { req, res });
  res.once('close', () => {
    if (inFlight.get(socket)?.res === res) inFlight.delete(socket);
  });
}

/** Installs the `clientError` handler on the server. */
export function answerProtocolErrors(server: Server): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    const current = inFlight.get(socket);
    if (current?.req.complete && !current.res.writableEnded) {
      // The bad bytes came after a whole request (pipelined, or past a Content-Length that was too
      // short): that request gets its answer, then the connection closes.
      if (!current.res.headersSent) current.res.setHeader('connection', 'close');
      current.res.once('close', () => socket.destroy());
      return;
    }
    if (current?.res.headersSent) {
      socket.destroy();
      return;
    }
    const { code, error } = answerFor(err);
    endWithError(socket, code, error);
  });
}
