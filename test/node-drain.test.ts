// `berth node` stopped by a signal drains (docs/agents.md, "Stopping a node"): its environments
// end at once with the reason, their shares saved as at any end; the node shows draining, then
// offline; the process exits 0, and the same credential started again serves. A second signal
// stops at once. Berth in-process, `berth node` as a real process (files only: no engine needed).
import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, expect, it, vi } from 'vitest';
import { nodeChannel } from './helpers/node-channel';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';
import { startTcpGate } from './helpers/tcp-gate';

const root = new URL('..', import.meta.url).pathname;
const run = promisify(execFile);

const CATALOG = {
  pools: [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
  templates: [
    {
      name: 'remote',
      pool: 'remote',
      startMs: 0,
      idle: '30m',
      hard: '1h',
      shares: [
        { name: 'src', direction: 'in', envPath: '/workspace/src' },
        { name: 'out', direction: 'out', envPath: '/workspace/out' },
      ],
      services: [],
    },
  ],
};

const REASON = 'node builder shut down: its agent was stopped';

/**
 * A TCP proxy to `target` that can hold what the server sends (`hold`/`release`: the agent's own
 * messages still go through) and be taken down (every connection cut, none taken) and brought
 * back on the same port (`down`/`up`).
 */
async function startSwitch(target: string) {
  const { hostname, port } = new URL(target);
  const pairs = new Set<{ downstream: Socket; upstream: Socket }>();
  let holding = false;
  const serve = () =>
    createServer((downstream) => {
      const upstream = connect(Number(port), hostname);
      const pair = { downstream, upstream };
      pairs.add(pair);
      downstream.pipe(upstream);
      if (!holding) upstream.pipe(downstream);
      const end = () => {
        pairs.delete(pair);
        downstream.destroy();
        upstream.destroy();
      };
      downstream.on('error', end).on('close', end);
      upstream.on('error', end).on('close', end);
    });
  const listen = (server: Server, at: number) => new Promise<void>((resolve) => server.listen(at, '127.0.0.1', resolve));
  let server = serve();
  await listen(server, 0);
  const at = (server.address() as AddressInfo).port;
  const link = {
    url: `http://127.0.0.1:${at}`,
    hold() {
      holding = true;
      for (const { downstream, upstream } of pairs) {
        upstream.unpipe(downstream);
        upstream.pause();
      }
    },
    release() {
      holding = false;
      for (const { downstream, upstream } of pairs) upstream.pipe(downstream);
    },
    async down() {
      for (const { downstream, upstream } of pairs) {
        downstream.destroy();
        upstream.destroy();
      }
      await new Promise((resolve) => server.close(resolve));
    },
    async up() {
      server = serve();
      await listen(server, at);
    },
  };
  links.push(link);
  return link;
}

/** Every switch started, taken down when the suite ends (the worker runs other files after it). */
const links: { down(): Promise<unknown> }[] = [];

/** How long the server may take to say why a lease waits, or that a node drains. */
const WAIT = { timeout: 30_000, interval: 100 };

describeBackends('berth node stopped by a signal', (backend) => {
  let s: TestServer;
  let dir: string;
  let secret: string;
  const agents: Proc[] = [];
  const api = client(() => s.url, BOOTSTRAP);
  const nodeDir = () => join(dir, 'node');
  const envState = async (id: string) => (await api.get(`/v1/environments/${id}`)).body;
  const builder = async () => (await api.get('/v1/nodes')).body.nodes.find((n: { name: string }) => n.name === 'builder');
  const startAgent = (server: string) => {
    const agent = spawnNode(['bin/berth.js', 'node', '--server', server, '--dir', nodeDir(), '--engine', 'none'], {
      BERTH_NODE_TOKEN: secret,
    });
    agents.push(agent);
    return agent;
  };
  /** A lease of the remote pool, ready on the node. */
  const leaseReady = async (body: Record<string, unknown> = {}) => {
    const lease = await api.post('/v1/environments', { template: 'remote', ...body });
    expect(lease.status).toBe(202);
    return reaches(s.url, BOOTSTRAP, lease.body.environment.id, 'ready');
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-drain-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify(CATALOG));
    // The liveness bound at its longest: an environment ended by it would end after the test's time-out.
    s = await startServer(backend, { TEMPLATES_FILE: templates, NODE_LOST_MS: '60000', NODE_HEARTBEAT_MS: '250' });
    const created = await api.post('/v1/nodes', { pool: 'remote', name: 'builder' });
    expect(created.status).toBe(201);
    secret = created.body.secret;
  });
  afterEach(async () => {
    for (const agent of agents.splice(0)) await agent.kill('SIGKILL');
  });
  afterAll(async () => {
    for (const link of links) await link.down();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('SIGTERM ends its environments now, with the reason and their shares saved, then exits 0; restarted, it serves again', async () => {
    const agent = startAgent(s.url);
    await agent.waitFor(/online as builder/);
    const env = await leaseReady({ snapshot: 'drained' });
    expect(env.node).toBe('builder');
    await writeFile(join(nodeDir(), env.id, 'workspace', 'out', 'result.txt'), 'built before the drain');

    // `berth node ls` (the real command) shows where it runs.
    const cli = { ...process.env, BERTH_URL: s.url, BERTH_TOKEN: BOOTSTRAP };
    const listed = await run(process.execPath, ['bin/berth.js', 'node', 'ls'], { cwd: root, env: cli });
    expect(listed.stdout).toMatch(
      new RegExp(`^nod_\\S+ +builder +remote +online +1/1 +\\S+ CPU, \\S+ \\S+/\\S+ \\S+ +\\d+s +${env.id}$`, 'm'),
    );

    agent.proc.kill('SIGTERM');
    expect(await agent.exited).toBe(0);
    expect(agent.output()).toContain('draining: 1 environment(s) end first');
    expect(agent.output()).toContain('drained: every environment ended; stopping');
    // The server recorded the end before it let the agent go: nothing here waits.
    expect(await envState(env.id)).toMatchObject({ state: 'stopped', error: REASON });
    const snapshots = (await api.get('/v1/snapshots?prefix=drained')).body.snapshots;
    expect(snapshots.map((x: { share: string }) => x.share).sort()).toEqual(['out', 'src']);
    await expect(stat(join(nodeDir(), env.id))).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await builder()).toMatchObject({ state: 'offline', environments: [] });
    const offline = JSON.parse((await run(process.execPath, ['bin/berth.js', 'node', 'ls', '--json'], { cwd: root, env: cli })).stdout);
    expect(offline.nodes.filter((n: { builtin: boolean }) => !n.builtin)).toMatchObject([{ name: 'builder', state: 'offline' }]);

    // Nothing is placed on an offline node; the same credential started again serves what waits.
    const waiting = await api.post('/v1/environments', { template: 'remote', snapshot: 'drained' });
    const why = 'no online node serves pool remote: node builder is offline: its agent was stopped';
    await vi.waitFor(async () => expect((await envState(waiting.body.environment.id)).waiting).toBe(why), WAIT);
    expect((await envState(waiting.body.environment.id)).state).toBe('pending');
    const again = startAgent(s.url);
    const ready = await reaches(s.url, BOOTSTRAP, waiting.body.environment.id, 'ready');
    expect(ready).toMatchObject({ node: 'builder', restored: { key: 'drained', files: 1 } });
    expect(await builder()).toMatchObject({ state: 'online', environments: [ready.id] });

    // Shutting down with nothing on it: at once.
    await api.del(`/v1/environments/${ready.id}`);
    await reaches(s.url, BOOTSTRAP, ready.id, 'stopped');
    again.proc.kill('SIGINT');
    expect(await again.exited).toBe(0);
    expect(await builder()).toMatchObject({ state: 'offline' });
  });

  it('while it drains the node shows draining and takes no new environment', async () => {
    // What the server sends is held: the node hears of no release, so its environment stays stopping.
    const link = await startSwitch(s.url);
    const agent = startAgent(link.url);
    await agent.waitFor(/online as builder/);
    const env = await leaseReady();
    link.hold();
    agent.proc.kill('SIGTERM');
    await vi.waitFor(async () => expect((await builder()).state).toBe('draining'), WAIT);
    expect(await envState(env.id)).toMatchObject({ state: 'stopping', error: REASON });
    // Queued while it drains: the claim that runs once the release is done (the job waits for it) finds the node leaving or offline.
    const queued = await api.post('/v1/environments', { template: 'remote' });
    link.release();
    expect(await agent.exited).toBe(0);
    expect(await envState(env.id)).toMatchObject({ state: 'stopped', error: REASON });
    expect((await envState(queued.body.environment.id)).state).toBe('pending');
    expect(await builder()).toMatchObject({ state: 'offline', environments: [] });
    await api.del(`/v1/environments/${queued.body.environment.id}`);
  });

  it('a drain outlives a dropped channel: the hello after it says the node is leaving', async () => {
    const link = await startSwitch(s.url);
    const agent = startAgent(link.url);
    await agent.waitFor(/online as builder/);
    const env = await leaseReady();
    await link.down();
    await agent.waitFor(/disconnected/);
    agent.proc.kill('SIGTERM');
    await agent.waitFor(/draining: 1 environment\(s\) end first once the server is reached again/);
    await link.up();
    expect(await agent.exited).toBe(0);
    expect(await envState(env.id)).toMatchObject({ state: 'stopped', error: REASON });
    expect(await builder()).toMatchObject({ state: 'offline', environments: [] });
  });

  it('a heartbeat that crosses `drained` is answered `drained` again, not with a hello that makes the node leaving', async () => {
    // A stand-in for the agent on the control channel, so the heartbeat comes exactly after the drain.
    const { ws, next } = await nodeChannel(s.url, secret);
    try {
      ws.send(JSON.stringify({ type: 'hello', slots: 1, environments: [], leaving: true }));
      expect(await next()).toMatchObject({ type: 'welcome' });
      expect(await next()).toMatchObject({ type: 'drained' });
      ws.send(JSON.stringify({ type: 'heartbeat' }));
      expect(await next()).toMatchObject({ type: 'drained' });
      expect(await builder()).toMatchObject({ state: 'offline', environments: [] });
    } finally {
      ws.close();
    }
  });

  it('a second signal stops at once', async () => {
    // The gate holds what the agent sends: the server never hears that it leaves.
    const gate = await startTcpGate(s.url);
    try {
      const agent = startAgent(gate.url);
      await agent.waitFor(/online as builder/);
      const env = await leaseReady();
      gate.holdAfter(0);
      agent.proc.kill('SIGTERM');
      await agent.waitFor(/draining: 1 environment\(s\) end first/);
      agent.proc.kill('SIGINT');
      expect(await agent.exited).toBe(130);
      expect(agent.output()).toContain('SIGINT again: stopping at once');
      // Left to the liveness bound: the environment still counts as live on the node.
      expect(await envState(env.id)).toMatchObject({ state: 'ready', node: 'builder' });
    } finally {
      await gate.close();
    }
  });
});
