import type { Background } from '../kernel/background';
import type { EnvironmentEnds } from '../kernel/environment-ends';
import type { CredentialCache } from '../modules/credentials';
import type { Catalog } from '../modules/templates';
import type { Metrics } from '../observability/metrics';
import type { Clock } from '../platform/clock';
import type { Database, Prisma } from '../platform/db';
import type { Events } from '../platform/events';
import type { BlobStore } from '../platform/store';
import type { Config } from './config';

/** Where a part of the server reports what went wrong beside a request (pino in production, src/observability/log.ts). */
export type Log = (message: string, err?: unknown) => void;

/** What services need from the running process: one instance per server. */
export interface Deps {
  config: Config;
  /** The server's log, for what a background job finds wrong (a warning, or an error with `err`). */
  log: Log;
  db: Database;
  prisma: Prisma;
  clock: Clock;
  events: Events;
  /** Credentials that authenticated, kept current through `events` (src/modules/credentials/cache.ts). */
  credentials: CredentialCache;
  store: BlobStore;
  /** Wraps every project data key; never leaves the process. */
  masterKey: Buffer;
  background: Background;
  /** Pools and catalog templates from TEMPLATES_FILE. */
  catalog: Catalog;
  /** The built-in pool's node: who it is (src/modules/nodes/builtin-node.ts). */
  builtin: BuiltinNode;
  /** How the node side ends environments: the environments module's (src/kernel/environment-ends.ts). */
  ends: EnvironmentEnds;
  /** This instance's Prometheus registry and metrics (src/observability/metrics.ts). */
  metrics: Metrics;
}

/** The deployment's built-in node, run by the server as a process of its own (src/app/builtin-supervisor.ts). */
export interface BuiltinNode {
  /** Its RemoteNode id: the same for every instance of the deployment. */
  id: string;
  /** The label of its containers (`berth.owner`). */
  owner: string;
}

/** Who is calling: resolved from the bearer credential before any resolver runs. */
export interface Actor {
  orgId: string;
  kind: 'person' | 'apiKey' | 'sandbox' | 'node';
  credentialId: string;
  personId?: string;
  sandboxId?: string;
  /** A node agent's credential: its RemoteNode. */
  nodeId?: string;
  admin: boolean;
  /** What `createdBy` and exec `actor` show: the person's email or the API key's name. */
  name: string;
  /** When the credential expires (ms since the epoch); absent: never. Open streams end then. */
  expires?: number;
  /**
   * The address of the request that presented the credential, as the 429 lock counts it: what
   * audit events record (src/modules/audit/service.ts). Set by `authenticate`, for every edge at once.
   */
  address: string;
}

/** What a resolver or REST handler gets: the same from every edge (REST, GraphQL over HTTP and WebSocket). */
export interface Context {
  deps: Deps;
  actor: Actor;
  /** The client's address (TRUST_PROXY decides whether X-Forwarded-For names it); the 429 lock counts by it. */
  clientAddress: string;
  /**
   * Set by the GraphQL fan-out (src/edges/graphql/fanout.ts) when it asks a shareable subscription field
   * for its source: the field then answers a SharedSource instead of an iterator of its own.
   */
  shareSubscription?: boolean;
  /**
   * Bytes of this operation's connection not yet sent (a WebSocket's or an SSE response's); a
   * subscription that makes output faster than its subscriber reads (runCommand) waits on it.
   */
  unsent?: () => number;
}
