// Warm containers across a kill -9 of the server: the restarted server keeps the ones the database
// still wants (a lease claims one), removes those it no longer wants (here: the template asks
// fewer now), and leaves no container of its own that no slot or environment holds. A claimed
// container still under its warm name (its node died before renaming it) takes its environment's.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { describeContainers, engine, ownedBy, removeOwned, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { type BerthProc, berthExec, startBerth } from './helpers/processes';
import { BOOTSTRAP, client } from './helpers/server';
import { reaches } from './helpers/states';

/** How long a server may take to start, keep or remove warm containers (the engine answers each). */
const WAIT = { timeout: 60_000, interval: 100 };
const POOLS = [{ name: 'tiny', hotNodes: 3, maxQueued: 10 }];
const METRICS = 'warm-restart-metrics-0123456789abcdef';

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
  /** Until the server counts a ready warm container of box (its node said so, not only the engine): a lease then claims it. */
  const readyWarm = () =>
    vi.waitFor(async () => {
      const res = await fetch(`${berth.url}/metrics`, { headers: { authorization: `Bearer ${METRICS}` } });
      expect(await res.text()).toMatch(/^berth_warm_containers\{pool="tiny",template="box",state="ready"\} 1$/m);
    }, WAIT);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-warm-restart-'));
    env = {
      DATA_DIR: join(dir, 'data'),
      BOOTSTRAP_TOKEN: BOOTSTRAP,
      TEMPLATES_FILE: await catalog(2),
      DOCKER_HOST: engine(),
      METRICS_TOKEN: METRICS,
    };
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

    await readyWarm();
    const made = await api().post('/v1/environments', { template: 'box' });
    const id = made.body.environment.id as string;
    await reaches(berth.url, BOOTSTRAP, id, 'ready');
    const ready = (await api().get(`/v1/environments/${id}`)).body;
    expect(ready.runtime).toBe('container');
    // The one kept warm is the lease's now; another is made for the next.
    // (It takes the lease's name just after the lease is ready.)
    await vi.waitFor(
      async () => expect(await podman('ps', '--filter', `name=^berth-${id}$`, '--format', '{{.Labels}}')).toMatch(/berth\.warm:/),
      WAIT,
    );
    await vi.waitFor(async () => expect(await warm()).toHaveLength(1), WAIT);
  });

  it('finishes the rename of a claimed warm container its node did not live to do', { timeout: 120_000 }, async () => {
    await readyWarm();
    const made = await api().post('/v1/environments', { template: 'box' });
    const id = made.body.environment.id as string;
    await reaches(berth.url, BOOTSTRAP, id, 'ready');
    const container = `berth-${id}`;
    const slot = await vi.waitFor(async () => {
      const label = await podman('inspect', '--format', '{{index .Config.Labels "berth.warm"}}', container);
      expect(label).not.toBe('');
      return label;
    }, WAIT);
    await berth.kill('SIGKILL');
    // As the node left it when killed between its answer and the engine's rename: the container
    // under its warm name, the note of the claim in the node's folder.
    await podman('rename', container, `berth-warm-${slot}`);
    const claims = join(env.DATA_DIR!, 'workspaces', 'claims');
    await mkdir(claims, { recursive: true });
    await writeFile(join(claims, slot), id);
    berth = await startBerth(env);

    await vi.waitFor(async () => expect(await ours()).toContain(container), WAIT);
    const ran = await berthExec(berth.url, BOOTSTRAP, id, 'echo', 'still here');
    expect(ran).toMatchObject({ code: 0, stdout: 'still here\n' });
    expect((await api().get(`/v1/environments/${id}`)).body.state).toBe('ready');
  });
});
