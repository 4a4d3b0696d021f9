/**
 * Environments benchmark (issue 10, goals 1, 2, 3 and 5; the reads' goals are issue 35's now): one
 * command, one run, every figure next to its peer measured in the same run, because the machines
 * here are noisy.
 *
 *   npm run bench:environments
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:environments
 *
 * Every server runs in a process of its own, so its CPU and RSS are its own: Berth with the bare
 * baselines beside it (bench/environments/berth-server.ts), the GraphQL peers
 * (peers-server.ts), the stock fan-out server (stock-server.ts). Load generators and subscribers
 * are child processes too (load.ts, subscribers.ts); this process only paces and counts.
 * Knobs and phases: docs/benchmarks.md.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from 'graphql-ws';
import pg from 'pg';
import { WebSocket } from 'ws';
import type { BerthStart, BerthUrls } from './environments/berth-server';
import {
  type Child,
  forkChild,
  knob,
  listKnob,
  PEER_LABELS,
  PEER_QUERY,
  type PeerName,
  POSTGRAPHILE_QUERY,
  percentile,
  QUERY,
  ratio,
  SUBSCRIPTION,
  sleep,
  table,
  type Usage,
  waitFor,
} from './environments/common';
import type { LoadOptions, LoadResult } from './environments/load';
import { measureStartup, type StartupResult } from './environments/startup';
import type { SubscribersReport, Transport } from './environments/subscribers';

const script = (name: string) => new URL(`./environments/${name}`, import.meta.url);
const REPO = fileURLToPath(new URL('..', import.meta.url));
const TOKEN = 'bct_bench-environments-0123456789abcdef';

type Backend = 'pglite' | 'postgres';
const PHASES = ['reads', 'revocation', 'fanout', 'startup'] as const;
const PEERS: PeerName[] = ['postgraphile', 'yoga', 'graphql-js', 'graphql-jit'];
const TRANSPORTS: Transport[] = ['graphql-ws', 'sse'];

const backends = listKnob<Backend>('BENCH_BACKENDS', process.env.BENCH_DATABASE_URL ? ['pglite', 'postgres'] : ['pglite'], [
  'pglite',
  'postgres',
]);
const phases = listKnob('BENCH_PHASES', PHASES, PHASES);
const peers = listKnob('BENCH_PEERS', PEERS, PEERS);
const transports = listKnob('BENCH_TRANSPORTS', TRANSPORTS, TRANSPORTS);
const stockTransports = listKnob('BENCH_STOCK_TRANSPORTS', TRANSPORTS, TRANSPORTS);
const profileDir = process.env.BENCH_PROFILE;
if (profileDir) mkdirSync(profileDir, { recursive: true });
const SUBSCRIBERS = knob('BENCH_SUBSCRIBERS', 10_000);
const EVENTS = knob('BENCH_EVENTS', 40);
const INTERVAL_MS = knob('BENCH_EVENT_INTERVAL_MS', 1000);

// ---------------------------------------------------------------------------------------------
// Servers

interface Berth extends BerthUrls {
  child: Child;
}

/** Berth in a child process of its own (node's --expose-gc so RSS is read after a collection). */
async function startBerth(p: BerthStart): Promise<Berth> {
  const child = forkChild(script('berth-server.ts'), [], ['--expose-gc'], undefined, { drainStdout: true });
  try {
    return { child, ...(await child.call<BerthUrls>('start', p)) };
  } catch (error) {
    child.kill();
    throw error;
  }
}

async function stopChild(child: Child | undefined): Promise<void> {
  if (!child) return;
  await child.call('stop').catch(() => child.kill());
  await child.exited;
}

/**
 * One API call on a connection of its own: a kept-alive connection that the server closes for
 * idleness while a request is on its way (likely when the server is busy fanning out) would fail
 * a change that the server never saw.
 */
function api<T = any>(base: string, method: string, path: string, body?: unknown, token = TOKEN): Promise<{ status: number; body: T }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(base + path, {
      method,
      agent: false,
      headers: { authorization: `Bearer ${token}`, ...(payload ? { 'content-type': 'application/json' } : {}) },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('error', reject);
      res.on('end', () => {
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          // not JSON: kept as text for the error message
        }
        resolve({ status: res.statusCode!, body: parsed as T });
      });
    });
    req.end(payload);
  });
}

/** The catalog Berth runs with in the benchmark: the repository's, plus a pool without nodes. */
async function writeTemplates(dir: string): Promise<string> {
  const catalog = JSON.parse(await readFile(join(REPO, 'templates.json'), 'utf8')) as {
    pools: object[];
    templates: { name: string }[];
  };
  const base = catalog.templates.find((t) => t.name === 'default')!;
  // Environments of the fan-out wait in this pool's queue: each creation is exactly one change
  // (one event), so the benchmark sets the pace of changes, not the hot pool.
  catalog.pools.push({ name: 'bench-queue', hotNodes: 0, maxQueued: 1_000_000 });
  catalog.templates.push({ ...base, name: 'bench-queued', pool: 'bench-queue' } as { name: string });
  const file = join(dir, 'bench-templates.json');
  await writeFile(file, JSON.stringify(catalog));
  return file;
}

// ---------------------------------------------------------------------------------------------
// Reads (goals 1 and 2)

interface Target {
  what: string;
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  /** The process serving it, whose CPU is read around the measured run. */
  server?: Child;
  /** Set to write a CPU profile of the measured run (BENCH_PROFILE). */
  profile?: string;
  idOf(body: any): string | undefined;
}

interface HttpRow {
  backend: string;
  what: string;
  reqPerSec: number;
  p50: number;
  p99: number;
  failed: number;
  cpuUsPerReq?: number;
  /** Share of that CPU spent in the kernel. */
  kernel?: number;
  queriesPerReq?: number;
  baseline?: { reqPerSec: number; p99: number };
  kind?: 'bare' | 'rest' | 'graphql' | 'peer';
}

async function runLoad(opts: LoadOptions, server?: Child): Promise<LoadResult & { cpuUs?: number; systemUs?: number; queries?: number }> {
  const load = forkChild(script('load.ts'));
  try {
    let before: Promise<Usage> | undefined;
    load.on('started', () => {
      before = server?.call<Usage>('usage');
    });
    const result = await load.call<LoadResult>('run', opts);
    const after = await server?.call<Usage>('usage');
    const start = await before;
    if (!after || !start) return result;
    return {
      ...result,
      cpuUs: after.cpuUs - start.cpuUs,
      systemUs: after.systemUs - start.systemUs,
      queries: after.queries - start.queries,
    };
  } finally {
    load.kill();
    await load.exited;
  }
}

/** A warm-up run, then the measured one (profiled when asked). */
async function measureTarget(backend: string, t: Target, kind?: HttpRow['kind']): Promise<HttpRow> {
  const connections = knob('BENCH_CONNECTIONS', 32);
  const opts = { url: t.url, method: t.method, headers: t.headers, body: t.body, connections };
  await runLoad({ ...opts, seconds: knob('BENCH_WARMUP_SECONDS', 2) });
  if (t.profile) await t.server!.call('profileStart', {});
  const r = await runLoad({ ...opts, seconds: knob('BENCH_SECONDS', 10) }, t.server);
  if (t.profile) await t.server!.call('profileStop', { file: t.profile });
  if (r.firstFailure) console.error(`[${backend}] ${t.what}: ${r.failed} failed, the first with status ${r.firstFailure}`);
  return {
    backend,
    what: t.what,
    reqPerSec: r.ok / r.seconds,
    p50: r.p50,
    p99: r.p99,
    failed: r.failed,
    cpuUsPerReq: r.cpuUs !== undefined && r.ok ? r.cpuUs / r.ok : undefined,
    kernel: r.cpuUs && r.systemUs !== undefined ? r.systemUs / r.cpuUs : undefined,
    // Responses that were still in flight when the run ended make this a little high.
    queriesPerReq: r.queries !== undefined && r.ok ? r.queries / r.ok : undefined,
    kind,
  };
}

/** What this machine and the load generator manage right now without any database. */
async function measureReference(): Promise<HttpRow> {
  const body = JSON.stringify({ ok: true });
  const server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(body));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    return await measureTarget('-', { what: 'reference: node:http, no database', url, method: 'GET', headers: {}, idOf: () => undefined });
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

async function measureReads(backend: Backend, berth: Berth, id: string, peerChild?: Child, peerUrls?: Record<PeerName, string>) {
  const auth = { authorization: `Bearer ${TOKEN}` };
  const json = { 'content-type': 'application/json' };
  const prof = (name: string) => (profileDir ? join(profileDir, `${backend}-${name}.cpuprofile`) : undefined);
  /** A GET of the row from one of the servers in Berth's process. */
  const get = (what: string, base: string, headers: Record<string, string>, profile?: string): Target => ({
    what,
    url: `${base}/v1/environments/${id}`,
    method: 'GET',
    headers,
    server: berth.child,
    profile,
    idOf: (b) => b.id,
  });
  const bare = get('bare: node:http + pg', berth.bareUrl, {}, prof('bare'));
  const targets: [Target, HttpRow['kind']][] = [
    [get('bare + auth: one more indexed query (the credential by its hash)', berth.bareAuthUrl, auth), 'bare'],
    [get("bare + auth, Berth's credential statement (2 joins, 1 sub-select)", berth.bareBerthAuthUrl, auth), 'bare'],
    [get('bare + auth, the same statement named (prepared once per connection)', berth.bareBerthAuthNamedUrl, auth), 'bare'],
    [get('Berth REST GET /v1/environments/{id}', berth.url, auth, prof('rest')), 'rest'],
    [
      {
        what: 'Berth GraphQL POST /graphql environment(id)',
        url: `${berth.url}/graphql`,
        method: 'POST',
        headers: { ...auth, ...json },
        body: JSON.stringify({ query: QUERY, variables: { id } }),
        server: berth.child,
        profile: prof('graphql'),
        idOf: (b) => b.data?.environment?.id,
      },
      'graphql',
    ],
  ];
  for (const name of peerUrls ? peers : []) {
    targets.push([
      {
        what: PEER_LABELS[name],
        url: peerUrls![name],
        method: 'POST',
        headers: json,
        body: JSON.stringify({ query: name === 'postgraphile' ? POSTGRAPHILE_QUERY : PEER_QUERY, variables: { id } }),
        server: peerChild,
        profile: prof(`peer-${name}`),
        idOf: (b) => b.data?.environment?.id ?? b.data?.environmentByRowId?.rowId,
      },
      'peer',
    ]);
  }

  // Every target must answer the same environment before its speed means anything.
  for (const [t] of [[bare], ...targets] as [Target][]) {
    const res = await fetch(t.url, { method: t.method, headers: t.headers, body: t.body });
    const text = await res.text();
    if (res.status !== 200 || t.idOf(JSON.parse(text)) !== id) throw new Error(`${t.what} answered ${res.status}: ${text.slice(0, 500)}`);
  }

  // The bare handler runs first, after every third target and last; the median of its runs is the
  // reference, so drift during the run lands on both sides of the ratio and one disturbed run
  // does not move it.
  const bareRuns = [await measureTarget(backend, bare, 'bare')];
  const rows: HttpRow[] = [];
  for (const [i, [t, kind]] of targets.entries()) {
    console.error(`[${backend}] ${t.what}…`);
    rows.push(await measureTarget(backend, t, kind));
    if (i % 3 === 2 || i === targets.length - 1) bareRuns.push(await measureTarget(backend, bare, 'bare'));
  }
  const median = (f: (r: HttpRow) => number | undefined) => {
    const xs = bareRuns
      .map(f)
      .filter((n): n is number => n !== undefined)
      .sort((a, b) => a - b);
    return xs.length ? (xs[Math.floor(xs.length / 2)]! + xs[Math.ceil(xs.length / 2) - 1]!) / 2 : undefined;
  };
  const reference = { reqPerSec: median((r) => r.reqPerSec)!, p99: median((r) => r.p99)! };
  return [
    {
      backend,
      what: `bare: node:http + pg (median of ${bareRuns.map((r) => r.reqPerSec.toFixed(0)).join(' / ')} req/s)`,
      reqPerSec: reference.reqPerSec,
      p50: median((r) => r.p50)!,
      p99: reference.p99,
      failed: bareRuns.reduce((n, r) => n + r.failed, 0),
      cpuUsPerReq: median((r) => r.cpuUsPerReq),
      kernel: median((r) => r.kernel),
      queriesPerReq: median((r) => r.queriesPerReq),
      baseline: reference,
      kind: 'bare' as const,
    },
    ...rows.map((r) => ({ ...r, baseline: reference })),
  ];
}

// ---------------------------------------------------------------------------------------------
// Revocation (goal 1's condition): a revoked credential is refused at once.

interface RevocationResult {
  backend: string;
  rest: string;
  graphql: string;
  ws: string;
  ok: boolean;
}

function wsRefusal(url: string, token: string): Promise<string> {
  return new Promise((resolve) => {
    const client = createClient({
      url: `${url.replace(/^http/, 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${token}` },
      lazy: false,
      retryAttempts: 0,
      onNonLazyError: () => undefined,
    });
    client.on('connected', () => {
      resolve('accepted');
      void client.dispose();
    });
    client.on('closed', (event) => resolve(`closed ${(event as { code?: number }).code}`));
  });
}

/**
 * Creates a CLI token, uses it on every transport (so any cache of credentials holds it), revokes
 * it, and asks again at once: REST and GraphQL must answer 401, a new graphql-ws connection must
 * be closed with 4401. The bare + auth baseline has no cache: its SQL sees the revocation as is.
 */
async function checkRevocation(backend: Backend, berth: Berth, id: string): Promise<RevocationResult> {
  const created = await api<{ secret: string; token: { id: string } }>(berth.url, 'POST', '/v1/tokens', {
    email: 'bench-revocation@example.com',
  });
  if (created.status !== 201) throw new Error(`POST /v1/tokens answered ${created.status}: ${JSON.stringify(created.body)}`);
  const { secret } = created.body;
  const graphqlRead = () => api<any>(berth.url, 'POST', '/graphql', { query: QUERY, variables: { id } }, secret);
  for (let i = 0; i < 20; i++) {
    const [rest, gql] = await Promise.all([api(berth.url, 'GET', `/v1/environments/${id}`, undefined, secret), graphqlRead()]);
    if (rest.status !== 200 || gql.status !== 200) throw new Error(`the fresh token was refused (${rest.status}, ${gql.status})`);
  }
  if ((await wsRefusal(berth.url, secret)) !== 'accepted') throw new Error('the fresh token was refused over graphql-ws');
  const revoked = await api(berth.url, 'DELETE', `/v1/tokens/${created.body.token.id}`);
  if (revoked.status !== 200) throw new Error(`DELETE /v1/tokens answered ${revoked.status}`);
  const rest = await api<{ code?: string }>(berth.url, 'GET', `/v1/environments/${id}`, undefined, secret);
  const gql = await graphqlRead();
  const ws = await wsRefusal(berth.url, secret);
  const gqlCode = gql.body?.errors?.[0]?.extensions?.code;
  const gqlRefused = gql.status === 401 || gqlCode === 'unauthorized';
  return {
    backend,
    rest: `${rest.status} ${rest.body?.code ?? ''}`.trim(),
    graphql: `${gql.status} ${gqlCode ?? ''}`.trim(),
    ws,
    ok: rest.status === 401 && gqlRefused && ws === 'closed 4401',
  };
}

// ---------------------------------------------------------------------------------------------
// Fan-out (goal 3)

interface FanoutTarget {
  backend: string;
  server: string;
  transport: Transport;
  url: string;
  token?: string;
  child: Child;
  /** Makes one change; resolves to its event's key (environment id and state). */
  change(i: number): Promise<string>;
  /** When each event was stamped before its commit (ms), and the order of the commits. */
  commits(keys: string[]): Promise<{ at: Map<string, number>; order: string[] }>;
  profile?: string;
}

interface FanoutRow {
  backend: string;
  server: string;
  transport: Transport;
  subscribers: number;
  events: number;
  delivered: number;
  expected: number;
  duplicates: number;
  missing: number;
  outOfOrder: number;
  errors: number;
  p50: number;
  p99: number;
  max: number;
  cpuUsPerMsg: number;
  kibPerSub: number;
  peakKibPerSub: number;
  cpuPercent: number;
  /** Share of the server's CPU spent in the kernel (mostly socket reads and writes). */
  kernel: number;
  connectS: number;
  drained: boolean;
}

interface SubscriberSet {
  children: Child[];
  alive: () => boolean;
  completed: (key: string) => boolean;
  errors: () => number;
  connectMs: number;
  close(): Promise<void>;
}

/** `count` subscribers spread over BENCH_CLIENT_PROCESSES processes (each a few thousand sockets). */
async function subscribe(t: FanoutTarget, count: number): Promise<SubscriberSet> {
  const processes = Math.min(count, knob('BENCH_CLIENT_PROCESSES', 4));
  const children: Child[] = [];
  const alive = new Set<Child>();
  const completions = new Map<string, number>();
  let errors = 0;
  for (let i = 0; i < processes; i++) {
    const child = forkChild(script('subscribers.ts'));
    child.on('alive', () => alive.add(child));
    child.on('complete', (msg) => completions.set(msg.key as string, (completions.get(msg.key as string) ?? 0) + 1));
    child.on('error', (msg) => {
      if (errors++ < 5) console.error(`[${t.backend} ${t.server} ${t.transport}] subscriber: ${msg.message}`);
    });
    children.push(child);
  }
  const close = async () => {
    await Promise.all(children.map((c) => c.call('close').catch(() => undefined)));
    await Promise.all(children.map((c) => c.exited));
  };
  try {
    const started = performance.now();
    await Promise.all(
      children.map((child, i) => {
        const share = Math.floor(count / processes) + (i < count % processes ? 1 : 0);
        return child.call('start', { url: t.url, token: t.token, count: share, transport: t.transport, query: SUBSCRIPTION });
      }),
    );
    return {
      children,
      alive: () => alive.size === children.length,
      completed: (key) => completions.get(key) === children.length,
      errors: () => errors,
      connectMs: performance.now() - started,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/**
 * graphql-ws acknowledges no subscription, and SSE headers come before the subscription is
 * registered: changes until every subscriber has had one prove that all are listening; then
 * those changes must have reached everyone before anything is measured.
 */
async function warmUp(t: FanoutTarget, subs: SubscriberSet, first: number): Promise<number> {
  const keys: string[] = [];
  while (!subs.alive()) {
    if (keys.length >= 10) throw new Error('subscribers did not all receive a warm-up event');
    keys.push(await t.change(first + keys.length));
    await waitFor('a warm-up event at every subscriber', 60_000, subs.alive).catch(() => undefined);
  }
  await waitFor('the warm-up events at every subscriber', 300_000, () => keys.every(subs.completed));
  return keys.length;
}

async function runFanout(t: FanoutTarget, count: number): Promise<FanoutRow> {
  const label = `[${t.backend} ${t.server} ${t.transport}]`;
  // A few subscribers first, so that what the server builds once (parsers, feeds, caches) is in
  // the RSS before the N subscribers, not in the RSS per subscriber.
  const primer = await subscribe(t, Math.min(20, count));
  let changes = await warmUp(t, primer, 0);
  await primer.close();
  await sleep(1000);
  const before = await t.child.call<Usage>('usage', { gc: true });

  console.error(`${label} connecting ${count} subscribers…`);
  const subs = await subscribe(t, count);
  try {
    changes += await warmUp(t, subs, changes);
    const withSubs = await t.child.call<Usage>('usage', { gc: true });
    console.error(`${label} ${EVENTS} changes, one every ${INTERVAL_MS} ms…`);

    if (t.profile) await t.child.call('profileStart', {});
    const cpu0 = await t.child.call<Usage>('usage');
    let peak = withSubs.rss;
    const sampler = setInterval(() => {
      t.child.call<Usage>('usage').then(
        (u) => (peak = Math.max(peak, u.rss)),
        () => undefined,
      );
    }, 500);
    const pending: Promise<string | undefined>[] = [];
    let failedChanges = 0;
    for (let i = 0; i < EVENTS; i++) {
      await sleep(cpu0.at + i * INTERVAL_MS - (performance.timeOrigin + performance.now()));
      pending.push(
        t.change(changes + i).catch((error) => {
          if (failedChanges++ < 5) console.error(`${label} a change failed: ${String(error)}`);
          return undefined;
        }),
      );
    }
    const keys = (await Promise.all(pending)).filter((k): k is string => k !== undefined);
    const drainMs = knob('BENCH_DRAIN_SECONDS', 120) * 1000;
    const drained = await waitFor('every event at every subscriber', drainMs, () => keys.every(subs.completed)).then(
      () => true,
      (e) => {
        console.error(`${label} ${String(e)}`);
        return false;
      },
    );
    clearInterval(sampler);
    const cpu1 = await t.child.call<Usage>('usage');
    if (t.profile) await t.child.call('profileStop', { file: t.profile });

    const reports = await Promise.all(subs.children.map((c) => c.call<SubscribersReport>('report')));
    const { at, order } = await t.commits(keys);
    return summarize(t, count, keys, order, at, reports, {
      cpuUs: cpu1.cpuUs - cpu0.cpuUs,
      systemUs: cpu1.systemUs - cpu0.systemUs,
      wallMs: cpu1.at - cpu0.at,
      rssBefore: before.rss,
      rssWith: withSubs.rss,
      peak,
      errors: subs.errors() + failedChanges,
      connectMs: subs.connectMs,
      drained,
    });
  } finally {
    await subs.close();
  }
}

function summarize(
  t: FanoutTarget,
  count: number,
  keys: string[],
  order: string[],
  at: Map<string, number>,
  reports: SubscribersReport[],
  m: {
    cpuUs: number;
    systemUs: number;
    wallMs: number;
    rssBefore: number;
    rssWith: number;
    peak: number;
    errors: number;
    connectMs: number;
    drained: boolean;
  },
): FanoutRow {
  const measured = new Set(keys);
  const position = new Map(order.map((key, i) => [key, i]));
  const latencies: number[] = [];
  let duplicates = 0;
  let missing = 0;
  let outOfOrder = 0;
  let errors = m.errors;
  for (const report of reports) {
    errors += report.errors;
    report.keys.forEach((key, index) => {
      const stamp = at.get(key);
      if (stamp === undefined || !measured.has(key)) return;
      for (const received of report.receipts[index]!) latencies.push(received - stamp);
    });
    for (const [sequence, subscribers] of report.sequences) {
      const seen = new Set<string>();
      let last = -1;
      for (const index of sequence) {
        const key = report.keys[index]!;
        if (!measured.has(key)) continue;
        if (seen.has(key)) duplicates += subscribers;
        seen.add(key);
        const p = position.get(key) ?? -1;
        if (p < last) outOfOrder += subscribers;
        last = Math.max(last, p);
      }
      missing += (keys.length - seen.size) * subscribers;
    }
  }
  latencies.sort((a, b) => a - b);
  return {
    backend: t.backend,
    server: t.server,
    transport: t.transport,
    subscribers: count,
    events: keys.length,
    delivered: latencies.length,
    expected: keys.length * count,
    duplicates,
    missing,
    outOfOrder,
    errors,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: latencies.at(-1) ?? Number.NaN,
    cpuUsPerMsg: m.cpuUs / latencies.length,
    kibPerSub: (m.rssWith - m.rssBefore) / 1024 / count,
    peakKibPerSub: (m.peak - m.rssBefore) / 1024 / count,
    cpuPercent: (m.cpuUs / 1000 / m.wallMs) * 100,
    kernel: m.systemUs / m.cpuUs,
    connectS: m.connectMs / 1000,
    drained: m.drained,
  };
}

function berthFanout(backend: Backend, berth: Berth, transport: Transport): FanoutTarget {
  return {
    backend,
    server: 'Berth',
    transport,
    url: berth.url,
    token: TOKEN,
    child: berth.child,
    profile: profileDir ? join(profileDir, `${backend}-fanout-${transport}.cpuprofile`) : undefined,
    async change() {
      const res = await api<{ environment: { id: string; state: string } }>(berth.url, 'POST', '/v1/environments', {
        template: 'bench-queued',
        labels: { bench: 'fanout' },
      });
      if (res.status !== 202) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`);
      return `${res.body.environment.id} ${res.body.environment.state}`;
    },
    async commits(keys) {
      // `at` is the event row's stamp, taken inside the transition's transaction before commit.
      const rows = await berth.child.call<{ id: string; state: string; at: number }[]>('sql', {
        text: `SELECT "environmentId" AS id, state, (extract(epoch FROM at) * 1000)::float8 AS at
                 FROM "EnvironmentEvent" WHERE "environmentId" = ANY($1) ORDER BY seq`,
        params: [keys.map((k) => k.split(' ')[0])],
      });
      return { at: new Map(rows.map((r) => [`${r.id} ${r.state}`, r.at])), order: rows.map((r) => `${r.id} ${r.state}`) };
    },
  };
}

async function stockFanout(transport: Transport, sample: Record<string, unknown>): Promise<FanoutRow> {
  const child = forkChild(script('stock-server.ts'), [], ['--expose-gc']);
  try {
    const { url } = await child.call<{ url: string }>('start', { sample });
    const stamps = new Map<string, number>();
    const run = randomBytes(3).toString('hex');
    const target: FanoutTarget = {
      backend: '-',
      server: transport === 'sse' ? 'stock: yoga SSE + graphql-js + createPubSub' : 'stock: graphql-ws + graphql-js + createPubSub',
      transport,
      url,
      child,
      profile: profileDir ? join(profileDir, `stock-fanout-${transport}.cpuprofile`) : undefined,
      async change(i) {
        const id = `env_stock${run}${String(i).padStart(6, '0')}`;
        stamps.set(`${id} pending`, await child.call<number>('publish', { id, name: `stock-${run}-${i}` }));
        return `${id} pending`;
      },
      async commits(keys) {
        return { at: stamps, order: [...keys].sort((a, b) => stamps.get(a)! - stamps.get(b)!) };
      },
    };
    return await runFanout(target, SUBSCRIBERS);
  } finally {
    await stopChild(child);
  }
}

// ---------------------------------------------------------------------------------------------
// One backend

interface BackendResult {
  http: HttpRow[];
  fanout: FanoutRow[];
  revocation?: RevocationResult;
  sample?: Record<string, unknown>;
}

async function runBackend(backend: Backend): Promise<BackendResult> {
  const dataDir = await mkdtemp(join(tmpdir(), 'berth-bench-'));
  const databaseUrl = backend === 'postgres' ? process.env.BENCH_DATABASE_URL! : '';
  const schema = backend === 'postgres' ? `berth_bench_${randomBytes(4).toString('hex')}` : '';
  const start: BerthStart = { backend, dataDir, databaseUrl, schema, token: TOKEN, templatesFile: await writeTemplates(dataDir) };
  const result: BackendResult = { http: [], fanout: [] };
  let berth: Berth | undefined;
  let peerChild: Child | undefined;
  try {
    console.error(`[${backend}] starting Berth…`);
    berth = await startBerth(start);
    const created = await api<{ environment: { id: string } }>(berth.url, 'POST', '/v1/environments', {
      template: 'default',
      labels: { bench: 'read' },
    });
    if (created.status !== 202) throw new Error(`create answered ${created.status}: ${JSON.stringify(created.body)}`);
    const id = created.body.environment.id;
    const b = berth;
    await waitFor(
      'the environment to be ready',
      60_000,
      async () => (await api(b.url, 'GET', `/v1/environments/${id}`)).body.state === 'ready',
    );
    const sample = await api(berth.url, 'POST', '/graphql', { query: QUERY, variables: { id } });
    result.sample = sample.body.data.environment;

    if (phases.includes('reads')) {
      let peerUrls: Record<PeerName, string> | undefined;
      if (backend === 'postgres' && peers.length) {
        peerChild = forkChild(script('peers-server.ts'), [], [], { ...process.env, GRAPHILE_ENV: 'production' });
        peerUrls = await peerChild.call<Record<PeerName, string>>('start', { databaseUrl, schema, peers });
      }
      console.error(`[${backend}] reads…`);
      result.http = await measureReads(backend, berth, id, peerChild, peerUrls);
      await stopChild(peerChild);
      peerChild = undefined;
    }
    if (phases.includes('revocation')) result.revocation = await checkRevocation(backend, berth, id);
    if (phases.includes('fanout')) {
      for (const transport of transports) {
        // A fresh process per transport: the RSS per subscriber of one must not reuse the other's heap.
        await stopChild(berth.child);
        berth = undefined;
        berth = await startBerth(start);
        result.fanout.push(await runFanout(berthFanout(backend, berth, transport), SUBSCRIBERS));
      }
    }
    return result;
  } finally {
    await stopChild(peerChild);
    await stopChild(berth?.child);
    if (schema) {
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    }
    await rm(dataDir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Report

const ms = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : '-');
const mib = (bytes?: number) => (bytes === undefined ? '-' : `${(bytes / 1024 / 1024).toFixed(0)} MiB`);
const verdict = (ok: boolean) => (ok ? 'met' : 'MISSED');

function readsReport(http: HttpRow[]): string {
  const lines = [
    table(
      [
        'backend',
        'what',
        'req/s',
        'p50 ms',
        'p99 ms',
        'errors',
        'server CPU µs/req',
        'kernel %',
        'queries/req',
        'req/s vs bare',
        'p99 vs bare',
      ],
      http.map((r) => [
        r.backend,
        r.what,
        r.reqPerSec.toFixed(0),
        ms(r.p50),
        ms(r.p99),
        String(r.failed),
        r.cpuUsPerReq === undefined ? '-' : r.cpuUsPerReq.toFixed(0),
        r.kernel === undefined ? '-' : (100 * r.kernel).toFixed(0),
        r.queriesPerReq === undefined ? '-' : r.queriesPerReq.toFixed(2),
        r.baseline ? ratio(r.reqPerSec, r.baseline.reqPerSec) : '',
        r.baseline ? ratio(r.p99, r.baseline.p99) : '',
      ]),
      2,
    ),
    '',
  ];
  for (const backend of backends) {
    const rows = http.filter((r) => r.backend === backend);
    const rest = rows.find((r) => r.kind === 'rest');
    const gql = rows.find((r) => r.kind === 'graphql');
    if (!rest?.baseline || !gql?.baseline) continue;
    // Issue 35's goals, the same on every backend: REST ≥ 1.0x, GraphQL ≥ 0.9x, p99 ≤ 1.2x of the bare handler.
    const restRatio = rest.reqPerSec / rest.baseline.reqPerSec;
    const restP99 = rest.p99 / rest.baseline.p99;
    lines.push(
      `- Reads (${backend}): REST ${restRatio.toFixed(2)}x the bare handler's req/s (goal ≥ 1.0x), p99 ${restP99.toFixed(2)}x (goal ≤ 1.2x): ${verdict(restRatio >= 1 && restP99 <= 1.2)}`,
    );
    const gqlRatio = gql.reqPerSec / gql.baseline.reqPerSec;
    const gqlP99 = gql.p99 / gql.baseline.p99;
    const best = rows.filter((r) => r.kind === 'peer').sort((a, b) => b.reqPerSec - a.reqPerSec)[0];
    lines.push(
      `- Reads (${backend}): GraphQL ${gqlRatio.toFixed(2)}x (goal ≥ 0.9x), p99 ${gqlP99.toFixed(2)}x (goal ≤ 1.2x)` +
        (best
          ? `; best peer ${best.what.replace('peer: ', '')} ${ratio(best.reqPerSec, best.baseline!.reqPerSec)}`
          : '; no peers measured') +
        `: ${verdict(gqlRatio >= 0.9 && gqlP99 <= 1.2)}`,
    );
  }
  return lines.join('\n');
}

function fanoutReport(rows: FanoutRow[]): string {
  const stock = rows.find((r) => r.backend === '-' && r.transport === 'graphql-ws');
  const lines = [
    table(
      [
        'backend',
        'server',
        'transport',
        'subscribers',
        'events',
        'delivered / expected',
        'twice',
        'missing',
        'out of order',
        'errors',
        'p50 ms',
        'p99 ms',
        'max ms',
        'CPU µs/msg',
        'CPU vs stock ws',
        'KiB/sub',
        'peak KiB/sub',
        'server CPU %',
        'kernel %',
        'connect s',
      ],
      rows.map((r) => [
        r.backend,
        r.server,
        r.transport,
        String(r.subscribers),
        String(r.events),
        `${r.delivered} / ${r.expected}${r.drained ? '' : ' (not drained)'}`,
        String(r.duplicates),
        String(r.missing),
        String(r.outOfOrder),
        String(r.errors),
        r.p50.toFixed(0),
        r.p99.toFixed(0),
        r.max.toFixed(0),
        r.cpuUsPerMsg.toFixed(1),
        stock ? ratio(r.cpuUsPerMsg, stock.cpuUsPerMsg) : '-',
        r.kibPerSub.toFixed(1),
        r.peakKibPerSub.toFixed(1),
        r.cpuPercent.toFixed(0),
        (100 * r.kernel).toFixed(0),
        r.connectS.toFixed(1),
      ]),
      3,
    ),
    '',
  ];
  for (const r of rows.filter((x) => x.server === 'Berth')) {
    const exact = r.delivered === r.expected && r.duplicates === 0 && r.missing === 0 && r.outOfOrder === 0;
    const cpu = stock ? r.cpuUsPerMsg / stock.cpuUsPerMsg : Number.NaN;
    lines.push(
      `- Goal 3 (${r.backend}, ${r.transport}): every event once and in order ${exact ? 'yes' : 'NO'}; p99 ${r.p99.toFixed(0)} ms (≤ 200); ` +
        `CPU/msg ${Number.isFinite(cpu) ? `${cpu.toFixed(2)}x stock graphql-ws` : 'n/a (no stock run)'} (≤ 0.25x); ` +
        `${r.kibPerSub.toFixed(1)} KiB/subscriber (≤ 40): ${verdict(exact && r.p99 <= 200 && cpu <= 0.25 && r.kibPerSub <= 40)}`,
    );
  }
  return lines.join('\n');
}

function startupReport(s: StartupResult): string {
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  const times = sorted(s.existing.map((r) => r.ms));
  const rss = sorted(s.existing.map((r) => r.serverRss!));
  const tree = sorted(s.existing.map((r) => r.treeRss!));
  const pss = sorted(s.existing.map((r) => r.treePss!));
  const mid = (xs: number[]) => xs[Math.floor((xs.length - 1) / 2)]!;
  const range = (xs: number[], f: (n: number) => string) => (xs.length > 1 ? ` (${f(xs[0]!)} – ${f(xs.at(-1)!)})` : '');
  const sec = (n: number) => `${(n / 1000).toFixed(2)} s`;
  const procs = s.existing[0]?.processes ?? 0;
  const names = s.existing[0]?.names ?? '';
  return [
    table(
      ['what', `median of ${s.existing.length} (range)`],
      [
        ['`npm start`, empty DATA_DIR: spawn to first 200 of /healthz', sec(s.first.ms)],
        ['`npm start`, existing DATA_DIR: spawn to first 200 of /healthz', sec(mid(times)) + range(times, sec)],
        [`idle RSS, server process (${s.settleSeconds} s after its first answer)`, mib(mid(rss)) + range(rss, mib)],
        [`idle RSS, whole tree (${procs} processes: ${names}), sum of RSS`, mib(mid(tree)) + range(tree, mib)],
        ['idle, whole tree, sum of PSS (shared pages counted once)', mib(mid(pss)) + range(pss, mib)],
        ...(s.existing[0]?.split ?? []).map(({ role }, i): [string, string] => {
          const of = (f: 'rss' | 'pss') => sorted(s.existing.map((r) => r.split?.[i]?.[f] ?? 0));
          return [`idle, ${role} process: RSS / PSS`, `${mib(mid(of('rss')))} / ${mib(mid(of('pss')))}`];
        }),
      ],
      1,
    ),
    '',
    `- Goal 5: idle RSS of the whole \`npm start\` tree ${mib(mid(tree))}, server process ${mib(mid(rss))} (goal ≤ 250 MiB): ` +
      `${verdict(mid(tree) <= 250 * 1024 * 1024)}; ` +
      `start to first answer ${sec(mid(times))} (goal ≤ 3 s): ${verdict(mid(times) <= 3000)}`,
  ].join('\n');
}

/** Each server holds a socket per subscriber: the soft limit on open files must leave room for them. */
async function checkOpenFiles(): Promise<void> {
  const limits = await readFile('/proc/self/limits', 'utf8').catch(() => '');
  const soft = Number(/^Max open files\s+(\d+)/m.exec(limits)?.[1] ?? Number.POSITIVE_INFINITY);
  if (phases.includes('fanout') && SUBSCRIBERS + 500 > soft) {
    throw new Error(
      `BENCH_SUBSCRIBERS=${SUBSCRIBERS} needs more open files than this shell allows (ulimit -n is ${soft}): raise it, or lower the knob`,
    );
  }
}

/**
 * PostGraphile 5 asks for Node >= 22, so it is not in Berth's install (whose `npm ci` would warn of
 * that on Node 20): bench/peers has a package.json and lockfile of its own, installed here, into
 * bench/peers/node_modules, when PostGraphile is one of the peers measured and that folder lacks
 * the locked version. The install's own output is cut to errors; this line says what it is.
 */
function installPeers(): void {
  const dir = fileURLToPath(new URL('./peers/', import.meta.url));
  const version = (file: string, key: string) => {
    try {
      const json = JSON.parse(readFileSync(join(dir, file), 'utf8'));
      return (key ? json.packages[key] : json).version as string;
    } catch {
      return undefined;
    }
  };
  const locked = version('package-lock.json', 'node_modules/postgraphile');
  if (locked && version('node_modules/postgraphile/package.json', '') === locked) return;
  console.error(`installing PostGraphile ${locked} into bench/peers (npm ci, once; it asks for Node >= 22, runs on ${process.version})…`);
  // --prefix as well as cwd: `npm run` exports the checkout's own prefix to its scripts.
  const npm = spawnSync('npm', ['ci', '--prefix', dir, '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, stdio: 'inherit' });
  if (npm.status !== 0) throw new Error(`npm ci in bench/peers failed (${npm.error?.message ?? `exit ${npm.status}`})`);
}

async function main(): Promise<void> {
  if (backends.includes('postgres') && !process.env.BENCH_DATABASE_URL) throw new Error('the postgres backend needs BENCH_DATABASE_URL');
  await checkOpenFiles();
  if (backends.includes('postgres') && phases.includes('reads') && peers.includes('postgraphile')) installPeers();
  const loadBefore = loadavg()[0]!;
  const started = performance.now();
  const http: HttpRow[] = phases.includes('reads') ? [await measureReference()] : [];
  const fanout: FanoutRow[] = [];
  const revocations: RevocationResult[] = [];
  let sample: Record<string, unknown> | undefined;
  for (const backend of backends) {
    const r = await runBackend(backend);
    http.push(...r.http);
    fanout.push(...r.fanout);
    if (r.revocation) revocations.push(r.revocation);
    sample ??= r.sample;
  }
  if (phases.includes('fanout') && sample) {
    for (const transport of stockTransports) {
      console.error(`[stock] fan-out over ${transport}…`);
      fanout.push(await stockFanout(transport, sample));
    }
  }
  let startup: StartupResult | undefined;
  if (phases.includes('startup')) {
    console.error('[startup] npm start…');
    startup = await measureStartup(REPO, knob('BENCH_STARTS', 3), knob('BENCH_SETTLE_SECONDS', 10));
  }

  console.log(
    `\nBerth environments benchmark: Node ${process.version}, ${availableParallelism()} cores; ` +
      `reads: ${knob('BENCH_CONNECTIONS', 32)} keep-alive connections, ${knob('BENCH_WARMUP_SECONDS', 2)} s warm-up + ` +
      `${knob('BENCH_SECONDS', 10)} s per run (autocannon in a child process); fan-out: ${SUBSCRIBERS} subscribers in ` +
      `${Math.min(SUBSCRIBERS, knob('BENCH_CLIENT_PROCESSES', 4))} client processes, ${EVENTS} changes ${INTERVAL_MS} ms apart; ` +
      `1-minute load average ${loadBefore.toFixed(1)} at start, ${loadavg()[0]!.toFixed(1)} at end; ` +
      `${((performance.now() - started) / 60_000).toFixed(1)} min` +
      (profileDir ? `\nCPU profiles written to ${profileDir}: the figures of a profiled run are slower than usual.` : '') +
      '\n',
  );
  if (http.length) console.log(`${readsReport(http)}\n`);
  for (const r of revocations) {
    console.log(
      `- Revocation (${r.backend}): after DELETE /v1/tokens/{id}, at once: REST ${r.rest}, GraphQL ${r.graphql}, ` +
        `graphql-ws ${r.ws}: ${r.ok ? 'refused at once' : 'NOT REFUSED'}`,
    );
  }
  if (revocations.length) console.log('');
  if (fanout.length) {
    console.log("State-change delivery, from the event's commit stamp to receipt (subscribers in child processes, same machine):\n");
    console.log(`${fanoutReport(fanout)}\n`);
  }
  if (startup) console.log(`${startupReport(startup)}\n`);
  if (revocations.some((r) => !r.ok)) process.exitCode = 1;
}

await main();
