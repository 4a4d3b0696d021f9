// The HTTP client of the `berth` command (and of programs that talk to Berth as a caller): the
// server from BERTH_URL (or --server), the credential from BERTH_TOKEN (or --token), JSON in and
// out, and every failure turned into one readable CommandError — the server's `error` for an
// `{error, code}` answer, one line naming the server when it cannot be reached.
import type { Command } from 'commander';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { configPath, readLogin } from './config-file';
import { DEFAULT_URL } from './default-url';
import { CommandError } from './errors';
import { type Answer, type RequestOptions, request } from './http';

/** Where `berth` looks when neither --server nor BERTH_URL says: what `npm start` listens on. */

/** A refusal by the server: its `error` is the message, with the HTTP status and its `code`. */
export class ApiError extends CommandError {
  constructor(
    message: string,
    readonly status: number,
    readonly code?: string,
  ) {
    super(message);
  }
}

export interface ConnectionOptions {
  server?: string;
  token?: string;
}

/** The options of a command that prints the API's answer as it is with --json. */
export type JsonOptions = ConnectionOptions & { json?: boolean };

/** Adds --server and --token to a command that talks to Berth. */
export function withConnection(command: Command): Command {
  return command
    .option('--server <url>', `Berth's URL (default: $BERTH_URL, else ${DEFAULT_URL})`)
    .option('--token <secret>', 'a CLI token or API key (default: $BERTH_TOKEN)');
}

/** The base URL without a trailing slash; a clear error for something that is not an http(s) URL. */
export function baseUrl(raw: string, from: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new CommandError(`${from} is not a URL: "${raw}" (for example ${DEFAULT_URL})`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new CommandError(`${from} must be an http:// or https:// URL, got "${raw}"`);
  return url.href.replace(/\/+$/, '');
}

/** The server could not be reached (refused, reset, DNS, TLS): worth trying again later. */
export class UnreachableError extends CommandError {}

/** The innermost cause of a network error, in a few words: a system code (ECONNREFUSED) or its message. */
export function networkDetail(error: unknown): string {
  let cause: unknown = error;
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause;
  if (!(cause instanceof Error)) return String(cause);
  const code = (cause as NodeJS.ErrnoException).code;
  return code && /^E[A-Z]+$/.test(code) ? code : cause.message;
}

/** Why a request did not get an answer, in one line. */
export function reachError(base: string, error: unknown): CommandError {
  if (error instanceof CommandError) return error;
  return new UnreachableError(`cannot reach Berth at ${base}: ${networkDetail(error)}`);
}

/** An error answer's message: its `error` when the server sent `{error, code}`, else the status line. */
export function errorFromText(status: number, statusText: string, text: string): ApiError {
  try {
    const body = JSON.parse(text) as { error?: unknown; code?: unknown; errors?: { message?: string }[] };
    if (typeof body.error === 'string') return new ApiError(body.error, status, typeof body.code === 'string' ? body.code : undefined);
    const first = body.errors?.[0]?.message;
    if (typeof first === 'string') return new ApiError(first, status);
  } catch {
    // not JSON: a proxy's page, say
  }
  return new ApiError(`the server answered ${status} ${statusText}`.trim(), status);
}

async function answerError(res: Answer): Promise<ApiError> {
  return errorFromText(res.status, res.statusText, await res.text().catch(() => ''));
}

export type Query = Record<string, string | number | boolean | undefined | (string | undefined)[]>;

/**
 * The id of the record `ref` names, for a route that takes ids only: `ref` itself when it is one of
 * their ids, else the id of the one live (not revoked) record of that name. Anything else is passed
 * on as given, so the server answers for it: `404 … not found` as for any id it does not know.
 */
export function idOf(records: { id: string; name: string; revoked?: string | null }[], ref: string): string {
  if (records.some((r) => r.id === ref)) return ref;
  return records.find((r) => r.name === ref && !r.revoked)?.id ?? ref;
}

export class BerthClient {
  readonly base: string;
  readonly token: string;

  constructor(options: ConnectionOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    const server = options.server ?? (env.BERTH_URL || undefined);
    let token = options.token ?? (env.BERTH_TOKEN || undefined);
    // `berth login`'s, for what flags and the environment leave open.
    const stored = server === undefined || token === undefined ? readLogin(env) : undefined;
    const storedBase = stored && baseUrl(stored.url, configPath(env));
    this.base =
      server !== undefined
        ? baseUrl(server, options.server !== undefined ? '--server' : 'BERTH_URL')
        : (storedBase ?? baseUrl(DEFAULT_URL, 'BERTH_URL'));
    // The stored credential goes only to the server it was stored for, never to another one named.
    if (token === undefined && stored && storedBase === this.base) token = stored.token;
    if (!token) {
      throw new CommandError(
        `no credential for ${this.base}: run \`berth login\`, or set BERTH_TOKEN (or pass --token) to a CLI token (bct_…) or API key (bak_…); \`berth token create\` or the console makes one`,
      );
    }
    this.token = token;
  }

  /** The absolute URL of a path with its query (repeated for arrays, undefined left out). */
  url(path: string, query: Query = {}): URL {
    const url = new URL(this.base + path);
    for (const [name, value] of Object.entries(query)) {
      for (const v of Array.isArray(value) ? value : [value]) if (v !== undefined) url.searchParams.append(name, String(v));
    }
    return url;
  }

  get authorization(): string {
    return `Bearer ${this.token}`;
  }

  /** A request with the credential; any non-2xx answer is thrown as an ApiError. */
  async fetch(path: string, init: RequestOptions & { query?: Query } = {}): Promise<Answer> {
    const { query, ...rest } = init;
    let res: Answer;
    try {
      res = await request(this.url(path, query), { ...rest, headers: { ...rest.headers, authorization: this.authorization } });
    } catch (error) {
      if (rest.signal?.aborted) throw rest.signal.reason ?? error;
      throw reachError(this.base, error);
    }
    if (!res.ok) throw await answerError(res);
    return res;
  }

  /** A JSON request and its JSON answer. */
  async json<T>(method: string, path: string, body?: unknown, query?: Query): Promise<T> {
    const res = await this.fetch(path, {
      method,
      query,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    try {
      return (text ? JSON.parse(text) : undefined) as T;
    } catch {
      throw new CommandError(`the server's answer to ${method} ${path} is not JSON`);
    }
  }

  get<T>(path: string, query?: Query): Promise<T> {
    return this.json<T>('GET', path, undefined, query);
  }

  post<T>(path: string, body?: unknown, query?: Query): Promise<T> {
    return this.json<T>('POST', path, body ?? {}, query);
  }

  put<T>(path: string, body: unknown): Promise<T> {
    return this.json<T>('PUT', path, body);
  }

  delete<T>(path: string): Promise<T> {
    return this.json<T>('DELETE', path);
  }

  /**
   * Runs a GraphQL subscription over SSE and calls `next` with each result's `data` until the
   * server ends the stream (resolves), `next` returns true (resolves, the stream is closed), or
   * an error arrives (throws it with the server's message).
   */
  async subscribe<T>(
    query: string,
    variables: Record<string, unknown>,
    next: (data: T) => boolean | undefined,
    signal?: AbortSignal,
  ): Promise<void> {
    const abort = new AbortController();
    const stop = () => abort.abort(signal?.reason);
    signal?.addEventListener('abort', stop, { once: true });
    if (signal?.aborted) stop();
    const res = await this.fetch('/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query, variables }),
      signal: abort.signal,
    });
    let done = false;
    let failure: Error | undefined;
    const parser = createParser({
      onEvent(event: EventSourceMessage) {
        if (done) return;
        if (event.event === 'complete') {
          done = true;
          return;
        }
        if (event.event !== undefined && event.event !== 'next') return;
        let payload: { data?: T | null; errors?: { message: string }[] };
        try {
          payload = JSON.parse(event.data);
        } catch {
          failure = new CommandError('the server sent a subscription event that is not JSON');
          done = true;
          return;
        }
        if (payload.errors?.length) {
          failure = new CommandError(payload.errors.map((e) => e.message).join('; '));
          done = true;
        } else if (payload.data && next(payload.data)) {
          done = true;
        }
      },
    });
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        parser.feed(decoder.decode(chunk, { stream: true }));
        if (done) break;
      }
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      if (!done) throw reachError(this.base, error);
    } finally {
      signal?.removeEventListener('abort', stop);
      abort.abort();
    }
    if (failure) throw failure;
  }
}
