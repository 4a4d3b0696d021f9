// Remote nodes end to end: Berth in-process, `berth node` as a real process over loopback.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import type { App } from '../src/app/server';
import { createOrganization } from '../src/modules/organizations/service';
import { describeContainerBackends, engine, TEST_IMAGE } from './helpers/containers';
import { berthExec } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';

const root = new URL('..', import.meta.url).pathname;

/** A catalog whose `remote` pool has no hot nodes (served only by `berth node`) and a `mixed` one. */
const CATALOG = {
  pools: [
    { name: 'remote', hotNodes: 0, maxQueued: 10 },
    { name: 'default', hotNodes: 1, maxQueued: 10 },
  ],
  templates: [
    {
      name: 'remote',
      pool: 'remote',
      startMs: 0,
      image: TEST_IMAGE,
      workdir: '/workspace',
      idle: '30m',
      hard: '1h',
      shares: [
        { name: 'src', direction: 'in', envPath: '/workspace/src' },
        { name: 'out', direction: 'out', envPath: '/workspace/out' },
      ],
      services: [],
    },
    { name: 'default', pool: 'default', startMs: 0, idle: '30m', hard: '1h', image: TEST_IMAGE, shares: [], services: [] },
  ],
};

/** How long the server may take to see a node come online or go. */
const WAIT = { timeout: 30_000, interval: 100 };

const exists = (path: string) =>
  stat(path).then(
    () => true,
    () => false,
  );

interface Agent {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function startAgent(url: string, token: string, dir: string): Agent {
  // The credential in the environment, where ps does not show it.
  const args = ['bin/berth.js', 'node', '--server', url, '--dir', dir, '--slots', '1', '--engine', engine()];
  const child = spawn(process.execPath, args, {
    cwd: root,
    env: { ...process.env, BERTH_NODE_TOKEN: token },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

/** Resolves once `agent` printed `text` at or after offset `from` of its output, as the line arrives. */
function printed(agent: Agent, text: string, from: number): Promise<void> {
  return new Promise((resolve) => {
    const check = () => {
      if (!agent.output().includes(text, from)) return;
      agent.child.stdout!.off('data', check);
      agent.child.stderr!.off('data', check);
      resolve();
    };
    // After startAgent's own listeners: output() already holds the chunk.
    agent.child.stdout!.on('data', check);
    agent.child.stderr!.on('data', check);
    check();
  });
}

/** A TCP proxy to `target` whose `cut()` drops every connection through it (it keeps listening). */
async function startCutter(target: string) {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    sockets.add(client).add(upstream);
    client.pipe(upstream).pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    cuts: 0,
    cut() {
      this.cuts++;
      for (const socket of sockets) socket.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

describeContainerBackends('remote nodes', (backend) => {
  let s: TestServer;
  let peer: App | undefined;
  let dir: string;
  let agent: Agent | undefined;
  let cutter: Awaited<ReturnType<typeof startCutter>> | undefined;
  const admin = client(() => s.url, BOOTSTRAP);
  // On PostgreSQL the node connects to one instance and leases are made on another.
  const leases = client(() => peer?.url ?? s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-node-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify(CATALOG));
    s = await startServer(backend, { TEMPLATES_FILE: templates, NODE_LOST_MS: '1500', NODE_HEARTBEAT_MS: '250', DOCKER_HOST: engine() });
    if (backend === 'postgres') peer = await s.startPeer();
  }, 60_000);
  afterAll(async () => {
    agent?.child.kill('SIGKILL');
    await cutter?.close();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const nodeDir = () => join(dir, 'node');
  const envRoot = (id: string) => join(nodeDir(), id);
  const envState = async (id: string) => (await leases.get(`/v1/environments/${id}`)).body;
  const nodeNamed = async (name: string) => (await admin.get('/v1/nodes')).body.nodes.find((n: { name: string }) => n.name === name);

  let node: { id: string; name: string };
  let secret: string;

  it('admins create node credentials; input is checked; other organizations never see them', async () => {
    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'Builder-1' });
    expect(created.status).toBe(201);
    expect(created.body.secret).toMatch(/^bnd_[A-Za-z0-9]{43}$/);
    expect(created.body.node).toMatchObject({ name: 'builder-1', pool: 'remote', state: 'lost', slots: 0, environments: [] });
    ({ node, secret } = created.body);

    expect(await admin.post('/v1/nodes', { pool: 'remote', name: 'builder-1' })).toMatchObject({
      status: 409,
      body: { code: 'name_taken' },
    });
    expect(await admin.post('/v1/nodes', { pool: 'nope', name: 'b2' })).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await admin.post('/v1/nodes', { pool: 'remote', name: 'not a label' })).toMatchObject({ status: 422 });
    expect(await admin.post('/v1/nodes', { pool: 'remote' })).toMatchObject({ status: 422 });
    expect(await admin.post('/v1/nodes', { pool: 'remote', name: 'b3', extra: 1 })).toMatchObject({ status: 422 });

    const key = await admin.post('/v1/keys', { name: 'member-key' });
    const member = client(() => s.url, key.body.secret);
    expect(await member.post('/v1/nodes', { pool: 'remote', name: 'b4' })).toMatchObject({ status: 403, body: { code: 'forbidden' } });
    // The built-in node first (every organization's), then the organization's own.
    const listed = (await member.get('/v1/nodes')).body.nodes as { id: string; name: string; builtin: boolean }[];
    expect(listed.map((n) => [n.name, n.builtin])).toEqual([
      ['builtin', true],
      [node.name, false],
    ]);
    expect(listed[1]!.id).toBe(node.id);
    // The built-in node is not an organization's to remove, nor its name.
    expect((await admin.del(`/v1/nodes/${listed[0]!.id}`)).body.code).toBe('conflict');
    expect(await admin.post('/v1/nodes', { pool: 'remote', name: 'builtin' })).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await member.del(`/v1/nodes/${node.id}`)).toMatchObject({ status: 403 });

    const other = await createOrganization(s.app.deps.prisma, `nodeother${backend}`, 'boss@other.example');
    const them = client(() => s.url, other.secret);
    expect((await them.get('/v1/nodes')).body.nodes.map((n: { name: string }) => n.name)).toEqual(['builtin']);
    const foreign = await them.del(`/v1/nodes/${node.id}`);
    const unknown = await them.del('/v1/nodes/nod_doesnotexist');
    expect(foreign).toMatchObject({ status: 404, body: { code: 'not_found' } });
    expect(foreign.body.error).toBe(`node ${node.id} not found`);
    expect(unknown.body.error).toBe('node nod_doesnotexist not found');

    // The node credential is not a member's.
    const asNode = client(() => s.url, secret);
    expect(await asNode.get('/v1/environments')).toMatchObject({ status: 403 });
    expect(await asNode.get('/v1/nodes')).toMatchObject({ status: 403 });
  });

  it('a lease of a hotNodes: 0 pool waits for a node, becomes ready on it and saves its snapshot on release', async () => {
    const first = await leases.post('/v1/environments', { template: 'remote', snapshot: 'nodesnap' });
    expect(first.status).toBe(202);
    const id = first.body.environment.id;
    expect((await envState(id)).state).toBe('pending');
    // Another organization's lease of the same pool, queued before the next one of ours.
    const stranger = await createOrganization(s.app.deps.prisma, `nodestranger${backend}`, 'boss@stranger.example');
    const strangers = client(() => s.url, stranger.secret);
    const foreign = await strangers.post('/v1/environments', { template: 'remote' });
    expect(foreign.status).toBe(202);

    agent = startAgent(s.url, secret, nodeDir());
    await vi.waitFor(async () => expect((await nodeNamed('builder-1'))?.state).toBe('online'), WAIT);
    const ready = await reaches(peer?.url ?? s.url, BOOTSTRAP, id, 'ready');
    expect(ready.node).toBe('builder-1');
    expect(await nodeNamed('builder-1')).toMatchObject({ state: 'online', slots: 1, environments: [id] });
    expect(await exists(join(envRoot(id), 'workspace', 'src'))).toBe(true);
    expect(await exists(join(envRoot(id), 'workspace', 'out'))).toBe(true);

    // The node credential acts only on environments on its node.
    const asNode = client(() => s.url, secret);
    const hot = await leases.post('/v1/environments', { template: 'default' });
    expect((await asNode.get(`/v1/environments/${hot.body.environment.id}/restore`)).status).toBe(403);
    expect((await asNode.get(`/v1/environments/${id}/restore`)).status).toBe(409); // ready, not starting
    await leases.del(`/v1/environments/${hot.body.environment.id}`);

    await writeFile(join(envRoot(id), 'workspace', 'src', 'a.txt'), 'made on the node');
    await writeFile(join(envRoot(id), 'workspace', 'out', 'result.txt'), 'built');

    // berth exec runs in the environment's container on the node, through the instance the caller uses.
    const ran = await berthExec(peer?.url ?? s.url, BOOTSTRAP, ready.name, 'cat', 'src/a.txt');
    expect(ran).toMatchObject({ code: 0, stdout: 'made on the node' });
    const failing = await berthExec(peer?.url ?? s.url, BOOTSTRAP, id, 'sh', '-c', 'echo to-stderr >&2; echo "$PWD"; exit 3');
    expect(failing).toMatchObject({ code: 3, stderr: 'to-stderr\n', stdout: '/workspace\n' });
    const missing = await berthExec(peer?.url ?? s.url, BOOTSTRAP, id, 'no-such-program-here');
    expect(missing.code).toBe(127);
    const execs = (await leases.get(`/v1/environments/${id}/execs`)).body.execs;
    expect(execs.map((e: { command: string; exitCode: number; actor: string }) => [e.command, e.exitCode, e.actor])).toEqual([
      ['no-such-program-here', 127, 'admin@berth.local'],
      [`sh -c 'echo to-stderr >&2; echo "$PWD"; exit 3'`, 3, 'admin@berth.local'],
      ['cat src/a.txt', 0, 'admin@berth.local'],
    ]);
    const other = await createOrganization(s.app.deps.prisma, `execother${backend}`, 'boss@exec.example');
    const refused = await berthExec(s.url, other.secret, id, 'true');
    expect(refused).toMatchObject({ code: 1, stderr: `berth: environment ${id} not found\n` });

    await leases.del(`/v1/environments/${id}`);
    await reaches(peer?.url ?? s.url, BOOTSTRAP, id, 'stopped');
    expect(await exists(envRoot(id))).toBe(false);
    const snaps = (await leases.get('/v1/snapshots?prefix=nodesnap')).body.snapshots;
    expect(snaps.map((x: { share: string }) => x.share).sort()).toEqual(['out', 'src']);

    const next = await leases.post('/v1/environments', { template: 'remote', snapshot: 'nodesnap' });
    const restored = await reaches(peer?.url ?? s.url, BOOTSTRAP, next.body.environment.id, 'ready');
    expect(restored.restored).toMatchObject({ key: 'nodesnap', files: 2 });
    expect(await readFile(join(envRoot(restored.id), 'workspace', 'src', 'a.txt'), 'utf8')).toBe('made on the node');
    expect(await readFile(join(envRoot(restored.id), 'workspace', 'out', 'result.txt'), 'utf8')).toBe('built');
    // The node serves only its own organization: the older foreign lease was passed over.
    expect((await strangers.get(`/v1/environments/${foreign.body.environment.id}`)).body.state).toBe('pending');
    await strangers.del(`/v1/environments/${foreign.body.environment.id}`);
  });

  it('a killed node is lost: its environments fail naming it; the same token restarted serves the waiting leases', async () => {
    const live = (await nodeNamed('builder-1')).environments;
    expect(live).toHaveLength(1);
    agent!.child.kill('SIGKILL');
    await agent!.exited;
    const failed = await reaches(peer?.url ?? s.url, BOOTSTRAP, live[0], 'failed');
    expect(failed.error).toMatch(/^node builder-1 was lost: not heard from for /);
    expect((await nodeNamed('builder-1')).state).toBe('lost');

    const waiting = await leases.post('/v1/environments', { template: 'remote' });
    expect((await envState(waiting.body.environment.id)).state).toBe('pending');

    cutter = await startCutter(s.url);
    agent = startAgent(cutter.url, secret, nodeDir());
    const ready = await reaches(peer?.url ?? s.url, BOOTSTRAP, waiting.body.environment.id, 'ready');
    expect(ready.node).toBe('builder-1');
    // The restarted agent wiped the root the killed one left behind.
    expect(await exists(envRoot(live[0]))).toBe(false);
    expect((await readdir(nodeDir())).filter((n) => n.startsWith('env_'))).toEqual([ready.id]);
  });

  it('a dropped channel is reconnected with backoff; the node keeps the environments it still holds', async () => {
    const [held] = (await nodeNamed('builder-1')).environments;
    const online = printed(agent!, 'online as builder-1', agent!.output().length);
    cutter!.cut();
    await online;
    expect(agent!.output()).toMatch(/disconnected .*reconnecting in \d+ ms/);
    expect(await nodeNamed('builder-1')).toMatchObject({ state: 'online', environments: [held] });
    expect((await envState(held)).state).toBe('ready');
    expect(await exists(envRoot(held))).toBe(true);
  });

  it('DELETE drains the node at once and revokes it once its environments have ended', async () => {
    const held = (await nodeNamed('builder-1')).environments;
    const removed = await admin.del(`/v1/nodes/${node.id}`);
    expect(removed).toMatchObject({ status: 200, body: { node: { id: node.id, state: 'draining', environments: held } } });
    const queued = await leases.post('/v1/environments', { template: 'remote' });
    // Still draining while its environment runs; the queued lease is not claimed onto it.
    expect((await nodeNamed('builder-1')).state).toBe('draining');
    expect((await envState(queued.body.environment.id)).state).toBe('pending');

    await leases.del(`/v1/environments/${held[0]}`);
    await reaches(peer?.url ?? s.url, BOOTSTRAP, held[0], 'stopped');
    await vi.waitFor(async () => expect(await nodeNamed('builder-1')).toBeUndefined(), WAIT);
    expect(await client(() => s.url, secret).get(`/v1/environments/${held[0]}/restore`)).toMatchObject({ status: 401 });
    expect(await agent!.exited).not.toBe(0);
    expect(agent!.output()).toMatch(/removed|refused/);
    expect((await envState(queued.body.environment.id)).state).toBe('pending');
    await leases.del(`/v1/environments/${queued.body.environment.id}`);
  });

  it("berth exec on the built-in pool runs the command in the environment's container, the same way", async () => {
    const hot = await leases.post('/v1/environments', { template: 'default' });
    const env = await reaches(peer?.url ?? s.url, BOOTSTRAP, hot.body.environment.id, 'ready');
    // On PostgreSQL either instance may have claimed it; both reach the same engine in the test.
    const ran = await berthExec(peer?.url ?? s.url, BOOTSTRAP, env.id, 'sh', '-c', 'pwd; exit 7');
    expect(ran).toMatchObject({ code: 7, stdout: '/\n' });
    const execs = (await leases.get(`/v1/environments/${env.id}/execs`)).body.execs;
    expect(execs[0]).toMatchObject({ command: "sh -c 'pwd; exit 7'", exitCode: 7, actor: 'admin@berth.local' });
    expect((await leases.post(`/v1/environments/${env.id}/exec`, { command: [] })).status).toBe(422);
    expect((await leases.post(`/v1/environments/${env.id}/exec`, { command: 'ls' })).status).toBe(422);
    await leases.del(`/v1/environments/${env.id}`);
    await reaches(peer?.url ?? s.url, BOOTSTRAP, env.id, 'stopped');
    expect(await leases.post(`/v1/environments/${env.id}/exec`, { command: ['true'] })).toMatchObject({ status: 409 });
  });

  it("the built-in node shows each organization its own environments on it, and no one else's", async () => {
    const hot = await leases.post('/v1/environments', { template: 'default' });
    const env = await reaches(peer?.url ?? s.url, BOOTSTRAP, hot.body.environment.id, 'ready');
    const builtinOf = async (api: ReturnType<typeof client>) =>
      (await api.get('/v1/nodes')).body.nodes.find((n: { builtin: boolean }) => n.builtin);
    const mine = await builtinOf(admin);
    expect(mine).toMatchObject({ name: 'builtin', state: 'online', environments: [env.id] });
    expect(env.node).toMatch(/^default-\d+$/);
    const other = await createOrganization(s.app.deps.prisma, `builtinview${backend}`, 'boss@view.example');
    const theirs = await builtinOf(client(() => s.url, other.secret));
    expect(theirs).toMatchObject({ id: mine.id, environments: [], allocated: { cpus: 0, memory: 0, unlimited: 0 } });
    // Nor can a node credential of theirs act on it.
    const node = await client(() => s.url, other.secret).post('/v1/nodes', { pool: 'remote', name: 'nosy' });
    const nosy = client(() => s.url, node.body.secret);
    expect((await nosy.get(`/v1/environments/${env.id}/restore`)).status).toBe(404);
    await leases.del(`/v1/environments/${env.id}`);
    await reaches(peer?.url ?? s.url, BOOTSTRAP, env.id, 'stopped');
  });

  it.skipIf(backend !== 'postgres')(
    'of two instances on one machine one runs the built-in node; the other takes over when it stops',
    async () => {
      expect(s.app.builtin.pid()).toBeGreaterThan(0);
      expect(peer!.builtin.pid()).toBeUndefined();
      const hot = await leases.post('/v1/environments', { template: 'default' });
      const env = await reaches(peer?.url ?? s.url, BOOTSTRAP, hot.body.environment.id, 'ready');
      // The instance stops (the last test of the file: it stays stopped). A clean stop keeps the
      // environment's container; the peer's node holds it again.
      await s.app.stop();
      await vi.waitFor(() => expect(peer!.builtin.pid()).toBeGreaterThan(0), { timeout: 15_000, interval: 100 });
      await vi.waitFor(
        async () => expect((await leases.get('/v1/nodes')).body.nodes[0]).toMatchObject({ builtin: true, state: 'online' }),
        {
          timeout: 15_000,
          interval: 100,
        },
      );
      // Held again, or (this suite's liveness bound is 1.5 s, shorter than a takeover) failed naming the node.
      const after = await envState(env.id);
      expect(after.state === 'ready' || /^node builtin /.test(after.error), JSON.stringify(after)).toBe(true);
      await leases.del(`/v1/environments/${env.id}`);
      await reaches(peer!.url, BOOTSTRAP, env.id, ['stopped', 'failed']);
      // The peer's node serves new leases.
      const next = await reaches(
        peer?.url ?? s.url,
        BOOTSTRAP,
        (await leases.post('/v1/environments', { template: 'default' })).body.environment.id,
        'ready',
      );
      expect(await berthExec(peer!.url, BOOTSTRAP, next.id, 'echo', 'served')).toMatchObject({ code: 0, stdout: 'served\n' });
      await leases.del(`/v1/environments/${next.id}`);
      await reaches(peer?.url ?? s.url, BOOTSTRAP, next.id, 'stopped');
    },
  );
});
