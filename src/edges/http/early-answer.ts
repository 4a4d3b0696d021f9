import { type IncomingMessage, ServerResponse } from 'node:http';

// An answer given before the request's body has all arrived (413 over a limit, 401, 422 …) must
// reach a client that is still sending it. Closing at once would reset the connection under the
// client's writes: it sees EPIPE or ECONNRESET, and the reset can drop the answer it had not read
// yet. Reading on would take a body of any size. So, like nginx's lingering close, every response
// of the server (createServer's ServerResponse option) written while its request's body is still
// arriving says `Connection: close`, is sent in full at once, and its end waits until what the
// client still sends has been read and dropped (never kept), for at most LINGER_MS or LINGER_BYTES;
// then the connection closes.

/** How long a connection we are done with may linger while the client finishes or reads. */
export const LINGER_MS = 5_000;
/** Most bytes of a refused body read (and dropped) before closing anyway. */
export const LINGER_BYTES = 64 * 1024 * 1024;

/** Whether `req` has a body to read (a length above 0, or chunked). */
export const declaresBody = (req: IncomingMessage): boolean =>
  Number(req.headers['content-length']) > 0 || req.headers['transfer-encoding'] !== undefined;

/** Whether `req`'s body has not all arrived: the connection cannot serve another request after this one. */
const unfinished = (req: IncomingMessage) => declaresBody(req) && !req.complete;

/** Reads and drops the rest of `req`'s body, then calls `done`: at its end, its connection's close, or a bound. */
function discardRest(req: IncomingMessage, done: () => void): void {
  let dropped = 0;
  let over = false;
  const finish = () => {
    if (over) return;
    over = true;
    clearTimeout(timer);
    req.off('data', onData);
    req.off('end', finish);
    req.off('close', finish);
    done();
  };
  const onData = (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped >= LINGER_BYTES) finish();
  };
  const timer = setTimeout(finish, LINGER_MS);
  req.on('data', onData);
  req.once('end', finish);
  req.once('close', finish);
  // A reader that gave up (a body over its limit) paused the stream.
  req.resume();
}

/** The server's responses (src/app/server.ts): an answer ahead of its request's body ends as above. */
export class LingeringResponse<Request extends IncomingMessage = IncomingMessage> extends ServerResponse<Request> {
  #lingering = false;

  override writeHead(statusCode: number, ...rest: unknown[]): this {
    if (unfinished(this.req)) this.setHeader('connection', 'close');
    return Reflect.apply(ServerResponse.prototype.writeHead, this, [statusCode, ...rest]);
  }

  override end(...args: unknown[]): this {
    if (this.#lingering) return this;
    // A body nobody reads any more (its stream destroyed) cannot be drained: the connection just closes.
    if (this.writableEnded || !unfinished(this.req) || this.req.destroyed) return Reflect.apply(ServerResponse.prototype.end, this, args);
    this.#lingering = true;
    const callback = typeof args.at(-1) === 'function' ? (args.pop() as () => void) : undefined;
    const [chunk, encoding] = args as [string | Buffer | null | undefined, BufferEncoding | null | undefined];
    if (chunk !== undefined && chunk !== null) {
      // Sized, so the client has the whole answer now rather than when the connection closes.
      if (!this.headersSent && !this.hasHeader('content-length')) {
        this.setHeader('content-length', typeof chunk === 'string' ? Buffer.byteLength(chunk, encoding ?? 'utf8') : chunk.length);
      }
      this.write(chunk, encoding ?? 'utf8');
    } else if (!this.headersSent) {
      this.setHeader('content-length', 0);
      this.flushHeaders();
    }
    discardRest(this.req, () => Reflect.apply(ServerResponse.prototype.end, this, callback ? [callback] : []));
    return this;
  }
}
