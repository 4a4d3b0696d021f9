// Every Prometheus metric Berth and `berth node` expose (docs/operations.md, "Metrics"). Each
// instance gets its own registry: tests run several servers in one process, and prom-client's
// global registry would refuse the second definition and mix their counts. Labels are bounded:
// route templates, states, catalog names; never ids, emails or secrets.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { LIVE_STATES } from '../kernel/environment-states';
import type { Prisma } from '../platform/db';

/** Lease to ready: a hot start is seconds, a pulled image minutes. */
const START_BUCKETS = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];
/** Container operations: a start in tens of milliseconds, an image pull in minutes. */
const OPERATION_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

export interface Metrics {
  registry: Registry;
  httpRequests: Counter<'route' | 'method' | 'status'>;
  httpDuration: Histogram<'route' | 'method'>;
  environmentStart: Histogram<'template' | 'pool'>;
  /**
   * Subscriptions open on this instance, counted at scrape time by the transport that holds them
   * (`websocket`: graphql-ws, src/edges/graphql/ws.ts; `sse`: src/edges/graphql/yoga.ts).
   */
  subscriptions: Map<'websocket' | 'sse', () => number>;
  /** Artifact bytes through this instance: `upload` or `download`. */
  artifactBytes: Counter<'direction'>;
  webhookDeliveries: Counter<'outcome'>;
}

type Counts = { labels: Record<string, string>; n: number }[];

/** Adds up rows by the labels each gets: several rows may fall on one sample. */
function tally<T>(rows: T[], labels: (row: T) => Record<string, string>, n: (row: T) => number): Counts {
  const counts = new Map<string, Counts[number]>();
  for (const row of rows) {
    const l = labels(row);
    const key = JSON.stringify(l);
    const seen = counts.get(key) ?? { labels: l, n: 0 };
    seen.n += n(row);
    counts.set(key, seen);
  }
  return [...counts.values()];
}

/**
 * The server's metrics. The gauges every instance answers alike (environments, nodes, slots) are
 * one grouped query each at scrape time, so they never drift.
 */
export function createMetrics(prisma: Prisma): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  const fromDatabase = (name: string, help: string, labelNames: string[], read: () => Promise<Counts>) =>
    new Gauge({
      name,
      help,
      labelNames,
      registers,
      async collect() {
        // The database not answering leaves the family empty: the rest of the scrape still comes.
        const counts = await read().catch(() => []);
        this.reset();
        for (const { labels, n } of counts) this.set(labels, n);
      },
    });
  fromDatabase(
    'berth_environments',
    'Environments not yet ended, by state, template and pool (from the database).',
    ['state', 'template', 'pool'],
    async () => {
      // Ended environments (stopped, failed) are kept for history and would make every scrape
      // scan them all.
      const rows = await prisma.environment.groupBy({
        by: ['state', 'template', 'pool'],
        where: { state: { in: [...LIVE_STATES] } },
        _count: { _all: true },
      });
      return tally(
        rows,
        (r) => ({ state: r.state, template: r.template, pool: r.pool }),
        (r) => r._count._all,
      );
    },
  );
  fromDatabase(
    'berth_nodes',
    'Remote build machines (berth node) not removed, by pool and state: online, draining, offline or lost (from the database).',
    ['pool', 'state'],
    async () => {
      const rows = await prisma.remoteNode.groupBy({ by: ['pool', 'state', 'draining'], where: { revoked: null }, _count: { _all: true } });
      // The same states GET /v1/nodes shows (src/modules/nodes/service.ts stateOf).
      const stateOf = (r: (typeof rows)[number]) =>
        r.draining || r.state === 'leaving' ? 'draining' : r.state === 'online' || r.state === 'offline' ? r.state : 'lost';
      return tally(
        rows,
        (r) => ({ pool: r.pool, state: stateOf(r) }),
        (r) => r._count._all,
      );
    },
  );
  fromDatabase(
    'berth_node_slots',
    'Slots (the built-in node’s hot nodes and other nodes’ slots), by pool and state: busy or idle (from the database).',
    ['pool', 'state'],
    async () => {
      const rows = await prisma.node.groupBy({ by: ['pool', 'environmentId'], _count: { _all: true } });
      return tally(
        rows,
        (r) => ({ pool: r.pool, state: r.environmentId ? 'busy' : 'idle' }),
        (r) => r._count._all,
      );
    },
  );
  fromDatabase(
    'berth_warm_containers',
    'Warm containers slots keep for templates (`warm`), by pool, template and state: starting, ready or failed (from the database).',
    ['pool', 'template', 'state'],
    async () => {
      const rows = await prisma.node.groupBy({
        by: ['pool', 'warmTemplate', 'warmState'],
        where: { warmState: { not: null } },
        _count: { _all: true },
      });
      return tally(
        rows,
        (r) => ({ pool: r.pool, template: r.warmTemplate ?? '', state: r.warmState ?? '' }),
        (r) => r._count._all,
      );
    },
  );
  const subscriptions = new Map<'websocket' | 'sse', () => number>();
  new Gauge({
    name: 'berth_subscriptions',
    help: 'GraphQL subscriptions open on this instance, by transport: websocket or sse.',
    labelNames: ['transport'],
    registers,
    collect() {
      for (const [transport, count] of subscriptions) this.set({ transport }, count());
    },
  });
  return {
    registry,
    subscriptions,
    httpRequests: new Counter({
      name: 'berth_http_requests_total',
      help: 'HTTP requests answered, by route template, method and status.',
      labelNames: ['route', 'method', 'status'],
      registers,
    }),
    httpDuration: new Histogram({
      name: 'berth_http_request_duration_seconds',
      help: 'Time from a request’s arrival to the end of its answer, by route template and method.',
      labelNames: ['route', 'method'],
      registers,
    }),
    environmentStart: new Histogram({
      name: 'berth_environment_start_duration_seconds',
      help: 'Time from an environment’s lease (creation) to ready, by template and pool.',
      labelNames: ['template', 'pool'],
      buckets: START_BUCKETS,
      registers,
    }),
    artifactBytes: new Counter({
      name: 'berth_artifact_bytes_total',
      help: 'Artifact bytes through this instance, by direction: upload or download.',
      labelNames: ['direction'],
      registers,
    }),
    webhookDeliveries: new Counter({
      name: 'berth_webhook_deliveries_total',
      help: 'Webhook delivery attempts, by outcome.',
      labelNames: ['outcome'],
      registers,
    }),
  };
}

export interface NodeMetrics {
  registry: Registry;
  /** Container engine operations (create, start, remove, …) by outcome: ok or error. */
  containerOperations: Counter<'operation' | 'outcome'>;
  containerDuration: Histogram<'operation'>;
  slots: Gauge;
}

/** `berth node`'s metrics (--metrics-port); `slotsInUse` is read at scrape time. */
export function createNodeMetrics(slotsInUse: () => number): NodeMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  new Gauge({
    name: 'berth_node_slots_in_use',
    help: 'Slots holding an environment (prepared or being prepared, not yet released).',
    registers,
    collect() {
      this.set(slotsInUse());
    },
  });
  return {
    registry,
    containerOperations: new Counter({
      name: 'berth_node_container_operations_total',
      help: 'Container engine operations, by operation and outcome: ok or error.',
      labelNames: ['operation', 'outcome'],
      registers,
    }),
    containerDuration: new Histogram({
      name: 'berth_node_container_operation_duration_seconds',
      help: 'Container engine operation durations, by operation.',
      labelNames: ['operation'],
      buckets: OPERATION_BUCKETS,
      registers,
    }),
    slots: new Gauge({ name: 'berth_node_slots', help: 'Slots this node holds (--slots).', registers }),
  };
}
