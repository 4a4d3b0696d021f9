// Placement by capacity (docs/agents.md, "Capacity and placement"): a lease goes only to a node
// whose free capacity fits its template's limits, the one left with the most free first; nothing
// is over-committed when many leases come at once; a lease no node has room for waits and says
// what it needs, and is placed when room frees. Berth in-process, two `berth node` processes with
// declared capacities (files only: no engine needed).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { nodeChannel } from './helpers/node-channel';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';
import { poll } from './helpers/wait';

const GIB = 1024 ** 3;
const IMAGE = 'localhost/berth-test/busybox:1';

const CATALOG = {
  pools: [
    { name: 'fleet', hotNodes: 0, maxQueued: 50 },
    { name: 'pics', hotNodes: 0, maxQueued: 10 },
  ],
  templates: [
    { name: 'sized', pool: 'fleet', startMs: 0, idle: '30m', hard: '1h', resources: { cpus: 1, memory: '2GiB' }, shares: [], services: [] },
    { name: 'pictured', pool: 'pics', image: IMAGE, startMs: 0, idle: '30m', hard: '1h', resources: { cpus: 1, memory: '1GiB' } },
    { name: 'huge', pool: 'fleet', startMs: 0, idle: '30m', hard: '1h', resources: { cpus: 64, memory: '2GiB' }, shares: [], services: [] },
  ],
};

interface Env {
  id: string;
  state: string;
  node?: string;
  waiting?: string;
}

describeBackends('placement by capacity', (backend) => {
  let s: TestServer;
  let dir: string;
  const agents: Proc[] = [];
  const admin = client(() => s.url, BOOTSTRAP);
  const capacityOf = { small: { cpus: 2, memory: 4 * GIB }, big: { cpus: 4, memory: 8 * GIB } };
  const lease = async (template = 'sized') => {
    const created = await admin.post('/v1/environments', { template });
    expect(created.status).toBe(202);
    return created.body.environment.id as string;
  };
  const envs = async (): Promise<Env[]> => (await admin.get('/v1/environments?limit=500')).body.environments;
  /** Every node's allocation is within its capacity. */
  const withinCapacity = async () => {
    const nodes = (await admin.get('/v1/nodes')).body.nodes as {
      name: string;
      builtin: boolean;
      capacity: { cpus: number; memory: number };
      allocated: { cpus: number; memory: number };
    }[];
    for (const n of nodes.filter((n) => !n.builtin)) {
      expect(n.allocated.cpus, n.name).toBeLessThanOrEqual(n.capacity.cpus);
      expect(n.allocated.memory, n.name).toBeLessThanOrEqual(n.capacity.memory);
    }
    return Object.fromEntries(nodes.filter((n) => !n.builtin).map((n) => [n.name, n.allocated.cpus]));
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-placement-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify(CATALOG));
    s = await startServer(backend, { TEMPLATES_FILE: templates, NODE_HEARTBEAT_MS: '250' });
    for (const [name, declared] of [
      ['small', 'cpus=2,memory=4GiB'],
      ['big', 'cpus=4,memory=8GiB'],
    ]) {
      const created = await admin.post('/v1/nodes', { pool: 'fleet', name });
      const agent = spawnNode(
        ['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, name!), '--slots', '8', '--engine', 'none', '--capacity', declared!],
        { BERTH_NODE_TOKEN: created.body.secret },
      );
      agents.push(agent);
      await agent.waitFor(new RegExp(`online as ${name}`));
    }
  }, 60_000);
  afterAll(async () => {
    for (const agent of agents) await agent.kill('SIGKILL');
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('a lease goes to the node left with the most free capacity', async () => {
    const id = await lease();
    expect((await reaches(s.url, BOOTSTRAP, id, 'ready')).node).toBe('big');
    expect(await withinCapacity()).toEqual({ small: 0, big: 1 });
  });

  it('leases at once fill every node to its capacity and no further; the rest wait saying what they need', async () => {
    // Room for 2 on small and 3 more on big: 5 of these 7.
    await Promise.all(Array.from({ length: 7 }, () => lease()));
    const settled = await poll('5 more ready and 2 waiting for room', async () => {
      const all = await envs();
      const waiting = all.filter((e) => e.state === 'pending' && /no node has/.test(e.waiting ?? ''));
      return all.filter((e) => e.state === 'ready').length === 6 && waiting.length === 2 ? waiting : undefined;
    });
    expect(settled.map((e) => e.waiting!.replace(/, .*$/, ''))).toEqual([
      'pool fleet: no node has 1 CPU and 2GiB memory free',
      'pool fleet: no node has 1 CPU and 2GiB memory free',
    ]);
    expect(await withinCapacity()).toEqual(capacityCpus());
  });

  it('an environment that ends gives its room to the next waiting lease', async () => {
    const onSmall = (await envs()).find((e) => e.state === 'ready' && e.node === 'small')!;
    const next = (await envs()).filter((e) => e.state === 'pending').at(-1)!;
    expect((await admin.del(`/v1/environments/${onSmall.id}`)).status).toBe(200);
    expect((await reaches(s.url, BOOTSTRAP, next.id, 'ready')).node).toBe('small');
    expect(await withinCapacity()).toEqual(capacityCpus());
  });

  it('a lease larger than any node waits, naming what it needs', async () => {
    const id = await lease('huge');
    const said = await poll('the huge lease to say why it waits', async () => {
      const env = (await admin.get(`/v1/environments/${id}`)).body as Env;
      expect(env.state).toBe('pending');
      return env.waiting?.includes('64 CPUs') ? env.waiting : undefined;
    });
    expect(said).toMatch(/^pool fleet: no node has 64 CPUs and 2GiB memory free, /);
  });

  it.runIf(backend === 'postgres')('two instances placing at once over-commit no node', async () => {
    for (const e of await envs()) if (['pending', 'ready'].includes(e.state)) await admin.del(`/v1/environments/${e.id}`);
    await poll('every lease to end', async () => ((await envs()).every((e) => ['stopped', 'failed'].includes(e.state)) ? true : undefined));
    const peer = await s.startPeer();
    const other = client(() => peer.url, BOOTSTRAP);
    const created = await Promise.all(
      Array.from({ length: 8 }, (_, i) => (i % 2 ? admin : other).post('/v1/environments', { template: 'sized' })),
    );
    expect(created.map((c) => c.status)).toEqual(Array(8).fill(202));
    await poll('6 ready and 2 waiting for room', async () => {
      const live = (await envs()).filter((e) => ['pending', 'starting', 'ready'].includes(e.state));
      const ready = live.filter((e) => e.state === 'ready').length;
      const waiting = live.filter((e) => /no node has/.test(e.waiting ?? '')).length;
      return ready === 6 && waiting === 2 ? true : undefined;
    });
    expect(await withinCapacity()).toEqual(capacityCpus());
  });

  const capacityCpus = () => Object.fromEntries(Object.entries(capacityOf).map(([name, c]) => [name, c.cpus]));

  it("among nodes with room, one whose engine holds the lease's image comes before one with more room", async () => {
    const stands: Awaited<ReturnType<typeof nodeChannel>>[] = [];
    const heartbeat = setInterval(() => {
      for (const stand of stands) stand.send({ type: 'heartbeat' });
    }, 250);
    try {
      for (const [name, capacity, images] of [
        ['roomy', { cpus: 8, memory: 16 * GIB }, []],
        ['stocked', { cpus: 2, memory: 4 * GIB }, [IMAGE]],
      ] as const) {
        const created = await admin.post('/v1/nodes', { pool: 'pics', name });
        const stand = await nodeChannel(s.url, created.body.secret);
        stands.push(stand);
        stand.send({ type: 'hello', slots: 2, environments: [], capacity, engine: 'unix:///run/stand.sock' });
        expect(await stand.next()).toMatchObject({ type: 'welcome', images: [IMAGE] });
        stand.send({ type: 'images-held', images });
        // It prepares what it is given at once (files only), so no question to it is left waiting.
        void (async () => {
          for (;;) {
            const message = await stand.next();
            if (message.type === 'prepare') stand.send({ type: 'reply', reply: message.reply, runtime: 'files' });
          }
        })();
      }
      // GET /v1/nodes shows what each holds.
      await poll('the stocked node to say it holds the image', async () => {
        const nodes = (await admin.get('/v1/nodes')).body.nodes as { name: string; images: string[] }[];
        return nodes.find((n) => n.name === 'stocked')?.images.includes(IMAGE) ? true : undefined;
      });
      // The node holding the image while it has room (2 CPUs: two leases), then the roomy one.
      const placedOn = async () => (await reaches(s.url, BOOTSTRAP, await lease('pictured'), 'ready')).node;
      expect(await placedOn()).toBe('stocked');
      expect(await placedOn()).toBe('stocked');
      expect(await placedOn()).toBe('roomy');
    } finally {
      clearInterval(heartbeat);
      for (const stand of stands) stand.ws.close();
    }
  });
});
