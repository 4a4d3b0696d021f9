import { createPubSub } from 'graphql-yoga';
import pg from 'pg';

/** Topics carry small JSON payloads; subscribers load what they show from the database. */
export type EventPayload = Record<string, unknown>;

export interface Events {
  /** Delivers to subscribers on every Berth instance sharing this database. */
  publish(topic: string, payload: EventPayload): Promise<void>;
  subscribe(topic: string): AsyncIterable<EventPayload>;
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
  if (!opts.databaseUrl) {
    return {
      publish: async (topic, payload) => local.publish(topic, payload),
      subscribe: (topic) => local.subscribe(topic),
      close: async () => undefined,
    };
  }
  // The channel is per schema so test runs (and tenants of one server) never hear each other.
  const channel = opts.schema ? `${CHANNEL}_${opts.schema}` : CHANNEL;
  const listener = new pg.Client({ connectionString: opts.databaseUrl });
  const sender = new pg.Pool({ connectionString: opts.databaseUrl, max: 2 });
  await listener.connect();
  listener.on('notification', (msg) => {
    if (msg.channel !== channel || !msg.payload) return;
    const { topic, payload } = JSON.parse(msg.payload) as { topic: string; payload: EventPayload };
    local.publish(topic, payload);
  });
  await listener.query(`LISTEN "${channel}"`);
  return {
    publish: async (topic, payload) => {
      await sender.query('SELECT pg_notify($1, $2)', [channel, JSON.stringify({ topic, payload })]);
    },
    subscribe: (topic) => local.subscribe(topic),
    close: async () => {
      await listener.end().catch(() => undefined);
      await sender.end().catch(() => undefined);
    },
  };
}
