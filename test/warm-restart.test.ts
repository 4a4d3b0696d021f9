// Warm containers across a kill -9 of the server: the restarted server keeps the ones the database
// still wants (a lease claims one), removes those it no longer wants (here: the template asks
// fewer now), and leaves no container of its own that no slot or environment holds.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { describeContainers, engine, ownedBy, removeOwned, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { type BerthProc, startBerth } from './helpers/processes';
import { BOOTSTRAP, client } from './helpers/server';
import { reaches } from './helpers/states';

/** How long a server may take to start, keep or remove warm containers (the engine answers each). */
const WAIT = { timeout: 60_000, interval: 100 };
const POOLS = [{ name: 'tiny', hotNodes: 3, maxQueued: 10 }];

describeContainers('warm containers across a kill -9 of the server', () => {
  let dir: string;
  let env: Record<string, string>;
  let berth: BerthProc;
  let owner = '';
  const api = () => client(() => berth.url, BOOTSTRAP);
  /** This server's containers: name and whether it runs. */
  const ours = async () => (await ownedBy(owner)).sort();
  const warm = async () => (await ours()).filter((n) => n.startsWith('berth-warm-'));
  const catalog = (n: number) => writeCatalog(dir, [{ name: 'box', image: TEST_IMAGE, pool: 'tiny', warm: n }], POOLS);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-warm-restart-'));
    env = { DATA_DIR: join(dir, 'data'), BOOTSTRAP_TOKEN: BOOTSTRAP, TEMPLATES_FILE: await catalog(2), DOCKER_HOST: engine() };
    berth = await startBerth(env);
  });
  afterAll(async () => {
    await berth?.kill('SIGKILL');
    await removeOwned(owner);
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps the wanted ones, removes the rest, and a lease still claims one', async () => {
    const names = await vi.waitFor(async () => {
      const found = await podman('ps', '--filter', 'label=berth.warm', '--filter', 'label=berth.template=box', '--format', '{{.Names}}');
      const list = found.split('\n').filter(Boolean);
      expect(list).toHaveLength(2);
      return list;
    }, WAIT);
    owner = await podman('inspect', '--format', '{{index .Config.Labels "berth.owner"}}', names[0]!);

    await berth.kill('SIGKILL');
    // While no server runs, the template comes to ask for one only.
    await catalog(1);
    berth = await startBerth(env);

    await vi.waitFor(async () => expect(await warm()).toHaveLength(1), WAIT);
    expect(await ours()).toHaveLength(1);
    expect(names).toContain((await warm())[0]);

    const made = await api().post('/v1/environments', { template: 'box' });
    const id = made.body.environment.id as string;
    await reaches(berth.url, BOOTSTRAP, id, 'ready');
    const ready = (await api().get(`/v1/environments/${id}`)).body;
    expect(ready.runtime).toBe('container');
    // The one kept warm is the lease's now; another is made for the next.
    expect(await podman('ps', '--filter', `name=^berth-${id}$`, '--format', '{{.Labels}}')).toMatch(/berth\.warm:/);
    await vi.waitFor(async () => expect(await warm()).toHaveLength(1), WAIT);
  });
});
