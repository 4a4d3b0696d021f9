// Nodes pull their pool's templates' images before any lease needs them (docs/agents.md, "Images"):
// a real `berth node` with the test engine. No registry is reachable here, so a pull that succeeds
// is not exercised; what is: the welcome's images are pulled in the background (a missing one is
// tried and its failure logged with the engine's words), an image the engine has is not pulled,
// a template changed with PUT /v1/templates is pulled at once by the nodes of its pool (and only
// those of its organization) and by the built-in node when the pool has hot nodes, and one
// reference asked twice is one pull.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { Engine } from '../src/node/engine';
import { describeContainers, engine, TEST_IMAGE } from './helpers/containers';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';

/** References no registry serves (nothing listens on localhost:9): a pull fails at once. */
const MISSING = 'localhost:9/berth-prepull/missing:1';
const CHANGED = 'localhost:9/berth-prepull/changed:1';

const CATALOG = {
  pools: [
    { name: 'remote', hotNodes: 0, maxQueued: 10 },
    { name: 'other', hotNodes: 0, maxQueued: 10 },
    { name: 'hot', hotNodes: 1, maxQueued: 10 },
  ],
  templates: [
    { name: 'missing', pool: 'remote', startMs: 0, idle: '30m', hard: '1h', image: MISSING, shares: [], services: [] },
    { name: 'present', pool: 'remote', startMs: 0, idle: '30m', hard: '1h', image: TEST_IMAGE, shares: [], services: [] },
  ],
};

describeContainers('nodes pull ahead', () => {
  let s: TestServer;
  let dir: string;
  let agent: Proc | undefined;
  /** The server's log, the built-in node's lines among them. */
  const lines: string[] = [];
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-prepull-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify(CATALOG));
    s = await startServer('pglite', { TEMPLATES_FILE: templates, DOCKER_HOST: engine() }, { logLines: (line) => lines.push(line) });
  }, 60_000);
  afterAll(async () => {
    await agent?.kill('SIGKILL');
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("a node pulls its pool's images when it starts and when a template of its pool changes", async () => {
    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'puller' });
    expect(created.status).toBe(201);
    agent = spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--engine', engine()], {
      BERTH_NODE_TOKEN: created.body.secret,
    });
    await agent.waitFor(/online as puller/);
    await agent.waitFor(new RegExp(`pulling ${MISSING}\\n`));
    await agent.waitFor(new RegExp(`cannot pull ${MISSING}: \\S`));

    // Another organization's template of the same pool name is not this node's business.
    const other = await createOrganization(s.app.deps.prisma, 'prepullother', 'boss@other.example');
    const them = client(() => s.url, other.secret);
    const foreign = 'localhost:9/berth-prepull/foreign:1';
    expect((await them.put('/v1/templates/theirs', { pool: 'remote', image: foreign, idle: '30m', hard: '1h' })).status).toBe(201);
    // A template of another pool neither.
    const elsewhere = 'localhost:9/berth-prepull/elsewhere:1';
    expect((await admin.put('/v1/templates/elsewhere', { pool: 'other', image: elsewhere, idle: '30m', hard: '1h' })).status).toBe(201);
    // Ours, changed to a new image: pulled now, before any lease (the same channel carries it, in order).
    expect((await admin.put('/v1/templates/present', { pool: 'remote', image: CHANGED, idle: '30m', hard: '1h' })).status).toBe(201);
    await agent.waitFor(new RegExp(`cannot pull ${CHANGED}: \\S`));

    const output = agent.output();
    expect(output).not.toContain(foreign);
    expect(output).not.toContain(elsewhere);
    // The test image is local: nothing to pull.
    expect(output).not.toContain(`pulling ${TEST_IMAGE}`);
    // The node still serves: the failed pulls held nothing up.
    expect((await admin.get('/v1/nodes')).body.nodes.find((n: { name: string }) => n.name === 'puller')).toMatchObject({ state: 'online' });
  });

  it("the built-in node pulls a changed template's image when the template is of a pool with hot nodes", async () => {
    const said = (image: string) => lines.some((line) => line.includes(`cannot pull ${image}`));
    const hot = 'localhost:9/berth-prepull/hot:1';
    const cold = 'localhost:9/berth-prepull/cold:1';
    const later = 'localhost:9/berth-prepull/later:1';
    expect((await admin.put('/v1/templates/hot', { pool: 'hot', image: hot, idle: '30m', hard: '1h' })).status).toBe(201);
    await vi.waitFor(() => expect(said(hot)).toBe(true), { timeout: 30_000, interval: 50 });
    // A pool only remote nodes serve: not the built-in node's business. (Its channel keeps order:
    // once a later image is tried, an earlier message would have been.)
    expect((await admin.put('/v1/templates/cold', { pool: 'other', image: cold, idle: '30m', hard: '1h' })).status).toBe(201);
    expect((await admin.put('/v1/templates/hot', { pool: 'hot', image: later, idle: '30m', hard: '1h' })).status).toBe(200);
    await vi.waitFor(() => expect(said(later)).toBe(true), { timeout: 30_000, interval: 50 });
    expect(said(cold)).toBe(false);
  });

  it('one reference asked twice is one pull, whose outcome both see', async () => {
    const e = await Engine.open(engine());
    const first = e.pullImage(MISSING);
    expect(e.pullImage(MISSING)).toBe(first);
    await expect(first).rejects.toThrow();
    // Once it ended, a new ask is a new pull.
    const again = e.pullImage(MISSING);
    expect(again).not.toBe(first);
    await expect(again).rejects.toThrow();
  });
});
