import { connect } from 'node:net';

export interface RawReply {
  status: number;
  headers: Record<string, string>;
  /** The body as text; `json` when it parses. */
  text: string;
  json?: unknown;
}

/**
 * Sends bytes as they are (no client-side checks: bad request lines, lying Content-Length, bad
 * encodings) and reads the first response. `endAfterWrite` half-closes the connection after
 * sending, as a client that has nothing more to send would. Resolves undefined when the server
 * closes without answering.
 */
export function rawRequest(url: string, request: string | Buffer, opts: { endAfterWrite?: boolean } = {}): Promise<RawReply | undefined> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    let data = Buffer.alloc(0);
    let settled = false;
    const finish = (reply: RawReply | undefined) => {
      if (settled) return;
      settled = true;
      socket.destroy();
      resolve(reply);
    };
    socket.on('connect', () => {
      socket.write(request);
      if (opts.endAfterWrite) socket.end();
    });
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      const reply = parseResponse(data);
      if (reply) finish(reply);
    });
    socket.on('close', () => finish(parseResponse(data, true)));
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNRESET' || err.code === 'EPIPE') finish(parseResponse(data, true));
      else reject(err);
    });
  });
}

/** The first response in `data`, once it is all there (or whatever arrived, when the connection `closed`). */
export function parseResponse(data: Buffer, closed = false): RawReply | undefined {
  const end = data.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine, ...lines] = data.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? '')?.[1]);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const body = data.subarray(end + 4);
  const length = headers['content-length'] === undefined ? undefined : Number(headers['content-length']);
  if (length !== undefined && body.length < length) return closed ? reply(status, headers, body) : undefined;
  if (length === undefined && headers['transfer-encoding'] && !closed) return undefined;
  return reply(status, headers, length === undefined ? body : body.subarray(0, length));
}

function reply(status: number, headers: Record<string, string>, body: Buffer): RawReply {
  const text = body.toString('utf8');
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status, headers, text, json };
}
