// Node health (docs/agents.md, "Health"): a node whose container engine stops answering is
// degraded with a reason naming the engine; it takes no new leases (they go to another node or
// wait, saying why), commands in its environments answer 503 engine_unavailable; /readyz stays 200
// and says the built-in node's engine trouble. When the engine answers again the node is online,
// an environment whose container still runs is usable, one whose container went meanwhile fails
// saying so. Real `berth node` processes; the sick node's engine is a Podman service of the suite's
// own, stopped and started again (its containers run on meanwhile).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { containersOf, describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { ownPodman, podman } from './helpers/engine-setup';
import { berthExec, type Proc, spawnNode, TEST_CAPACITY } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';
import { poll } from './helpers/wait';

describeContainers('node health', () => {
  let s: TestServer;
  let dir: string;
  let sickEngine: Awaited<ReturnType<typeof ownPodman>>;
  const nodes: Proc[] = [];
  const admin = client(() => s.url, BOOTSTRAP);
  const nodeNamed = async (name: string) => (await admin.get('/v1/nodes')).body.nodes.find((n: { name: string }) => n.name === name);
  const stateOf = (name: string, state: string) =>
    poll(`node ${name} to be ${state}`, async () => {
      const node = await nodeNamed(name);
      return node?.state === state ? node : undefined;
    });
  const startNode = async (name: string, engineUrl: string) => {
    const created = await admin.post('/v1/nodes', { pool: 'fleet', name });
    expect(created.status).toBe(201);
    const proc = spawnNode(
      [
        'bin/berth.js',
        'node',
        '--server',
        s.url,
        '--dir',
        join(dir, name),
        '--slots',
        '3',
        '--engine',
        engineUrl,
        '--capacity',
        TEST_CAPACITY,
      ],
      { BERTH_NODE_TOKEN: created.body.secret },
    );
    nodes.push(proc);
    await proc.waitFor(new RegExp(`online as ${name}`));
    return proc;
  };
  const lease = async () => {
    const created = await admin.post('/v1/environments', { template: 'box' });
    expect(created.status).toBe(202);
    return created.body.environment.id as string;
  };
  const exec = (id: string) =>
    fetch(`${s.url}/v1/environments/${id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command: ['echo', 'hi'] }),
    });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-health-'));
    sickEngine = await ownPodman(dir);
    const templates = await writeCatalog(
      dir,
      [{ name: 'box', pool: 'fleet', image: TEST_IMAGE, idle: '30m', hard: '1h' }],
      [{ name: 'fleet', hotNodes: 0, maxQueued: 10 }],
    );
    // The built-in node runs with the sick engine too: /readyz tells of its trouble.
    s = await startServer('pglite', { TEMPLATES_FILE: templates, DOCKER_HOST: sickEngine.engine, NODE_HEARTBEAT_MS: '250' });
  }, 60_000);
  afterAll(async () => {
    for (const node of nodes) await node.kill('SIGKILL');
    const left = (await podman('ps', '-aq', '--filter', 'label=berth.pool=fleet')).split('\n').filter(Boolean);
    if (left.length) await podman('rm', '-f', ...left);
    await s?.stop();
    await sickEngine?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  let kept: string;
  let lost: string;

  it('a node whose engine stops answering is degraded, takes no lease, and its commands answer 503', async () => {
    const sick = await startNode('sick', sickEngine.engine);
    kept = await lease();
    lost = await lease();
    for (const id of [kept, lost]) expect((await reaches(s.url, BOOTSTRAP, id, 'ready')).node).toBe('sick');
    expect(await berthExec(s.url, BOOTSTRAP, kept, 'echo', 'hi')).toMatchObject({ code: 0, stdout: 'hi\n' });
    // REST leaves out what is null: no reason while online.
    expect(await nodeNamed('sick')).toMatchObject({ state: 'online' });
    expect(await nodeNamed('sick')).not.toHaveProperty('reason');
    const ready = await fetch(`${s.url}/readyz`);
    expect((await ready.json()).checks).toMatchObject({ engine: sickEngine.engine, engineStatus: 'ok' });

    await sickEngine.stop();
    const degraded = await stateOf('sick', 'degraded');
    expect(degraded.reason).toContain(`the container engine ${sickEngine.engine} does not answer`);
    await sick.waitFor(/degraded: the container engine/);

    const refused = await exec(kept);
    expect(refused.status).toBe(503);
    const body = await refused.json();
    expect(body.code).toBe('engine_unavailable');
    expect(body.error).toContain(`on node sick, the container engine ${sickEngine.engine} does not answer`);
    // The CLI says the same, and exits non-zero.
    const cli = await berthExec(s.url, BOOTSTRAP, kept, 'true');
    expect(cli.code).not.toBe(0);
    expect(cli.stderr).toContain('does not answer');

    // The API and database serve: ready, with the built-in node's trouble said.
    const readyz = await fetch(`${s.url}/readyz`);
    expect(readyz.status).toBe(200);
    expect((await readyz.json()).checks.engineStatus).toMatch(/^degraded: the container engine .* does not answer/);

    // A new lease waits, naming the node and why.
    const waiting = await lease();
    const pending = await poll('the lease to say why it waits', async () => {
      const env = (await admin.get(`/v1/environments/${waiting}`)).body;
      return env.waiting?.includes('degraded') ? env : undefined;
    });
    expect(pending.state).toBe('pending');
    expect(pending.waiting).toContain('node sick is degraded: the container engine');

    // Another organization sees neither the node nor its trouble.
    const other = await createOrganization(s.app.deps.prisma, 'healthother', 'boss@health.example');
    const them = client(() => s.url, other.secret);
    expect((await them.get('/v1/nodes')).body.nodes.filter((n: { builtin: boolean }) => !n.builtin)).toEqual([]);
    expect((await them.post(`/v1/environments/${kept}/exec`, { command: ['true'] })).status).toBe(404);

    // A healthy node of the pool takes it.
    await startNode('well', engine());
    expect((await reaches(s.url, BOOTSTRAP, waiting, 'ready')).node).toBe('well');
    await admin.del(`/v1/environments/${waiting}`);
  }, 120_000);

  it('when the engine answers again the node is online: running containers go on, gone ones fail saying so', async () => {
    // Removed behind Berth's back while the engine was away.
    const [container] = await containersOf(lost);
    await podman('rm', '-f', container!);
    await sickEngine.start();

    const online = await stateOf('sick', 'online');
    expect(online).not.toHaveProperty('reason');
    const failed = await reaches(s.url, BOOTSTRAP, lost, 'failed');
    expect(failed.error).toContain('its container is gone: it was removed outside Berth (node sick)');
    expect(await berthExec(s.url, BOOTSTRAP, kept, 'echo', 'again')).toMatchObject({ code: 0, stdout: 'again\n' });
    expect((await (await fetch(`${s.url}/readyz`)).json()).checks.engineStatus).toBe('ok');

    // It takes leases again.
    expect((await admin.post(`/v1/nodes/${(await nodeNamed('well')).id}/cordon`, {})).status).toBe(200);
    const next = await lease();
    expect((await reaches(s.url, BOOTSTRAP, next, 'ready')).node).toBe('sick');
  }, 120_000);
});
