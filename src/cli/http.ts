// The HTTP requests of the `berth` command (and of `berth node`), on node:http. Node's fetch
// (undici) cost every command ~80 ms on top of the request: its load, and a wait after the answer
// before the process could exit (docs/benchmarks.md, "Commands and the first command").
import type { ClientRequest, IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';

/** A request's parts: fetch's, less what the CLI never sends. */
export interface RequestOptions {
  method?: string;
  headers?: Record<string, string>;
  /** A stream is sent chunked as it is read; the answer may come (and end the request) first. */
  body?: string | Uint8Array | Readable;
  signal?: AbortSignal;
}

/** Header access in the shape of fetch's Headers#get (repeated values joined with ", "). */
class AnswerHeaders {
  constructor(private readonly raw: IncomingHttpHeaders) {}

  get(name: string): string | null {
    const value = this.raw[name.toLowerCase()];
    if (value === undefined) return null;
    return Array.isArray(value) ? value.join(', ') : value;
  }
}

/** An answer: the status, the headers, and the body as a Node stream of Buffers, read once. */
export class Answer {
  readonly headers: AnswerHeaders;

  constructor(readonly body: IncomingMessage) {
    this.headers = new AnswerHeaders(body.headers);
  }

  get status(): number {
    return this.body.statusCode ?? 0;
  }

  get statusText(): string {
    return this.body.statusMessage ?? '';
  }

  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  async text(): Promise<string> {
    const chunks: Buffer[] = [];
    for await (const chunk of this.body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString('utf8');
  }

  async json<T>(): Promise<T> {
    return JSON.parse(await this.text()) as T;
  }
}

/** Sends a request; resolves with the answer once its head arrived, rejects when none can come. */
export async function request(url: URL, options: RequestOptions = {}): Promise<Answer> {
  // TLS only for an https server: loading it costs a command that talks plain HTTP nothing.
  const { request: send } = url.protocol === 'https:' ? await import('node:https') : await import('node:http');
  const { body } = options;
  const headers: Record<string, string> = { ...options.headers };
  if (typeof body === 'string' || body instanceof Uint8Array) headers['content-length'] = String(Buffer.byteLength(body));
  return new Promise<Answer>((resolve, reject) => {
    let req: ClientRequest;
    try {
      req = send(url, { method: options.method ?? 'GET', headers, signal: options.signal });
    } catch (error) {
      reject(error);
      return;
    }
    req.once('response', (message: IncomingMessage) => resolve(new Answer(message)));
    // Before the answer: the request failed (refused, reset, aborted, the body unreadable). After
    // it (a body still being sent when the server answered and closed): the answer says enough.
    req.on('error', reject);
    if (body instanceof Readable) {
      body.once('error', (error) => req.destroy(error));
      body.pipe(req);
    } else {
      req.end(body);
    }
  });
}
