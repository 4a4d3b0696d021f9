// `berth node --metrics-port` (docs/agents.md, "Metrics"): a real `berth node` serves its slots and
// engine calls in Prometheus' text format, to METRICS_TOKEN (files only first, then with an engine).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeContainerBackends, engine, TEST_IMAGE } from './helpers/containers';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';

const TOKEN = 'node-metrics-token-0123456789abcdef';
const CATALOG = {
  pools: [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
  templates: [{ name: 'remote', pool: 'remote', startMs: 0, idle: '30m', hard: '1h', shares: [], services: [] }],
};

describeBackends('berth node metrics', (backend) => {
  let s: TestServer;
  let dir: string;
  let secret: string;
  const agents: Proc[] = [];
  const api = client(() => s.url, BOOTSTRAP);
  const agent = (args: string[], env: Record<string, string> = {}) => {
    const proc = spawnNode(
      ['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--slots', '2', '--engine', 'none', ...args],
      {
        BERTH_NODE_TOKEN: secret,
        ...env,
      },
    );
    agents.push(proc);
    return proc;
  };
  // The server's log lines, for the node channel's session line.
  const lines: Record<string, unknown>[] = [];
  let onLine = () => {};
  const sessionEnded = () =>
    new Promise<Record<string, unknown>>((resolve) => {
      const look = () => {
        const line = lines.find((l) => l.route === '/v1/nodes/channel' && l.websocket);
        if (line) resolve(line);
        else onLine = look;
      };
      look();
    });
  const sample = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-node-metrics-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify(CATALOG));
    s = await startServer(
      backend,
      { TEMPLATES_FILE: templates, METRICS_TOKEN: TOKEN },
      {
        logLines: (text) => {
          for (const line of text.split('\n').filter(Boolean)) lines.push(JSON.parse(line));
          onLine();
        },
      },
    );
    secret = (await api.post('/v1/nodes', { pool: 'remote', name: 'builder' })).body.secret;
  });
  afterAll(async () => {
    for (const proc of agents) await proc.kill('SIGKILL');
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('serves slots and engine metrics to METRICS_TOKEN', async () => {
    const node = agent(['--metrics-port', '0'], { METRICS_TOKEN: TOKEN });
    const url = (await node.waitFor(/metrics at (http:\/\/127\.0\.0\.1:\d+\/metrics)/))[1]!;
    await node.waitFor(/online as builder/);
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await fetch(url.replace('/metrics', '/other'))).status).toBe(404);
    const scrape = async () => {
      const res = await fetch(url, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(res.status).toBe(200);
      return res.text();
    };
    const text = await scrape();
    expect(text).toContain('# TYPE berth_node_container_operations_total counter');
    expect(text).toContain('# TYPE berth_node_container_operation_duration_seconds histogram');
    expect(text).toContain('# TYPE process_resident_memory_bytes gauge');
    expect(sample(text, 'berth_node_slots')).toBe(2);
    expect(sample(text, 'berth_node_slots_in_use')).toBe(0);
    expect(text).not.toContain(secret);
    // The server's own /metrics shows the node and its slots, from the database.
    const server = await (await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
    expect(server).toMatch(/^berth_nodes\{pool="remote",state="online"\} 1$/m);
    expect(server).toMatch(/^berth_node_slots\{pool="remote",state="idle"\} 2$/m);

    const lease = await api.post('/v1/environments', { template: 'remote' });
    expect(lease.status).toBe(202);
    await reaches(s.url, BOOTSTRAP, lease.body.environment.id, 'ready');
    expect(sample(await scrape(), 'berth_node_slots_in_use')).toBe(1);
    await node.kill('SIGKILL');
    // The node's control channel was a WebSocket session: one line when it ended, naming the node.
    expect(await sessionEnded()).toMatchObject({ status: 101, method: 'GET', actorKind: 'node', orgId: expect.any(String) });
    expect(JSON.stringify(lines)).not.toContain(secret);
  });

  it('listens beyond loopback only with METRICS_TOKEN', async () => {
    const open = agent(['--metrics-port', '0', '--metrics-host', '0.0.0.0'], { METRICS_TOKEN: '' });
    expect(await open.exited).not.toBe(0);
    expect(open.output()).toMatch(/--metrics-host 0\.0\.0\.0 is reachable from other machines: set METRICS_TOKEN/);
    const bad = agent(['--metrics-port', '70000']);
    expect(await bad.exited).not.toBe(0);
    expect(bad.output()).toMatch(/--metrics-port.*must be a port/);
  });
});

describeContainerBackends('berth node metrics with an engine', (backend) => {
  let s: TestServer;
  let dir: string;
  let node: Proc | undefined;
  const api = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-node-metrics-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify({ ...CATALOG, templates: [{ ...CATALOG.templates[0], image: TEST_IMAGE }] }));
    s = await startServer(backend, { TEMPLATES_FILE: templates });
  }, 60_000);
  afterAll(async () => {
    await node?.kill('SIGKILL');
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('counts and times the container operations of a prepare and a release', async () => {
    const secret = (await api.post('/v1/nodes', { pool: 'remote', name: 'builder' })).body.secret;
    node = spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--engine', engine(), '--metrics-port', '0'], {
      BERTH_NODE_TOKEN: secret,
      METRICS_TOKEN: '',
    });
    const url = (await node.waitFor(/metrics at (http:\/\/127\.0\.0\.1:\d+\/metrics)/))[1]!;
    const lease = await api.post('/v1/environments', { template: 'remote' });
    const id = lease.body.environment.id;
    await reaches(s.url, BOOTSTRAP, id, 'ready');
    const text = await (await fetch(url)).text();
    for (const operation of ['image', 'create', 'start']) {
      expect(text).toMatch(new RegExp(`^berth_node_container_operations_total\\{operation="${operation}",outcome="ok"\\} [1-9]`, 'm'));
      expect(text).toMatch(new RegExp(`^berth_node_container_operation_duration_seconds_count\\{operation="${operation}"\\} [1-9]`, 'm'));
    }
    expect(text).toMatch(/^berth_node_slots_in_use 1$/m);
    await api.del(`/v1/environments/${id}`);
    await reaches(s.url, BOOTSTRAP, id, 'stopped');
    const after = await (await fetch(url)).text();
    expect(after).toMatch(/^berth_node_container_operations_total\{operation="remove",outcome="ok"\} [1-9]/m);
    expect(after).toMatch(/^berth_node_slots_in_use 0$/m);
  });
});
