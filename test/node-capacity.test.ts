// A node's capacity (its hello's CPUs and memory) and what its live environments are allocated
// (their templates' limits added up), on GET /v1/nodes and GraphQL `nodes` (docs/agents.md, "Capacity").
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { nodeChannel } from './helpers/node-channel';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';

const GIB = 1024 ** 3;
/** What a node on this machine offers by default: its CPUs, and its memory less a tenth (at most 1 GiB). */
const MACHINE = { cpus: availableParallelism(), memory: totalmem() - Math.min(GIB, Math.floor(totalmem() / 10)) };

const CATALOG = {
  pools: [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
  templates: [
    {
      name: 'sized',
      pool: 'remote',
      startMs: 0,
      idle: '30m',
      hard: '1h',
      resources: { cpus: 0.75, memory: '2GiB' },
      shares: [],
      services: [],
    },
    { name: 'bare', pool: 'remote', startMs: 0, idle: '30m', hard: '1h', shares: [], services: [] },
  ],
};

describeBackends('node capacity', (backend) => {
  let s: TestServer;
  let dir: string;
  let agent: Proc | undefined;
  let node: { id: string };
  let secret: string;
  const admin = client(() => s.url, BOOTSTRAP);
  const listed = async () => (await admin.get('/v1/nodes')).body.nodes.find((n: { id: string }) => n.id === node.id);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-capacity-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify(CATALOG));
    s = await startServer(backend, { TEMPLATES_FILE: templates, DOCKER_HOST: 'none', NODE_HEARTBEAT_MS: '250' });
  }, 60_000);
  afterAll(async () => {
    await agent?.kill('SIGKILL');
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('a node shows no capacity until its agent says hello, then the machine it runs on', async () => {
    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'sizer' });
    ({ node, secret } = created.body);
    // REST leaves out what is null (as lastSeen).
    expect(created.body.node.capacity).toBeUndefined();
    expect(created.body.node.allocated).toEqual({ cpus: 0, memory: 0, unlimited: 0 });
    agent = spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--slots', '3', '--engine', 'none'], {
      BERTH_NODE_TOKEN: secret,
    });
    await agent.waitFor(/online as sizer/);
    // Without an engine: the host's, its memory less the node's reserve.
    expect(await listed()).toMatchObject({ state: 'online', capacity: MACHINE });
    const gql = await admin.post('/graphql', {
      query: '{ nodes { id builtin capacity { cpus memory } allocated { cpus memory unlimited } } }',
    });
    expect(
      gql.body.data.nodes.filter((n: { builtin: boolean }) => !n.builtin).map(({ builtin: _, ...n }: { builtin: boolean }) => n),
    ).toEqual([{ id: node.id, capacity: MACHINE, allocated: { cpus: 0, memory: 0, unlimited: 0 } }]);
  });

  it("allocated adds up the live environments' limits and gives them back when they end", async () => {
    const lease = async (template: string) => {
      const created = await admin.post('/v1/environments', { template });
      expect(created.status).toBe(202);
      const id: string = created.body.environment.id;
      await reaches(s.url, BOOTSTRAP, id, 'ready');
      return id;
    };
    const first = await lease('sized');
    expect((await listed()).allocated).toEqual({ cpus: 0.75, memory: 2 * GIB, unlimited: 0 });
    const second = await lease('sized');
    const bare = await lease('bare');
    expect((await listed()).allocated).toEqual({ cpus: 1.5, memory: 4 * GIB, unlimited: 1 });

    const end = async (id: string) => {
      await admin.del(`/v1/environments/${id}`);
      await reaches(s.url, BOOTSTRAP, id, ['stopped', 'failed']);
    };
    await end(first);
    expect((await listed()).allocated).toEqual({ cpus: 0.75, memory: 2 * GIB, unlimited: 1 });
    await end(second);
    await end(bare);
    expect((await listed()).allocated).toEqual({ cpus: 0, memory: 0, unlimited: 0 });
  });

  it('other organizations never see the node', async () => {
    const other = await createOrganization(s.app.deps.prisma, `capother${backend}`, 'boss@other.example');
    const theirs = (await client(() => s.url, other.secret).get('/v1/nodes')).body.nodes as { id: string; builtin: boolean }[];
    expect(theirs.filter((n) => !n.builtin)).toEqual([]);
    expect(theirs.map((n) => n.id)).not.toContain(node.id);
  });

  it('a hello with a bad capacity is refused with an error frame and changes nothing', async () => {
    const before = (await listed()).capacity;
    // A stand-in for the agent on the control channel.
    await agent?.kill('SIGKILL');
    const { ws, next } = await nodeChannel(s.url, secret);
    try {
      const bad: [unknown, string][] = [
        [{ cpus: 0, memory: GIB }, 'capacity.cpus'],
        [{ cpus: 1.5, memory: GIB }, 'capacity.cpus'],
        [{ cpus: 1e9, memory: GIB }, 'capacity.cpus'],
        [{ cpus: '4', memory: GIB }, 'capacity.cpus'],
        [{ cpus: 4, memory: -1 }, 'capacity.memory'],
        [{ cpus: 4, memory: 2 ** 60 }, 'capacity.memory'],
        [{ cpus: 4, memory: 0.5 }, 'capacity.memory'],
        [{ cpus: 4 }, 'capacity.memory'],
        [{ cpus: 4, memory: GIB, warm: 1 }, 'capacity'],
        [[4, GIB], 'capacity'],
        [null, 'capacity'],
        ['lots', 'capacity'],
      ];
      for (const [capacity, field] of bad) {
        ws.send(JSON.stringify({ type: 'hello', slots: 1, environments: [], capacity }));
        const answer = await next();
        expect(answer).toMatchObject({ type: 'error', code: 'invalid' });
        expect(String(answer.error)).toMatch(new RegExp(`^${field.replace('.', '\\.')}: `));
      }
      // 1e400 is not JSON's: the frame itself is refused.
      ws.send('{"type":"hello","slots":1,"environments":[],"capacity":{"cpus":1e400,"memory":1}}');
      expect(await next()).toMatchObject({ type: 'error' });
    } finally {
      ws.close();
    }
    expect((await listed()).capacity).toEqual(before);
  });

  it('--capacity declares what the node offers, above the machine if the operator says so, and bad values are refused', async () => {
    const serve = (name: string, value: string) =>
      admin.post('/v1/nodes', { pool: 'remote', name }).then((created) => ({
        id: created.body.node.id as string,
        proc: spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, name), '--engine', 'none', '--capacity', value], {
          BERTH_NODE_TOKEN: created.body.secret,
        }),
      }));
    const nodes = async () => (await admin.get('/v1/nodes')).body.nodes as { id: string; capacity: unknown }[];
    const big = await serve('declared', 'cpus=64,memory=1TiB');
    const half = await serve('halfdeclared', 'memory=1.5GiB');
    try {
      await big.proc.waitFor(/capacity 64 CPUs, 1TiB memory \(declared\)/);
      await big.proc.waitFor(/online as declared/);
      await half.proc.waitFor(/online as halfdeclared/);
      const listedNow = await nodes();
      expect(listedNow.find((n) => n.id === big.id)!.capacity).toEqual({ cpus: 64, memory: 1024 * GIB });
      expect(listedNow.find((n) => n.id === half.id)!.capacity).toEqual({ cpus: MACHINE.cpus, memory: 1.5 * GIB });
    } finally {
      await big.proc.kill('SIGKILL');
      await half.proc.kill('SIGKILL');
    }
    const bad: [string, RegExp][] = [
      ['cpus=0', /cpus: must be an integer from 1 to 4096/],
      ['cpus=1.5', /cpus: must be an integer/],
      ['memory=12XB', /memory: "12XB" is not a size/],
      ['memory=2048TiB', /memory: must be from 1B to 1024TiB/],
      ['cpus=2,cpus=4', /expected cpus=N and\/or memory=SIZE, each once/],
      ['disk=1TiB', /expected cpus=N and\/or memory=SIZE/],
    ];
    for (const [value, message] of bad) {
      const refused = spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'bad'), '--capacity', value], {
        BERTH_NODE_TOKEN: 'bnd_unused',
      });
      expect(await refused.exited).toBe(2);
      expect(refused.output()).toMatch(message);
    }
  });
});
