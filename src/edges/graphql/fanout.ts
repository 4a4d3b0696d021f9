// Shared delivery of GraphQL subscriptions, over graphql-ws and SSE alike. A subscription field
// marked `extensions: { sharedSource: true }` answers a SharedSource (src/kernel/shared-source.ts)
// when asked with `shareSubscription`; subscribers whose sources have the same key and whose
// operations have the same document and variables form one group, which listens once, executes
// each value once, serializes it once and writes the same bytes to every subscriber's socket
// (a graphql-ws `next` frame differs only by the subscription id around the shared payload).
// Each subscriber keeps only its writer: no iterator chain, no queue of its own beyond its socket's.
import { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import {
  createSourceEventStream,
  type DocumentNode,
  type ExecutionArgs,
  type ExecutionResult,
  execute,
  type GraphQLError,
  getOperationAST,
  Kind,
  print,
} from 'graphql';
import type { Plugin } from 'graphql-yoga';
import type { WebSocket } from 'ws';
import type { Context, Log } from '../../app/context';
import { closeCodeOf, type ErrorCode } from '../../kernel/error-codes';
import { SharedSource } from '../../kernel/shared-source';

/** What a subscriber's socket may hold unsent before the subscriber is dropped as too slow. */
export const MAX_UNSENT_BYTES = 1024 * 1024;
/** The WebSocket close code of a subscriber dropped as too slow (policy violation). */
const TOO_SLOW = 'too slow: more than 1 MiB of subscription messages waiting to be sent';
/** SSE keep-alive comment, as graphql-yoga sends it. */
const SSE_PING_MS = 12_000;

/** What the WebSocket transport adds to the context (src/edges/graphql/ws.ts). */
interface TransportContext extends Context {
  socket?: WebSocket;
  subscriptionId?: string;
  request?: Request;
}

const CRLF = Buffer.from('\r\n');

/** One value, executed and serialized once; each transport's bytes made on first use. */
class SharedEvent {
  private wsBytes: Buffer | undefined;
  private sseBytes: Buffer | undefined;
  private sseChunkBytes: Buffer | undefined;
  constructor(
    readonly result: ExecutionResult,
    private readonly json: string,
  ) {}

  /** The end of a graphql-ws `next` message: the payload and the closing brace. */
  get wsTail(): Buffer {
    this.wsBytes ??= Buffer.from(`${this.json}}`);
    return this.wsBytes;
  }

  /** A whole SSE `next` event. */
  get sse(): Buffer {
    this.sseBytes ??= Buffer.from(`event: next\ndata: ${this.json}\n\n`);
    return this.sseBytes;
  }

  /** The same as one chunk of a chunked HTTP/1.1 body. */
  get sseChunk(): Buffer {
    if (!this.sseChunkBytes) {
      const sse = this.sse;
      this.sseChunkBytes = Buffer.concat([Buffer.from(`${sse.length.toString(16)}\r\n`), sse, CRLF]);
    }
    return this.sseChunkBytes;
  }
}

interface Writer {
  write(event: SharedEvent): void;
  /** The subscription ended on the server's side (not by its client). */
  end(): void;
}

type Done = IteratorResult<ExecutionResult, undefined>;
const DONE: Done = { done: true, value: undefined };

/**
 * One subscriber. Transports attach a writer; until then (an SSE response not yet sent) events
 * wait here. Iterated by anything else, it yields the shared results one by one.
 */
export class SharedSubscription implements AsyncIterableIterator<ExecutionResult, undefined> {
  private writer: Writer | undefined;
  private backlog: SharedEvent[] | undefined = [];
  private ended = false;
  private onEnd: ((result: Done) => void) | undefined;

  constructor(private readonly group: Group) {}

  deliver(event: SharedEvent): void {
    if (this.writer) this.writer.write(event);
    else this.backlog?.push(event);
  }

  attach(writer: Writer): void {
    this.writer = writer;
    const backlog = this.backlog ?? [];
    this.backlog = undefined;
    for (const event of backlog) writer.write(event);
  }

  /** With a writer attached, resolves when the subscription ends (graphql-ws waits on it). */
  next(): Promise<Done | IteratorResult<ExecutionResult, undefined>> {
    if (this.ended) return Promise.resolve(DONE);
    if (!this.writer) this.attach(new PullWriter());
    if (this.writer instanceof PullWriter) return this.writer.next();
    return new Promise((resolve) => {
      this.onEnd = resolve;
    });
  }

  /** Leaves the group (the client went away or unsubscribed). */
  return(): Promise<Done> {
    if (!this.ended) {
      this.ended = true;
      this.group.leave(this);
      if (this.writer instanceof PullWriter) this.writer.end();
      this.onEnd?.(DONE);
      this.onEnd = undefined;
    }
    return Promise.resolve(DONE);
  }

  /** Ends it from the server's side: the transport says so to the client. */
  end(): void {
    if (this.ended) return;
    const writer = this.writer;
    void this.return();
    writer?.end();
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

/** For consumers that iterate: the results in order. */
class PullWriter implements Writer {
  private readonly queue: ExecutionResult[] = [];
  private waiter: ((result: IteratorResult<ExecutionResult, undefined>) => void) | undefined;
  private done = false;

  write(event: SharedEvent): void {
    if (this.waiter) {
      const wake = this.waiter;
      this.waiter = undefined;
      wake({ value: event.result, done: false });
    } else this.queue.push(event.result);
  }

  end(): void {
    this.done = true;
    this.waiter?.(DONE);
  }

  next(): Promise<IteratorResult<ExecutionResult, undefined>> {
    const value = this.queue.shift();
    if (value) return Promise.resolve({ value, done: false });
    if (this.done) return Promise.resolve(DONE);
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }
}

const TEXT = { binary: false };

/** What of `ws`'s WebSocket the writer reads: its TCP socket, its sender's state, the negotiated extensions. */
interface WsInternals {
  _socket?: Socket;
  _sender?: { _state: number; _queue: unknown[] };
  _extensions?: Record<string, unknown>;
}

/**
 * graphql-ws: `{"id":…,"type":"next","payload":` + the shared payload + `}`, one text frame.
 * Without extensions (no compression) and with nothing queued in ws's sender, the frame is built
 * here, header included, and written to the TCP socket in one write; otherwise through ws.
 */
class WebSocketWriter implements Writer {
  private readonly prefix: Buffer;
  private readonly plain: boolean;

  constructor(
    private readonly socket: WebSocket,
    id: string,
    private readonly sub: SharedSubscription,
  ) {
    this.prefix = Buffer.from(`{"id":${JSON.stringify(id)},"type":"next","payload":`);
    this.plain = Object.keys((socket as unknown as WsInternals)._extensions ?? {}).length === 0;
  }

  write(event: SharedEvent): void {
    const { socket, prefix } = this;
    if (socket.readyState !== socket.OPEN) return;
    if (socket.bufferedAmount > MAX_UNSENT_BYTES) {
      socket.close(closeCodeOf('too_slow'), TOO_SLOW);
      void this.sub.return();
      return;
    }
    const tail = event.wsTail;
    const length = prefix.length + tail.length;
    const header = length < 126 ? 2 : length < 65536 ? 4 : 10;
    const frame = Buffer.allocUnsafe(header + length);
    frame[0] = 0x81; // FIN, text
    if (header === 2) frame[1] = length;
    else if (header === 4) {
      frame[1] = 126;
      frame.writeUInt16BE(length, 2);
    } else {
      frame[1] = 127;
      frame.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
      frame.writeUInt32BE(length >>> 0, 6);
    }
    prefix.copy(frame, header);
    tail.copy(frame, header + prefix.length);
    const internals = socket as unknown as WsInternals;
    const sender = internals._sender;
    if (this.plain && internals._socket && sender && sender._state === 0 && sender._queue.length === 0) internals._socket.write(frame);
    else socket.send(frame.subarray(header), TEXT);
  }

  end(): void {
    // graphql-ws sends `complete` once the iterator it waits on is done.
  }
}

/**
 * GraphQL over SSE (distinct connections), the bytes graphql-yoga writes: a `:` ping first and
 * every 12 s, `next` events, `complete` at the end. The response's body stream only carries the
 * response's life (yoga's adapter pipes it to the Node response, which sends the headers); the
 * events go to the Node response directly once it started, each as one chunk framed once for
 * every subscriber and written to the socket.
 */
class SseWriter implements Writer {
  static readonly PING = Buffer.from(':\n\n');
  static readonly COMPLETE = Buffer.from('event: complete\ndata:\n\n');
  static readonly TOO_SLOW = Buffer.from(
    `event: next\ndata: ${JSON.stringify({ errors: [{ message: TOO_SLOW, extensions: { code: 'too_slow' satisfies ErrorCode } }] })}\n\nevent: complete\ndata:\n\n`,
  );

  readonly body: Readable;
  private started = false;
  private finished = false;
  private backlog: SharedEvent[] = [];

  constructor(
    private readonly sub: SharedSubscription,
    private readonly writers: Set<SseWriter>,
    private readonly res: ServerResponse | undefined,
  ) {
    this.body = new Readable({
      read: () => this.start(),
      destroy: (error, callback) => {
        this.closed();
        callback(error);
      },
    });
    writers.add(this);
  }

  /** The response's headers are written: what waited goes out. */
  private start(): void {
    if (this.started) return;
    this.started = true;
    this.send(SseWriter.PING);
    const backlog = this.backlog;
    this.backlog = [];
    for (const event of backlog) this.write(event);
  }

  write(event: SharedEvent): void {
    if (this.finished) return;
    if (!this.started) {
      this.backlog.push(event);
      return;
    }
    if (this.unsent() > MAX_UNSENT_BYTES) {
      this.finish(SseWriter.TOO_SLOW);
      void this.sub.return();
      // A client that reads nothing more is cut off.
      const body = this.body;
      setTimeout(() => body.destroy(), 30_000).unref();
      return;
    }
    const res = this.res;
    const socket = res?.socket;
    // Straight to the socket when the response is chunked and nothing of it waits before the socket.
    if (res?.chunkedEncoding && socket && res.writableLength === socket.writableLength) socket.write(event.sseChunk);
    else this.send(event.sse);
  }

  private send(bytes: Buffer): void {
    if (this.res) this.res.write(bytes);
    else this.body.push(bytes);
  }

  private unsent(): number {
    if (!this.res) return this.body.readableLength;
    return this.res.writableLength; // its own buffer and its socket's
  }

  ping(): void {
    if (this.started && !this.finished && this.unsent() === 0) this.send(SseWriter.PING);
  }

  end(): void {
    this.finish(SseWriter.COMPLETE);
  }

  private finish(last: Buffer): void {
    this.writers.delete(this);
    if (this.finished || this.body.destroyed) return;
    this.finished = true;
    if (this.started) this.send(last);
    else this.body.push(last);
    this.body.push(null);
  }

  closed(): void {
    this.finished = true;
    this.writers.delete(this);
    void this.sub.return();
  }
}

type Mask = (error: GraphQLError) => GraphQLError;

const isPromise = <T>(value: T | Promise<T>): value is Promise<T> => typeof (value as Promise<T>)?.then === 'function';

/** Subscribers of one (source key, document, variables): one listener, one execution and one serialization per value. */
class Group {
  readonly members = new Set<SharedSubscription>();
  readonly ready: Promise<void>;
  private stop: (() => void) | undefined;
  private closed = false;
  private readonly queue: unknown[] = [];
  private draining = false;

  constructor(
    private readonly groups: Map<string, Group>,
    private readonly key: string,
    private readonly args: ExecutionArgs,
    source: SharedSource<unknown>,
    private readonly mask: Mask,
    private readonly log: Log,
  ) {
    this.ready = source
      .listen((values) => this.push(values))
      .then((stop) => {
        this.stop = stop;
        if (this.closed) stop();
      });
  }

  private push(values: unknown[]): void {
    for (const value of values) this.queue.push(value);
    if (!this.draining) void this.drain();
  }

  /** Executes the values in order; a value whose execution is asynchronous holds back the ones after it. */
  private async drain(): Promise<void> {
    this.draining = true;
    try {
      while (this.queue.length > 0) {
        const value = this.queue.shift();
        const executed = execute({ ...this.args, rootValue: value });
        this.deliver(isPromise(executed) ? await executed : executed);
      }
    } catch (error) {
      this.log('shared subscription delivery failed', error);
    } finally {
      this.draining = false;
    }
  }

  private deliver(executed: ExecutionResult): void {
    const result: ExecutionResult = executed.errors ? { ...executed, errors: executed.errors.map(this.mask) } : executed;
    const event = new SharedEvent(result, JSON.stringify(result));
    for (const member of this.members) {
      try {
        member.deliver(event);
      } catch (error) {
        // One subscriber's broken socket is its own end, not the others'.
        this.log('shared subscription delivery failed', error);
        void member.return();
      }
    }
  }

  leave(member: SharedSubscription): void {
    this.members.delete(member);
    if (this.members.size > 0 || this.closed) return;
    this.closed = true;
    if (this.groups.get(this.key) === this) this.groups.delete(this.key);
    this.stop?.();
  }
}

/** The subscription's one root field, when it is marked shareable. */
function isShareable(args: ExecutionArgs): boolean {
  const operation = getOperationAST(args.document, args.operationName);
  if (operation?.operation !== 'subscription') return false;
  const [selection, ...rest] = operation.selectionSet.selections;
  if (!selection || rest.length > 0 || selection.kind !== Kind.FIELD || selection.directives?.length) return false;
  const field = args.schema.getSubscriptionType()?.getFields()[selection.name.value];
  return field?.extensions?.sharedSource === true;
}

/**
 * The envelop/yoga plugin: shareable subscriptions join their group instead of running
 * graphql-js's per-subscriber `subscribe`; over SSE their response is written from the shared
 * bytes, over graphql-ws (src/edges/graphql/ws.ts puts the socket and subscription id in the context)
 * each frame goes straight to the socket.
 */
export function useSharedSubscriptions(mask: Mask, log: Log): Plugin {
  const groups = new Map<string, Group>();
  const documentKeys = new WeakMap<DocumentNode, string>();
  const sseWriters = new Set<SseWriter>();
  const byRequest = new WeakMap<Request, SharedSubscription>();
  let pings: NodeJS.Timeout | undefined;

  const documentKey = (document: DocumentNode) => {
    let key = documentKeys.get(document);
    if (key === undefined) {
      key = print(document);
      documentKeys.set(document, key);
    }
    return key;
  };

  const sseResponse = (sub: SharedSubscription, fetchAPI: { Response: typeof Response }, res: ServerResponse | undefined) => {
    const writer = new SseWriter(sub, sseWriters, res);
    sub.attach(writer);
    pings ??= setInterval(() => {
      for (const w of sseWriters) w.ping();
      if (sseWriters.size === 0) {
        clearInterval(pings);
        pings = undefined;
      }
    }, SSE_PING_MS).unref();
    return new fetchAPI.Response(writer.body as unknown as ReadableStream, {
      status: 200,
      headers: { 'Content-Type': 'text/event-stream', Connection: 'keep-alive', 'Cache-Control': 'no-cache', 'Content-Encoding': 'none' },
    });
  };

  return {
    onSubscribe({ args, setResultAndStopExecution }) {
      if (!isShareable(args)) return;
      return (async () => {
        const context = args.contextValue as unknown as TransportContext;
        let source: unknown;
        try {
          source = await createSourceEventStream({ ...args, contextValue: { ...context, shareSubscription: true } });
        } catch {
          return;
        }
        // Errors (bad arguments, not allowed): graphql-js's own subscribe runs and reports them.
        if (!(source instanceof SharedSource)) return;
        const key = [source.key, args.operationName ?? '', documentKey(args.document), JSON.stringify(args.variableValues ?? null)].join(
          '\n',
        );
        let group = groups.get(key);
        if (!group) {
          const shared: Context = { deps: context.deps, actor: context.actor, clientAddress: context.clientAddress };
          group = new Group(groups, key, { ...args, contextValue: shared }, source, mask, log);
          groups.set(key, group);
        }
        const sub = new SharedSubscription(group);
        group.members.add(sub);
        try {
          await group.ready;
        } catch (error) {
          group.leave(sub);
          throw error;
        }
        if (context.socket && context.subscriptionId !== undefined) {
          sub.attach(new WebSocketWriter(context.socket, context.subscriptionId, sub));
        } else if (context.request) {
          // yoga wraps the result before it processes it: found again by request.
          byRequest.set(context.request, sub);
        }
        setResultAndStopExecution(sub);
      })();
    },
    onResultProcess({ request, resultProcessor, setResultProcessor, serverContext }) {
      const sub = byRequest.get(request);
      if (!sub) return;
      byRequest.delete(request);
      // Only SSE serves subscriptions over HTTP; without it yoga answers 406.
      if (!resultProcessor) return void sub.return();
      // yoga's Node adapter puts the Node response in the server context.
      const res = (serverContext as { res?: unknown }).res;
      const nodeResponse = res instanceof ServerResponse ? res : undefined;
      setResultProcessor((_wrapped, fetchAPI) => sseResponse(sub, fetchAPI, nodeResponse), 'text/event-stream');
    },
  };
}
