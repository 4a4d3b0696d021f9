import { createPubSub } from 'graphql-yoga';
import pg from 'pg';

/** Topics carry small JSON payloads; subscribers load what they show from the database. */
export type EventPayload = Record<string, unknown>;

export interface Events {
  /** Delivers to subscribers on every Berth instance sharing this database. */
  publish(topic: string, payload: EventPayload): Promise<void>;
  subscribe(topic: string): AsyncIterable<EventPayload>;
  /**
   * Calls `handler` synchronously for every payload of `topic`, from this instance or another,
   * as it arrives (before the subscribers' iterators see it). Returns the function that stops it.
   */
  listen(topic: string, handler: (payload: EventPayload) => void): () => void;
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

/**
 * In-process pub/sub, bridged through PostgreSQL LISTEN/NOTIFY when the database is a real
 * server shared by several instances. The embedded PGlite is owned by one process, so local
 * delivery is the whole story there.
 */
export async function createEvents(opts: { databaseUrl?: string; schema?: string }): Promise<Events> {
  const local = createPubSub<Record<string, [EventPayload]>>();
  const handlers = new Map<string, Set<(payload: EventPayload) => void>>();
  const deliver = (topic: string, payload: EventPayload) => {
    for (const handler of handlers.get(topic) ?? []) handler(payload);
    local.publish(topic, payload);
  };
  const listen = (topic: string, handler: (payload: EventPayload) => void) => {
    const set = handlers.get(topic) ?? new Set();
    handlers.set(topic, set);
    set.add(handler);
    return () => void set.delete(handler);
  };
  if (!opts.databaseUrl) {
    return {
      publish: async (topic, payload) => deliver(topic, payload),
      subscribe: (topic) => local.subscribe(topic),
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
  listener.on('error', () => {
    receiving = false;
  });
  listener.on('end', () => {
    receiving = false;
  });
  listener.on('notification', (msg) => {
    if (msg.channel !== channel || !msg.payload) return;
    const { topic, payload } = JSON.parse(msg.payload) as { topic: string; payload: EventPayload };
    deliver(topic, payload);
  });
  await listener.query(`LISTEN "${channel}"`);
  receiving = true;
  return {
    publish: async (topic, payload) => {
      await sender.query('SELECT pg_notify($1, $2)', [channel, JSON.stringify({ topic, payload })]);
    },
    subscribe: (topic) => local.subscribe(topic),
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
