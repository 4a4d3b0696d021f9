/**
 * The fan-out peer: a stock GraphQL server with in-memory pub/sub, as its libraries' own examples
 * build one. graphql-ws `useServer` with graphql-js's parse/validate/subscribe/execute over `ws`, and
 * graphql-yoga on the same port for SSE (distinct connections), both fed by yoga's `createPubSub`.
 * Its subscription type serves exactly the fields Berth's `environments` subscription selects, so
 * the same clients send the same document; every event is a copy of a real environment of Berth's
 * (taken from Berth in the same run) with its own id, stamped (`at`) right before it is published.
 * Answers `publish`, `usage`, `profileStart`/`profileStop` and `stop`.
 */
import { setMaxListeners } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { buildSchema } from 'graphql';
import { useServer } from 'graphql-ws/use/ws';
import { createPubSub, createYoga } from 'graphql-yoga';
import { WebSocketServer } from 'ws';
import { measuringHandlers, serve, wallMs } from './common';

const SDL = `
  scalar DateTime
  scalar JSONObject
  enum EnvironmentState { failed pending ready starting stopped stopping }
  enum ShareDirection { in out }
  type Export { listen: String! service: String! target: String! }
  type Share { direction: ShareDirection! envPath: String! files: [String!]! localPath: String! name: String! }
  type Restored { created: DateTime! files: Int! key: String! root: String! }
  type Environment {
    id: ID! name: String! template: String! state: EnvironmentState! node: String sandbox: String pool: String!
    labels: JSONObject! project: String! readyMs: Int error: String createdBy: String! created: DateTime!
    ready: DateTime stopped: DateTime expires: DateTime! idleUntil: DateTime! idle: String! hard: String!
    exports: [Export!]! shares: [Share!]! snapshot: String restored: Restored
  }
  type Query { ok: Boolean }
  type Subscription { environments: Environment! }`;

// createPubSub is an EventTarget with a listener per subscriber; thousands are the point here.
setMaxListeners(0);
const pubsub = createPubSub<{ environments: [Record<string, unknown>] }>();
const schema = buildSchema(SDL);
const environments = schema.getSubscriptionType()!.getFields().environments!;
environments.subscribe = () => pubsub.subscribe('environments');
environments.resolve = (payload) => payload;

let server: Server | undefined;
let dispose: (() => Promise<void> | void) | undefined;
let sample: Record<string, unknown> = {};

serve({
  ...measuringHandlers(),
  async start(p: { sample: Record<string, unknown> }) {
    sample = p.sample;
    const yoga = createYoga({ schema, graphiql: false, landingPage: false, logging: false });
    server = createServer(yoga);
    const wss = new WebSocketServer({ server, path: '/graphql' });
    dispose = useServer({ schema }, wss).dispose;
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, pid: process.pid };
  },
  publish(p: { id: string; name: string }) {
    const at = wallMs();
    pubsub.publish('environments', { ...sample, id: p.id, name: p.name, state: 'pending' });
    return at;
  },
  async stop() {
    await dispose?.();
    server?.closeAllConnections();
    setImmediate(() => process.exit(0));
  },
});
