import pg from 'pg';

/** Topics carry small JSON payloads; subscribers load what they show from the database. */
type EventPayload = object;

declare const payloadOf: unique symbol;
/**
 * A topic name built by `topics` (the only place that spells them), carrying the type of what is
 * published on it: a misspelled topic or the wrong payload does not compile.
 */
export type Topic<P extends EventPayload> = string & { readonly [payloadOf]: P };
const topic = <P extends EventPayload>(name: string) => name as Topic<P>;

/** Every topic family and the payload published on it. */
export const topics = {
  /** An organization's environments changed: subscribers read the event log (seq > last). */
  environments: (orgId: string) => topic<Record<string, never>>(`org:${orgId}:environments`),
  /** A node's state after a change. */
  nodes: (orgId: string) =>
    topic<{ id: string; name: string; state: 'online' | 'lost' | 'draining' | 'offline' | 'removed' }>(`org:${orgId}:nodes`),
  /**
   * A node finished taking up its welcome (it held again or wiped what it found, and said which warm
   * containers it keeps): the built-in node's supervisor waits for it at start.
   */
  nodeSettled: (nodeId: string) => topic<Record<string, never>>(`node-settled:${nodeId}`),
  /** A token or key created or revoked. */
  credentials: (orgId: string) => topic<{ kind: 'token' | 'key'; action: 'created' | 'revoked'; id: string }>(`org:${orgId}:credentials`),
  /** Every instance's credential cache: what to forget or lock; `nonce` lets the sender hear its echo. */
  credentialCache: () =>
    topic<{ credentials?: string[]; sandbox?: string; blocked?: { address: string; until: number }; nonce?: string }>('berth:credentials'),
  /** A command recorded for the environment. */
  execs: (environmentId: string) => topic<{ id: number }>(`env:${environmentId}:execs`),
  /** A usage sample recorded for the environment (`sampled` as ISO text). */
  usage: (environmentId: string) =>
    topic<{ cpu: number | null; memory: number | null; pids: number | null; disk: number; sampled: string }>(`env:${environmentId}:usage`),
  /** Pieces were added to the environment's log (docs/environments.md, "Lifecycle commands and the environment's log"). */
  environmentLog: (environmentId: string) => topic<Record<string, never>>(`env:${environmentId}:log`),
  /** The sandbox's configuration changed to this version. */
  sandboxConfig: (sandboxId: string) => topic<{ version: number }>(`sandbox:${sandboxId}:config`),
};

/**
 * The node control channel's topics. What they carry are the channel's messages
 * (src/protocol/node-channel.ts), which the platform does not know: src/protocol/node-bus.ts binds
 * them, once, to those types.
 */
export const nodeTopicsOf = <ToNode extends EventPayload, Reply extends EventPayload, Exec extends EventPayload>() => ({
  /** Messages for the node, forwarded by the instance holding its control channel. */
  node: (nodeId: string) => topic<ToNode>(`node:${nodeId}`),
  /** A node's answer to one question; null when `name` is not such a topic (a node sent it). */
  nodeReply: (name: string) => (name.startsWith('node-reply:') ? topic<Reply>(name) : null),
  /** A command's output, input credit and exit, from the node that runs it. */
  exec: (nodeId: string, run: string) => topic<Exec>(`exec:${nodeId}:${run}`),
});

export interface Events {
  /** Delivers to subscribers on every Berth instance sharing this database. */
  publish<P extends EventPayload>(topic: Topic<P>, payload: P): Promise<void>;
  /**
   * Delivers to a topic that one subscriber listens on (a command's events, a node's inbox, an
   * answer): straight to it when it listens in this process, without a round trip through the
   * database; through the database like publish when it does not. Payloads sent to one topic
   * arrive in the order they were sent (through the database, two could otherwise cross).
   */
  send<P extends EventPayload>(topic: Topic<P>, payload: P): Promise<void>;
  subscribe<P extends EventPayload>(topic: Topic<P>): AsyncIterable<P>;
  /**
   * Calls `handler` synchronously for every payload of `topic`, from this instance or another,
   * as it arrives (before the subscribers' iterators see it). Returns the function that stops it.
   */
  listen<P extends EventPayload>(topic: Topic<P>, handler: (payload: P) => void): () => void;
  /**
   * True while payloads published by other instances are being received: always on the embedded
   * database (one instance), and on PostgreSQL until the LISTEN connection fails. What caches
   * state of the database must not trust its cache while this is false.
   */
  receiving(): boolean;
  /** Whether other instances can publish (a shared PostgreSQL) or this process is the only one. */
  readonly shared: boolean;
  close(): Promise<void>;
}

const CHANNEL = 'berth_events';
/** Payloads a subscriber may leave unread before it is dropped (its iteration then fails). */
export const MAX_UNREAD = 1024;

/** A subscriber that left MAX_UNREAD payloads unread: it is dropped, never the publisher. */
export class SubscriberOverflowError extends Error {}

/**
 * One subscription of the local pub/sub: listening starts with the first next(), payloads wait in
 * a bounded queue, and a full queue ends this subscription with SubscriberOverflowError instead
 * of throwing into whoever published (a listener of PostgreSQL's notifications: that would end
 * the process).
 */
class Subscription implements AsyncIterableIterator<EventPayload> {
  private readonly queue: EventPayload[] = [];
  private readonly waiting: ((r: IteratorResult<EventPayload>) => void)[] = [];
  private started = false;
  private ended = false;
  private failure: Error | undefined;

  constructor(
    private readonly attach: (s: Subscription) => void,
    private readonly detach: (s: Subscription) => void,
  ) {}

  [Symbol.asyncIterator]() {
    return this;
  }

  next(): Promise<IteratorResult<EventPayload>> {
    if (!this.started && !this.ended) {
      this.started = true;
      this.attach(this);
    }
    const queued = this.queue.shift();
    if (queued) return Promise.resolve({ value: queued, done: false });
    if (this.failure) {
      const failure = this.failure;
      this.failure = undefined;
      return Promise.reject(failure);
    }
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  return(): Promise<IteratorResult<EventPayload>> {
    this.end();
    this.queue.length = 0;
    return Promise.resolve({ value: undefined, done: true });
  }

  push(payload: EventPayload): void {
    if (this.ended) return;
    const waiting = this.waiting.shift();
    if (waiting) waiting({ value: payload, done: false });
    else if (this.queue.length < MAX_UNREAD) this.queue.push(payload);
    else this.overflow();
  }

  private overflow(): void {
    this.end();
    this.queue.length = 0;
    this.failure = new SubscriberOverflowError(`this subscription fell behind: more than ${MAX_UNREAD} events unread`);
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    this.detach(this);
    for (const waiting of this.waiting.splice(0)) waiting({ value: undefined, done: true });
  }
}

/** In-process topics: subscribers with bounded queues, handlers called synchronously. */
function localTopics(log: (message: string, error: unknown) => void) {
  const subscribers = new Map<string, Set<Subscription>>();
  const handlers = new Map<string, Set<(payload: EventPayload) => void>>();
  const deliver = (topic: string, payload: EventPayload) => {
    for (const handler of handlers.get(topic) ?? []) {
      // A handler's fault is its own: it must not stop the others or reach the publisher.
      try {
        handler(payload);
      } catch (error) {
        log(`a handler of ${topic} failed`, error);
      }
    }
    for (const subscriber of subscribers.get(topic) ?? []) subscriber.push(payload);
  };
  const subscribe = (topic: string): AsyncIterable<EventPayload> =>
    new Subscription(
      (s) => {
        const set = subscribers.get(topic) ?? new Set();
        subscribers.set(topic, set);
        set.add(s);
      },
      (s) => {
        const set = subscribers.get(topic);
        set?.delete(s);
        if (set?.size === 0) subscribers.delete(topic);
      },
    );
  const listen = (topic: string, handler: (payload: EventPayload) => void) => {
    const set = handlers.get(topic) ?? new Set();
    handlers.set(topic, set);
    set.add(handler);
    return () => {
      set.delete(handler);
      if (set.size === 0) handlers.delete(topic);
    };
  };
  const heard = (topic: string) => subscribers.has(topic) || handlers.has(topic);
  // The one place payloads meet their topic's type: what is published on a Topic<P> is a P
  // (publish takes only that), and JSON through NOTIFY keeps its shape.
  return { deliver, heard, subscribe: subscribe as Events['subscribe'], listen: listen as Events['listen'] };
}

/**
 * In-process pub/sub, bridged through PostgreSQL LISTEN/NOTIFY when the database is a real
 * server shared by several instances. The embedded PGlite is owned by one process, so local
 * delivery is the whole story there.
 */
export async function createEvents(opts: {
  databaseUrl?: string;
  schema?: string;
  log?: (message: string, error: unknown) => void;
}): Promise<Events> {
  const { deliver, heard, subscribe, listen } = localTopics(opts.log ?? (() => undefined));
  if (!opts.databaseUrl) {
    return {
      publish: async (topic, payload) => deliver(topic, payload),
      send: async (topic, payload) => deliver(topic, payload),
      subscribe,
      listen,
      receiving: () => true,
      shared: false,
      close: async () => undefined,
    };
  }
  // The channel is per schema so test runs (and tenants of one server) never hear each other.
  const channel = opts.schema ? `${CHANNEL}_${opts.schema}` : CHANNEL;
  const listener = new pg.Client({ connectionString: opts.databaseUrl });
  const sender = new pg.Pool({ connectionString: opts.databaseUrl, max: 2 });
  let receiving = false;
  await listener.connect();
  // A lost LISTEN connection means other instances' payloads no longer arrive (receiving() says so).
  // Its 'error' is left unheard, as before: it ends the process.
  listener.on('end', () => {
    receiving = false;
  });
  listener.on('notification', (msg) => {
    if (msg.channel !== channel || !msg.payload) return;
    let message: { topic: string; payload: EventPayload };
    try {
      message = JSON.parse(msg.payload);
    } catch (error) {
      return opts.log?.('a notification that is not JSON was ignored', error);
    }
    deliver(message.topic, message.payload);
  });
  await listener.query(`LISTEN "${channel}"`);
  receiving = true;
  const publish: Events['publish'] = async (topic, payload) => {
    await sender.query('SELECT pg_notify($1, $2)', [channel, JSON.stringify({ topic, payload })]);
  };
  // Each topic's sends still on their way, last first: a later one waits for it (send's order).
  const tails = new Map<string, Promise<void>>();
  const send: Events['send'] = (topic, payload) => {
    const tail = tails.get(topic);
    if (!tail && heard(topic)) return Promise.resolve(deliver(topic, payload));
    const sent = (tail ?? Promise.resolve()).then(() => (heard(topic) ? deliver(topic, payload) : publish(topic, payload)));
    const settled = sent.catch(() => undefined);
    tails.set(topic, settled);
    void settled.then(() => {
      if (tails.get(topic) === settled) tails.delete(topic);
    });
    return sent;
  };
  return {
    publish,
    send,
    subscribe,
    listen,
    receiving: () => receiving,
    shared: true,
    close: async () => {
      receiving = false;
      await listener.end().catch(() => undefined);
      await sender.end().catch(() => undefined);
    },
  };
}
