// Warm templates on a remote node (a real `berth node` with the test engine): the node keeps the
// template's warm containers on its free slots, GET /v1/nodes shows them, a lease claims one and
// the node makes another; another organization sees none of it; after a kill -9 of the node the
// restarted one removes what it held and makes them again, leaving no orphan; a clean stop leaves none.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { berthExec, type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';

const WAIT = { timeout: 60_000, interval: 100 };

describeContainers('warm containers on a remote node', () => {
  let s: TestServer;
  let dir: string;
  let node: Proc | undefined;
  let secret = '';
  const admin = client(() => s.url, BOOTSTRAP);
  const startNode = () =>
    spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--slots', '3', '--engine', engine()], {
      BERTH_NODE_TOKEN: secret,
    });
  /** The engine's warm containers of the pool (unclaimed), by name. */
  const warmNames = async () =>
    (await podman('ps', '-a', '--filter', 'label=berth.warm', '--filter', 'label=berth.pool=remote', '--format', '{{.Names}}'))
      .split('\n')
      .filter((n) => n.startsWith('berth-warm-'))
      .sort();
  /** The node as GET /v1/nodes lists it (after the built-in node). */
  const warmer = async () => (await admin.get('/v1/nodes')).body.nodes.find((n: { name: string }) => n.name === 'warmer');
  const readyOnNode = async () => {
    const listed = await warmer();
    return listed.warm.filter((w: { state: string }) => w.state === 'ready');
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-warm-nodes-'));
    const templates = await writeCatalog(
      dir,
      [{ name: 'stock', pool: 'stockpool', image: TEST_IMAGE, warm: 2 }],
      [
        { name: 'remote', hotNodes: 0, maxQueued: 10 },
        { name: 'stockpool', hotNodes: 0, maxQueued: 10 },
      ],
    );
    s = await startServer('pglite', { TEMPLATES_FILE: templates, DOCKER_HOST: 'none', NODE_HEARTBEAT_MS: '250' });
    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'warmer' });
    secret = created.body.secret;
    node = startNode();
    await node.waitFor(/online as warmer/);
  }, 60_000);
  afterAll(async () => {
    await node?.kill('SIGKILL');
    const left = (await podman('ps', '-aq', '--filter', 'label=berth.pool=remote')).split('\n').filter(Boolean);
    if (left.length) await podman('rm', '-f', ...left);
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps them on its free slots, shows them, and a lease claims one', async () => {
    const body = {
      pool: 'remote',
      image: TEST_IMAGE,
      idle: '30m',
      hard: '2h',
      warm: 2,
      shares: [{ name: 'src', direction: 'in', envPath: '/src' }],
    };
    expect((await admin.put('/v1/templates/nodebox', body)).status).toBe(201);
    await vi.waitFor(async () => expect(await readyOnNode()).toHaveLength(2), WAIT);
    expect(await warmNames()).toHaveLength(2);
    const listed = await warmer();
    expect(listed.warm[0]).toMatchObject({ template: 'nodebox', state: 'ready', slot: expect.stringMatching(/-\d+$/) });

    // Another organization sees no node, no warm container, and cannot lease the template.
    const other = await createOrganization(s.app.deps.prisma, 'warmnodes', 'boss@nodes.example');
    const them = client(() => s.url, other.secret);
    expect((await them.get('/v1/nodes')).body.nodes.filter((n: { builtin: boolean }) => !n.builtin)).toEqual([]);
    expect((await them.post('/v1/environments', { template: 'nodebox' })).body.code).toBe('no_template');

    const before = await warmNames();
    const made = await admin.post('/v1/environments', { template: 'nodebox' });
    const id = made.body.environment.id as string;
    const env = await vi.waitFor(async () => {
      const now = (await admin.get(`/v1/environments/${id}`)).body;
      expect(now.state).toBe('ready');
      return now;
    }, WAIT);
    expect(env.readyMs).toEqual(expect.any(Number));
    const labels = await podman('ps', '--filter', `name=^berth-${id}$`, '--format', '{{.Labels}}');
    expect(before.some((name) => labels.includes(`berth.warm:${name.slice('berth-warm-'.length)}`))).toBe(true);
    expect(await berthExec(s.url, BOOTSTRAP, id, 'sh', '-c', 'ls -d /src && hostname')).toMatchObject({
      code: 0,
      stdout: '/src\nnodebox\n',
    });
    // The third slot gets a warm container in its place.
    await vi.waitFor(async () => expect(await readyOnNode()).toHaveLength(2), WAIT);
    await admin.del(`/v1/environments/${id}`);
    await vi.waitFor(async () => expect((await admin.get(`/v1/environments/${id}`)).body.state).toBe('stopped'), WAIT);
    expect(await podman('ps', '-aq', '--filter', `name=^berth-${id}$`)).toBe('');
  });

  it("keeps a catalog template's warm containers on the organization's nodes, until it replaces the template", async () => {
    const created = await admin.post('/v1/nodes', { pool: 'stockpool', name: 'stocker' });
    const stocker = spawnNode(
      ['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'stocker'), '--slots', '2', '--engine', engine()],
      { BERTH_NODE_TOKEN: created.body.secret },
    );
    const held = async () =>
      (await admin.get('/v1/nodes')).body.nodes.find((n: { name: string }) => n.name === 'stocker')?.warm as {
        template: string;
        state: string;
      }[];
    const stockNames = async () =>
      (await podman('ps', '-a', '--filter', 'label=berth.warm', '--filter', 'label=berth.pool=stockpool', '--format', '{{.Names}}'))
        .split('\n')
        .filter(Boolean);
    try {
      await stocker.waitFor(/online as stocker/);
      // The catalog's `warm: 2`, kept for this organization on its own node.
      await vi.waitFor(async () => expect((await held()).filter((w) => w.state === 'ready')).toHaveLength(2), WAIT);
      expect((await held()).map((w) => w.template)).toEqual(['stock', 'stock']);
      const made = await admin.post('/v1/environments', { template: 'stock' });
      const id = made.body.environment.id as string;
      await vi.waitFor(async () => expect((await admin.get(`/v1/environments/${id}`)).body.state).toBe('ready'), WAIT);
      const labels = await podman('ps', '--filter', `name=^berth-${id}$`, '--format', '{{.Labels}}');
      expect(labels).toContain('berth.warm:');
      expect(await berthExec(s.url, BOOTSTRAP, id, 'hostname')).toMatchObject({ code: 0, stdout: expect.stringMatching(/^stock/) });
      await admin.del(`/v1/environments/${id}`);
      // Released by the node before it goes (a question left to a killed node holds up the server's stop).
      await vi.waitFor(async () => expect((await admin.get(`/v1/environments/${id}`)).body.state).toBe('stopped'), WAIT);

      // Its own version of the template (no warm containers) replaces the catalog's on its nodes.
      expect((await admin.put('/v1/templates/stock', { pool: 'stockpool', image: TEST_IMAGE, idle: '30m', hard: '2h' })).status).toBe(201);
      await vi.waitFor(async () => {
        expect(await held()).toEqual([]);
        expect(await stockNames()).toEqual([]);
      }, WAIT);
    } finally {
      await stocker.kill('SIGKILL');
      const left = (await podman('ps', '-aq', '--filter', 'label=berth.pool=stockpool')).split('\n').filter(Boolean);
      if (left.length) await podman('rm', '-f', ...left);
    }
  });

  it('after a kill -9 of the node, the restarted one makes them again and leaves no orphan', async () => {
    await vi.waitFor(async () => expect(await readyOnNode()).toHaveLength(2), WAIT);
    const before = (await podman('ps', '-aq', '--no-trunc', '--filter', 'label=berth.pool=remote')).split('\n').filter(Boolean);
    expect(before).toHaveLength(2);
    await node!.kill('SIGKILL');
    node = startNode();
    await node.waitFor(/online as warmer/);
    await vi.waitFor(async () => {
      expect(await readyOnNode()).toHaveLength(2);
      expect(await warmNames()).toHaveLength(2);
    }, WAIT);
    // The containers are new ones (the old were removed when the node started again).
    const after = (await podman('ps', '-aq', '--no-trunc', '--filter', 'label=berth.pool=remote')).split('\n').filter(Boolean);
    expect(after).toHaveLength(2);
    expect(after.filter((id) => before.includes(id))).toEqual([]);
    expect(node.output()).toMatch(/removed the warm container of slot/);
  });

  it('a clean stop (SIGTERM) drains the node and leaves none of its warm containers behind', async () => {
    await vi.waitFor(async () => expect(await warmNames()).toHaveLength(2), WAIT);
    expect(await node!.kill('SIGTERM')).toBe(0);
    expect(node!.output()).toMatch(/drained: every environment ended/);
    expect(await warmNames()).toEqual([]);
    expect(await podman('ps', '-aq', '--filter', 'label=berth.pool=remote')).toBe('');
    // The server forgets them too: the node is offline and its slots keep none.
    await vi.waitFor(async () => expect((await warmer()).warm).toEqual([]), WAIT);
  });
});
