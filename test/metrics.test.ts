import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createMetrics } from '../src/observability/metrics';
import type { Prisma } from '../src/platform/db';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

const TOKEN = 'metrics-test-token-0123456789abcdef';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Prometheus' text format: `# TYPE` lines and samples (`name{a="b"} 1`). */
function parse(text: string): { types: Map<string, string>; samples: Sample[] } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1]!, type[2]!);
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return { types, samples };
}

describeBackends('metrics', (backend) => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);

  async function scrape(url = s.url) {
    const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return parse(await res.text());
  }
  const value = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
    samples
      .filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))
      .reduce((sum, x) => sum + x.value, 0);

  beforeAll(async () => {
    s = await startServer(backend, { METRICS_TOKEN: TOKEN });
  });
  afterAll(() => s?.stop());

  it('answers only to the metrics token', async () => {
    const refused: Record<string, string>[] = [
      {},
      { authorization: `Bearer ${TOKEN}x` },
      { authorization: `Bearer ${BOOTSTRAP}` },
      { authorization: TOKEN },
    ];
    for (const headers of refused) {
      const res = await fetch(`${s.url}/metrics`, { headers });
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({ code: 'unauthorized' });
      expect(res.headers.get('x-request-id')).toBeTruthy();
    }
    const post = await fetch(`${s.url}/metrics`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    expect(post.status).toBe(405);
  });

  it('is off without METRICS_TOKEN, and refuses a short one', async () => {
    const plain = await startServer(backend);
    try {
      const res = await fetch(`${plain.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ error: 'no route for /metrics', code: 'not_found' });
    } finally {
      await plain.stop();
    }
    await expect(startServer(backend, { METRICS_TOKEN: 'short' })).rejects.toThrow(/METRICS_TOKEN must be at least 32/);
  });

  it('has every family with its type, and the process defaults', async () => {
    const { types } = await scrape();
    expect(Object.fromEntries([...types].filter(([name]) => name.startsWith('berth_')))).toEqual({
      berth_http_requests_total: 'counter',
      berth_http_request_duration_seconds: 'histogram',
      berth_environments: 'gauge',
      berth_environment_start_duration_seconds: 'histogram',
      berth_nodes: 'gauge',
      berth_node_slots: 'gauge',
      berth_warm_containers: 'gauge',
      berth_subscriptions: 'gauge',
      berth_artifact_bytes_total: 'counter',
      berth_webhook_deliveries_total: 'counter',
    });
    expect(types.get('process_resident_memory_bytes')).toBe('gauge');
    expect(types.get('nodejs_eventloop_lag_seconds')).toBe('gauge');
  });

  it('counts requests by route template, never by the path they named', async () => {
    const before = await scrape();
    const route = { route: '/v1/environments/{id}', method: 'GET', status: '404' };
    for (let i = 0; i < 3; i++) expect((await admin.get(`/v1/environments/env_secretish${i}`)).status).toBe(404);
    await admin.get('/v1/no/such/path-abc');
    await fetch(`${s.url}/graphql`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"query":"{ me { id } }"}' });
    await fetch(`${s.url}/`);
    await fetch(`${s.url}/definitely-not-here-xyz`);
    const res = await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const text = await res.text();
    const after = parse(text).samples;
    expect(value(after, 'berth_http_requests_total', route) - value(before.samples, 'berth_http_requests_total', route)).toBe(3);
    expect(
      value(after, 'berth_http_request_duration_seconds_count', { route: '/v1/environments/{id}', method: 'GET' }),
    ).toBeGreaterThanOrEqual(3);
    expect(value(after, 'berth_http_requests_total', { route: '/graphql', method: 'POST', status: '401' })).toBe(1);
    expect(value(after, 'berth_http_requests_total', { route: 'console', method: 'GET' })).toBeGreaterThanOrEqual(1);
    expect(value(after, 'berth_http_requests_total', { route: 'other', method: 'GET', status: '404' })).toBe(2);
    // Ids, paths and credentials never become labels.
    for (const secret of ['env_secretish', 'path-abc', 'not-here-xyz', BOOTSTRAP, TOKEN]) expect(text).not.toContain(secret);
    const routes = new Set(after.filter((x) => x.name === 'berth_http_requests_total').map((x) => x.labels.route));
    for (const r of routes) expect(r).toMatch(/^(\/v1(\/[a-z-]+|\/\{\w+\})*|\/graphql|\/metrics|\/healthz|\/readyz|console|other)$/);
  });

  it('shows environments, slots and start durations from the database', async () => {
    const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
    // A free slot claims a new lease at once (the claims job), so it may already be past pending.
    const live = (await scrape()).samples;
    const counted = ['pending', 'starting', 'ready'].map((state) =>
      value(live, 'berth_environments', { state, template: 'default', pool: 'default' }),
    );
    expect(counted.reduce((a, b) => a + b, 0)).toBe(1);
    await untilState(s, BOOTSTRAP, env.id, 'ready');
    const { samples } = await scrape();
    expect(value(samples, 'berth_environments', { state: 'ready', template: 'default', pool: 'default' })).toBe(1);
    expect(value(samples, 'berth_environments', { state: 'pending' })).toBe(0);
    expect(value(samples, 'berth_environment_start_duration_seconds_count', { template: 'default', pool: 'default' })).toBe(1);
    expect(value(samples, 'berth_node_slots', { pool: 'default', state: 'busy' })).toBe(1);
    expect(value(samples, 'berth_node_slots', { pool: 'default', state: 'idle' })).toBeGreaterThanOrEqual(1);
    if (backend === 'postgres') {
      // Every instance answers the same: the gauges come from the database, not from memory.
      const peer = await s.startPeer();
      const there = await scrape(peer.url);
      for (const state of ['ready', 'pending']) {
        expect(value(there.samples, 'berth_environments', { state })).toBe(value(samples, 'berth_environments', { state }));
      }
    }
    await admin.del(`/v1/environments/${env.id}`);
    await untilState(s, BOOTSTRAP, env.id, 'stopped');
    expect(value((await scrape()).samples, 'berth_environments')).toBe(0);
  });

  it('counts artifact bytes up and down', async () => {
    const body = Buffer.alloc(3000, 7);
    const up = await fetch(`${s.url}/v1/artifacts?name=m.bin`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream' },
      body: new Uint8Array(body),
    });
    expect(up.status).toBe(201);
    const { artifact } = await up.json();
    const down = await fetch(`${s.url}/v1/artifacts/${artifact.id}/content`, { headers: { authorization: `Bearer ${BOOTSTRAP}` } });
    expect((await down.arrayBuffer()).byteLength).toBe(3000);
    const { samples } = await scrape();
    expect(value(samples, 'berth_artifact_bytes_total', { direction: 'upload' })).toBe(3000);
    expect(value(samples, 'berth_artifact_bytes_total', { direction: 'download' })).toBe(3000);
  });

  it('counts open subscriptions over server-sent events', async () => {
    const abort = new AbortController();
    const res = await fetch(`${s.url}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: 'subscription { environments { id } }' }),
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    expect(value((await scrape()).samples, 'berth_subscriptions', { transport: 'sse' })).toBe(1);
    abort.abort();
    await res.body?.cancel().catch(() => undefined);
  });

  it('counts open subscriptions over graphql-ws', async () => {
    const ws = new WebSocket(`${s.url.replace('http', 'ws')}/graphql`, 'graphql-transport-ws');
    const messages: { type: string }[] = [];
    const next = (type: string) =>
      new Promise<void>((resolve) => {
        const look = () => (messages.some((m) => m.type === type) ? resolve() : ws.once('message', look));
        look();
      });
    ws.on('message', (data) => messages.push(JSON.parse(String(data))));
    await once(ws, 'open');
    ws.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${BOOTSTRAP}` } }));
    await next('connection_ack');
    ws.send(JSON.stringify({ id: '1', type: 'subscribe', payload: { query: 'subscription { environments { id } }' } }));
    // Handled in order: once the pong is back, the subscription is held.
    ws.send(JSON.stringify({ type: 'ping' }));
    await next('pong');
    expect(value((await scrape()).samples, 'berth_subscriptions', { transport: 'websocket' })).toBe(1);
    ws.send(JSON.stringify({ id: '1', type: 'complete' }));
    ws.close();
    await once(ws, 'close');
  });
});

describe('metrics without a database', () => {
  it('still answers the process metrics, with the database families empty', async () => {
    const down = () => Promise.reject(new Error('connection refused'));
    const prisma = { environment: { groupBy: down }, remoteNode: { groupBy: down }, node: { groupBy: down } } as unknown as Prisma;
    const { types, samples } = parse(await createMetrics(prisma).registry.metrics());
    expect(types.get('berth_environments')).toBe('gauge');
    expect(samples.filter((x) => x.name === 'berth_environments' || x.name === 'berth_nodes')).toEqual([]);
    expect(samples.some((x) => x.name === 'process_resident_memory_bytes')).toBe(true);
  });
});
