/**
 * Environments benchmark (issue 3): one command, one run, ratios against a baseline measured in
 * the same run because the machines here are noisy.
 *
 *   npm run bench:environments
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:environments
 *
 * Berth and the baseline (node:http + pg reading the same row of the same database) run in this
 * process; the load generator (autocannon) and the graphql-ws subscribers run in child processes so
 * they never share Berth's event loop, but they do share the machine's two cores.
 * Knobs: BENCH_SECONDS (10), BENCH_WARMUP_SECONDS (2), BENCH_CONNECTIONS (32),
 * BENCH_SUBSCRIBERS (1000), BENCH_ROUNDS (3), BENCH_PHASES (http,subscriptions),
 * BENCH_BACKENDS (pglite, plus postgres when BENCH_DATABASE_URL is set).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { type Client, createClient } from 'graphql-ws';
import pg from 'pg';
import { WebSocket } from 'ws';
import type { App } from '../src/server';

const SELF = fileURLToPath(import.meta.url);
const TOKEN = 'bct_bench-environments-0123456789abcdef';

function knob(name: string, fallback: number): number {
  const raw = process.env[name];
  const n = raw ? Number(raw) : fallback;
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, got "${raw}"`);
  return n;
}

const ENV_FIELDS = `id name template state node sandbox pool labels project readyMs error createdBy
  created ready stopped expires idleUntil idle hard
  exports { service listen target } shares { name direction envPath localPath files }
  snapshot restored { key root files created }`;
const QUERY = `query Environment($id: String!) { environment(id: $id) { ${ENV_FIELDS} } }`;
const SUBSCRIPTION = `subscription Environments { environments { ${ENV_FIELDS} } }`;
const STATE_ORDER: Record<string, number> = { pending: 0, starting: 1, ready: 2, stopping: 3, stopped: 4, failed: 4 };

// ---------------------------------------------------------------------------------------------
// Child processes

interface LoadOptions {
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  connections: number;
  seconds: number;
}

interface LoadResult {
  ok: number;
  seconds: number;
  failed: number;
  p50: number;
  p99: number;
}

function percentile(sorted: Float64Array | number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Child: runs autocannon once and reports exact latencies (its own histogram keeps whole ms only). */
function loadChild(): void {
  process.once('message', (opts: LoadOptions) => {
    const latencies: number[] = [];
    let failed = 0;
    const instance = autocannon(
      {
        url: opts.url,
        method: opts.method,
        headers: opts.headers,
        body: opts.body,
        connections: opts.connections,
        duration: opts.seconds,
      },
      (err, result) => {
        if (err) throw err;
        const sorted = Float64Array.from(latencies).sort();
        const report: LoadResult = {
          ok: latencies.length,
          seconds: result.duration,
          failed: failed + result.errors + result.timeouts,
          p50: percentile(sorted, 50),
          p99: percentile(sorted, 99),
        };
        process.send!(report, () => process.exit(0));
      },
    );
    instance.on('response', (_client, status, _bytes, ms) => {
      if (status >= 200 && status < 300) latencies.push(ms);
      else failed++;
    });
  });
}

type SubscriberMessage =
  | { type: 'connected'; ms: number }
  | { type: 'alive' }
  | { type: 'complete'; key: string }
  | { type: 'error'; message: string }
  | { type: 'report'; receipts: Record<string, number[]>; duplicates: Record<string, number>; outOfOrder: Record<string, number> };

function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  const close = err as { code?: number; reason?: string };
  return close.code !== undefined ? `socket closed ${close.code} ${close.reason ?? ''}` : JSON.stringify(err);
}

/**
 * Child: N graphql-ws clients, each subscribed to every environment change of the organization.
 * Records when each (environment, state) reaches each subscriber, and tells the parent once all
 * subscribers have one, so the parent can pace the rounds.
 */
function subscriberChild(): void {
  const wall = () => performance.timeOrigin + performance.now();
  const receipts = new Map<string, number[]>();
  const duplicates: Record<string, number> = {};
  const outOfOrder: Record<string, number> = {};
  const clients: Client[] = [];
  let count = 0;
  let alive = 0;
  const send = (msg: SubscriberMessage) => process.send!(msg);

  function subscriber(client: Client): void {
    const seen = new Set<string>();
    const last = new Map<string, number>();
    client.subscribe<{ environments: { id: string; state: string } }>(
      { query: SUBSCRIPTION },
      {
        next: ({ data, errors }) => {
          const at = wall();
          if (errors?.length || !data) return send({ type: 'error', message: JSON.stringify(errors) });
          const { id, state } = data.environments;
          const key = `${id} ${state}`;
          if (seen.size === 0 && ++alive === count) send({ type: 'alive' });
          if (seen.has(key)) {
            duplicates[key] = (duplicates[key] ?? 0) + 1;
            return;
          }
          seen.add(key);
          const order = STATE_ORDER[state] ?? -1;
          if (order <= (last.get(id) ?? -1)) outOfOrder[id] = (outOfOrder[id] ?? 0) + 1;
          last.set(id, order);
          const times = receipts.get(key) ?? [];
          receipts.set(key, times);
          times.push(at);
          if (times.length === count) send({ type: 'complete', key });
        },
        error: (err) => send({ type: 'error', message: describe(err) }),
        complete: () => undefined,
      },
    );
  }

  process.on('disconnect', () => process.exit(0));
  process.on('message', async (msg: { type: 'start'; url: string; token: string; count: number } | { type: 'report' }) => {
    if (msg.type === 'report') {
      for (const client of clients) await client.dispose();
      // The report is large: leave only once it has been handed over.
      process.send!({ type: 'report', receipts: Object.fromEntries(receipts), duplicates, outOfOrder }, () => process.exit(0));
      return;
    }
    count = msg.count;
    const started = performance.now();
    // Batches keep the connection burst (and its 1,000 authentications) from timing out.
    for (let i = 0; i < msg.count; i += 50) {
      const batch = Array.from({ length: Math.min(50, msg.count - i) }, () => {
        const client = createClient({
          url: `${msg.url.replace(/^http/, 'ws')}/graphql`,
          webSocketImpl: WebSocket,
          connectionParams: { authorization: `Bearer ${msg.token}` },
          lazy: false,
          retryAttempts: 0,
          onNonLazyError: (err) => send({ type: 'error', message: describe(err) }),
        });
        clients.push(client);
        return new Promise<void>((resolve, reject) => {
          client.on('connected', () => resolve());
          client.on('closed', (event) => reject(new Error(`subscriber closed: ${JSON.stringify(event)}`)));
        });
      });
      await Promise.all(batch);
    }
    for (const client of clients) subscriber(client);
    send({ type: 'connected', ms: performance.now() - started });
  });
}

// ---------------------------------------------------------------------------------------------
// Parent

interface HttpRow {
  backend: string;
  what: string;
  reqPerSec: number;
  p50: number;
  p99: number;
  failed: number;
  baseline?: { reqPerSec: number; p99: number };
}

interface SubscriptionRow {
  backend: string;
  subscribers: number;
  events: number;
  expected: number;
  delivered: number;
  duplicates: number;
  errors: number;
  outOfOrder: number;
  p50: number;
  p99: number;
  max: number;
  connectMs: number;
}

function spawnChild(role: '--load' | '--subscribers'): ChildProcess {
  return fork(SELF, [role], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
}

function runLoad(opts: LoadOptions): Promise<LoadResult> {
  const child = spawnChild('--load');
  return new Promise((resolve, reject) => {
    child.once('message', (result: LoadResult) => resolve(result));
    child.once('exit', (code) => (code === 0 ? undefined : reject(new Error(`load generator exited with ${code}`))));
    child.send(opts);
  });
}

/** The baseline: no authentication, no GraphQL, one parameterised SELECT, the row as JSON. */
async function startBaseline(pool: pg.Pool): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer(async (req, res) => {
    try {
      const id = decodeURIComponent((req.url ?? '').slice('/v1/environments/'.length));
      const { rows } = await pool.query('SELECT * FROM "Environment" WHERE id = $1', [id]);
      res.writeHead(rows.length ? 200 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify(rows[0] ?? { error: 'not found' }));
    } catch (error) {
      res.writeHead(500).end(String(error));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

function api(app: App) {
  return async <T = any>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> => {
    const res = await fetch(app.url + path, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: (await res.json()) as T };
  };
}

async function createEnvironment(app: App, labels: Record<string, string>): Promise<string> {
  const res = await api(app)<{ environment: { id: string } }>('POST', '/v1/environments', { template: 'default', labels });
  if (res.status !== 202) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body.environment.id;
}

/**
 * DELETE until the answer is stopping or stopped. A DELETE that races a transition of the hot pool
 * (pending → starting) has been seen to answer 200 with the environment still live, and then never
 * stop it (on PostgreSQL); the benchmark retries so that the measurement goes on, and says how
 * often it had to.
 */
let lostStops = 0;
async function stopEnvironment(app: App, id: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const res = await api(app)<{ environment: { state: string } }>('DELETE', `/v1/environments/${id}`);
    if (res.status !== 200) throw new Error(`DELETE answered ${res.status}: ${JSON.stringify(res.body)}`);
    if (['stopping', 'stopped', 'failed'].includes(res.body.environment.state)) return;
    if (attempt === 0) lostStops++;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function waitFor(what: string, ms: number, check: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A warm-up run, then the measured one. */
async function measureTarget(target: Omit<LoadOptions, 'connections' | 'seconds'>) {
  const connections = knob('BENCH_CONNECTIONS', 32);
  await runLoad({ ...target, connections, seconds: knob('BENCH_WARMUP_SECONDS', 2) });
  const r = await runLoad({ ...target, connections, seconds: knob('BENCH_SECONDS', 10) });
  return { reqPerSec: r.ok / r.seconds, p50: r.p50, p99: r.p99, failed: r.failed };
}

/** What this machine and the load generator manage right now without any database: context for the absolute numbers. */
async function measureReference(): Promise<HttpRow> {
  const body = JSON.stringify({ ok: true });
  const server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(body));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = server.address() as AddressInfo;
    return {
      backend: '-',
      what: 'reference: node:http, no database',
      ...(await measureTarget({ url: `http://127.0.0.1:${port}/`, method: 'GET', headers: {} })),
    };
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

async function measureHttp(backend: string, app: App, baselineUrl: string, id: string): Promise<HttpRow[]> {
  const auth = { authorization: `Bearer ${TOKEN}` };
  const targets: Record<string, Omit<LoadOptions, 'connections' | 'seconds'>> = {
    baseline: { url: `${baselineUrl}/v1/environments/${id}`, method: 'GET', headers: {} },
    rest: { url: `${app.url}/v1/environments/${id}`, method: 'GET', headers: auth },
    graphql: {
      url: `${app.url}/graphql`,
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ query: QUERY, variables: { id } }),
    },
  };

  // Every target must answer the same environment before its speed means anything.
  for (const [name, t] of Object.entries(targets)) {
    const res = await fetch(t.url, { method: t.method, headers: t.headers, body: t.body });
    const body = (await res.json()) as { id?: string; data?: { environment?: { id?: string } } };
    if (res.status !== 200 || (body.id ?? body.data?.environment?.id) !== id) {
      throw new Error(`${name} answered ${res.status}: ${JSON.stringify(body)}`);
    }
  }

  const measure = (name: string) => measureTarget(targets[name]!);
  // The baseline brackets the Berth runs; its mean is the reference, so drift during the run
  // lands on both sides of the ratio.
  const before = await measure('baseline');
  const rest = await measure('rest');
  const graphql = await measure('graphql');
  const after = await measure('baseline');
  const baseline = {
    reqPerSec: (before.reqPerSec + after.reqPerSec) / 2,
    p50: (before.p50 + after.p50) / 2,
    p99: (before.p99 + after.p99) / 2,
    failed: before.failed + after.failed,
  };
  return [
    { backend, what: `baseline: node:http + pg (runs ${before.reqPerSec.toFixed(0)} / ${after.reqPerSec.toFixed(0)} req/s)`, ...baseline },
    { backend, what: 'REST  GET /v1/environments/{id}', ...rest, baseline },
    { backend, what: 'GraphQL POST /graphql environment(id)', ...graphql, baseline },
  ];
}

async function measureSubscriptions(backend: string, app: App): Promise<SubscriptionRow> {
  const count = knob('BENCH_SUBSCRIBERS', 1000);
  const child = spawnChild('--subscribers');
  try {
    return await driveSubscribers(backend, app, child, count);
  } finally {
    if (child.exitCode === null) child.kill();
  }
}

async function driveSubscribers(backend: string, app: App, child: ChildProcess, count: number): Promise<SubscriptionRow> {
  const rounds = knob('BENCH_ROUNDS', 3);
  const perRound = app.deps.catalog.pools.find((p) => p.name === 'default')?.hotNodes ?? 4;
  const completed = new Set<string>();
  let errors = 0;
  let allAlive = false;
  let report: Extract<SubscriberMessage, { type: 'report' }> | undefined;
  let connectMs: number | undefined;
  child.on('message', (msg: SubscriberMessage) => {
    if (msg.type === 'connected') connectMs = msg.ms;
    else if (msg.type === 'alive') allAlive = true;
    else if (msg.type === 'complete') completed.add(msg.key);
    else if (msg.type === 'report') report = msg;
    else if (errors++ < 5) console.error(`subscriber error: ${msg.message}`);
  });
  child.once('exit', (code, signal) => {
    if (!report) console.error(`the subscriber process ended early (${signal ?? code})`);
  });
  child.send({ type: 'start', url: app.url, token: TOKEN, count });
  await waitFor(`${count} subscribers to connect`, 120_000, () => connectMs !== undefined);

  // graphql-ws acknowledges no subscription: warm-up environments prove every subscriber is
  // listening (each has received an event), then end, before anything is measured.
  const warm: string[] = [];
  while (!allAlive) {
    if (warm.length >= 10) throw new Error('subscribers did not all receive a warm-up event');
    warm.push(await createEnvironment(app, { bench: 'warm-up' }));
    await waitFor('warm-up event', 10_000, () => allAlive).catch(() => undefined);
  }
  for (const id of warm) await stopEnvironment(app, id);
  await waitFor('warm-up environments to stop', 120_000, () => warm.every((id) => completed.has(`${id} stopped`)));

  const measured: string[] = [];
  const allHave = (ids: string[], state: string) => () => ids.every((id) => completed.has(`${id} ${state}`));
  for (let round = 0; round < rounds; round++) {
    const ids = await Promise.all(Array.from({ length: perRound }, () => createEnvironment(app, { bench: `round-${round}` })));
    measured.push(...ids);
    await waitFor(`round ${round}: ready at every subscriber`, 120_000, allHave(ids, 'ready')).catch((e) => console.error(String(e)));
    await Promise.all(ids.map((id) => stopEnvironment(app, id)));
    await waitFor(`round ${round}: stopped at every subscriber`, 120_000, allHave(ids, 'stopped')).catch((e) => console.error(String(e)));
  }
  child.send({ type: 'report' });
  await waitFor('the subscribers report', 60_000, () => report !== undefined);
  await new Promise((resolve) => (child.exitCode === null ? child.once('exit', resolve) : resolve(undefined)));

  // Every measured event is a row of the event log, written in its transition's transaction.
  const { rows } = await app.deps.db.pool.query<{ environmentId: string; state: string; at: Date }>(
    'SELECT "environmentId", state, at FROM "EnvironmentEvent" WHERE "environmentId" = ANY($1)',
    [measured],
  );
  const latencies: number[] = [];
  let duplicates = 0;
  for (const row of rows) {
    const key = `${row.environmentId} ${row.state}`;
    for (const received of report!.receipts[key] ?? []) latencies.push(received - row.at.getTime());
    duplicates += report!.duplicates[key] ?? 0;
  }
  latencies.sort((a, b) => a - b);
  return {
    backend,
    subscribers: count,
    events: rows.length,
    expected: rows.length * count,
    delivered: latencies.length,
    duplicates,
    errors,
    outOfOrder: measured.reduce((n, id) => n + (report!.outOfOrder[id] ?? 0), 0),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: latencies.at(-1) ?? NaN,
    connectMs: connectMs!,
  };
}

async function runBackend(backend: 'pglite' | 'postgres', phases: string[]): Promise<{ http: HttpRow[]; subscriptions?: SubscriptionRow }> {
  const dataDir = await mkdtemp(join(tmpdir(), 'berth-bench-'));
  const databaseUrl = backend === 'postgres' ? process.env.BENCH_DATABASE_URL! : '';
  const schema = backend === 'postgres' ? `berth_bench_${randomBytes(4).toString('hex')}` : '';
  let app: App | undefined;
  let ownPool: pg.Pool | undefined;
  let baseline: Awaited<ReturnType<typeof startBaseline>> | undefined;
  try {
    console.error(`[${backend}] starting Berth…`);
    // Berth as deployed: the schema reads NODE_ENV when it is built, at import.
    process.env.NODE_ENV ??= 'production';
    const { loadConfig } = await import('../src/config');
    const { startApp } = await import('../src/server');
    app = await startApp({
      config: loadConfig({
        ...process.env,
        PORT: '0',
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        BOOTSTRAP_TOKEN: TOKEN,
        DATABASE_URL: databaseUrl,
        DATABASE_SCHEMA: schema,
      }),
      log: (message, err) => console.error(`[berth] ${message}`, err ?? ''),
    });
    const result: { http: HttpRow[]; subscriptions?: SubscriptionRow } = { http: [] };
    if (phases.includes('http')) {
      const id = await createEnvironment(app, { bench: 'read' });
      await waitFor(
        'the environment to be ready',
        60_000,
        async () => (await api(app!)<{ state: string }>('GET', `/v1/environments/${id}`)).body.state === 'ready',
      );
      // PGlite's socket admits one connection and Berth's pool holds it, so on the embedded
      // default the baseline shares that very pool of one; on PostgreSQL it gets a pool like
      // Berth's (10 connections, same schema).
      ownPool =
        backend === 'postgres' ? new pg.Pool({ connectionString: databaseUrl, max: 10, options: `-c search_path=${schema}` }) : undefined;
      baseline = await startBaseline(ownPool ?? app.deps.db.pool);
      console.error(`[${backend}] HTTP reads…`);
      result.http = await measureHttp(backend, app, baseline.url, id);
      // Its node goes back to the pool for the subscription rounds.
      await stopEnvironment(app, id);
      await waitFor(
        'the environment to stop',
        60_000,
        async () => (await api(app!)<{ state: string }>('GET', `/v1/environments/${id}`)).body.state === 'stopped',
      );
    }
    if (phases.includes('subscriptions')) {
      console.error(`[${backend}] subscriptions…`);
      result.subscriptions = await measureSubscriptions(backend, app);
    }
    return result;
  } finally {
    await baseline?.close();
    await ownPool?.end();
    await app?.stop();
    if (schema) {
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    }
    await rm(dataDir, { recursive: true, force: true });
  }
}

/** A Markdown table (so it pastes into docs/benchmarks.md as is); the first `left` columns are text. */
function table(header: string[], rows: string[][], left: number): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => (i < left ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  return [
    line(header),
    `|${widths.map((w, i) => (i < left ? `-${'-'.repeat(w)}-` : `-${'-'.repeat(w)}:`)).join('|')}|`,
    ...rows.map(line),
  ].join('\n');
}

async function main(): Promise<void> {
  const backends = (process.env.BENCH_BACKENDS ?? `pglite${process.env.BENCH_DATABASE_URL ? ',postgres' : ''}`).split(',');
  for (const b of backends) {
    if (b !== 'pglite' && b !== 'postgres') throw new Error(`BENCH_BACKENDS: unknown backend "${b}"`);
    if (b === 'postgres' && !process.env.BENCH_DATABASE_URL) throw new Error('the postgres backend needs BENCH_DATABASE_URL');
  }
  const phases = (process.env.BENCH_PHASES ?? 'http,subscriptions').split(',');
  const loadBefore = loadavg()[0]!;
  const reference = phases.includes('http') ? [await measureReference()] : [];
  const results = [];
  for (const backend of backends) results.push(await runBackend(backend as 'pglite' | 'postgres', phases));

  const ms = (n: number) => n.toFixed(2);
  console.log(
    `\nBerth environments benchmark: Node ${process.version}, ${availableParallelism()} cores, ` +
      `${knob('BENCH_CONNECTIONS', 32)} keep-alive connections, ${knob('BENCH_WARMUP_SECONDS', 2)} s warm-up + ` +
      `${knob('BENCH_SECONDS', 10)} s per run, load generator (autocannon) in a child process; ` +
      `NODE_ENV=${process.env.NODE_ENV}; 1-minute load average ${loadBefore.toFixed(1)} at start, ${loadavg()[0]!.toFixed(1)} at end\n`,
  );
  const http = [...reference, ...results.flatMap((r) => r.http)];
  if (http.length) {
    console.log(
      table(
        ['backend', 'what', 'req/s', 'p50 ms', 'p99 ms', 'errors', 'req/s vs baseline', 'p99 vs baseline'],
        http.map((r) => [
          r.backend,
          r.what,
          r.reqPerSec.toFixed(0),
          ms(r.p50),
          ms(r.p99),
          String(r.failed),
          r.baseline ? `${(r.reqPerSec / r.baseline.reqPerSec).toFixed(2)}x` : r.backend === '-' ? '' : '1.00x',
          r.baseline ? `${(r.p99 / r.baseline.p99).toFixed(2)}x` : r.backend === '-' ? '' : '1.00x',
        ]),
        2,
      ),
    );
  }
  const subs = results.flatMap((r) => (r.subscriptions ? [r.subscriptions] : []));
  if (subs.length) {
    console.log("\nState-change delivery to graphql-ws subscribers (child process, same machine), from the event row's `at` to receipt:\n");
    console.log(
      table(
        [
          'backend',
          'subscribers',
          'events',
          'delivered / expected',
          'twice',
          'out of order',
          'errors',
          'p50 ms',
          'p99 ms',
          'max ms',
          'connect s',
        ],
        subs.map((s) => [
          s.backend,
          String(s.subscribers),
          String(s.events),
          `${s.delivered} / ${s.expected}`,
          String(s.duplicates),
          String(s.outOfOrder),
          String(s.errors),
          s.p50.toFixed(1),
          s.p99.toFixed(1),
          s.max.toFixed(1),
          (s.connectMs / 1000).toFixed(1),
        ]),
        1,
      ),
    );
  }
  if (lostStops) console.log(`\nNote: ${lostStops} DELETE(s) answered 200 with the environment still live and did not stop it; retried.`);
}

const role = process.argv[2];
if (role === '--load') loadChild();
else if (role === '--subscribers') subscriberChild();
else await main();
