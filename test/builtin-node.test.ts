// The built-in pool is a node like any other (docs/agents.md, "The built-in node"): `npm start`'s
// server runs `berth node --builtin` as a process of its own, which holds the engine and the
// environments' folders. A real server process and the test engine: the node is listed; the server
// process opens no file under DATA_DIR/workspaces; kill -9 of the node is a node loss the API does
// not notice (every /healthz answers), after which the node is back online, its running
// environment adopted (exec works) and the one whose container ended meanwhile failed naming the
// node; a clean stop of the server removes the warm containers and keeps the live ones, which the
// next start adopts. No container outlives its environment.
import { mkdtemp, readdir, readlink, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { containersOf, describeContainers, engine, ownedBy, removeOwned, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { type BerthProc, berthExec, startBerth } from './helpers/processes';
import { BOOTSTRAP, client } from './helpers/server';
import { reaches } from './helpers/states';

/** The bound the issue sets for the node to be back: a wait longer than it fails the test. */
const BACK_ONLINE = { timeout: 15_000, interval: 100 };
const WAIT = { timeout: 30_000, interval: 100 };

describeContainers('the built-in node, a process of its own', () => {
  let dir: string;
  let env: Record<string, string>;
  let berth: BerthProc;
  let owner = '';
  const api = () => client(() => berth.url, BOOTSTRAP);
  const state = async (id: string) => (await api().get(`/v1/environments/${id}`)).body;
  const lease = async (template = 'box') => {
    const id = (await api().post('/v1/environments', { template })).body.environment.id as string;
    await reaches(berth.url, BOOTSTRAP, id, 'ready');
    return state(id);
  };
  const builtin = async () => (await api().get('/v1/nodes')).body.nodes.find((n: { builtin: boolean }) => n.builtin);
  /** The node process's id, from the server's start banner. */
  const nodePid = async () => Number((await berth.waitFor(/Built-in node \(pid (\d+)\)/))[1]);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-builtin-'));
    const templates = await writeCatalog(dir, [
      { name: 'box', image: TEST_IMAGE, startMs: 0 },
      { name: 'warmbox', image: TEST_IMAGE, startMs: 0, warm: 1 },
    ]);
    env = { DATA_DIR: join(dir, 'data'), BOOTSTRAP_TOKEN: BOOTSTRAP, TEMPLATES_FILE: templates, DOCKER_HOST: engine() };
    berth = await startBerth(env);
  });
  afterAll(async () => {
    await berth?.kill('SIGKILL');
    await removeOwned(owner);
    await rm(dir, { recursive: true, force: true });
  });

  it('is listed as the built-in node, and the server process opens no file of an environment', async () => {
    const node = await builtin();
    expect(node).toMatchObject({ name: 'builtin', builtin: true, pool: '', state: 'online', engine: engine() });
    expect(node.slots).toBeGreaterThan(0);
    // It cannot be removed: it stops with the server.
    expect((await api().del(`/v1/nodes/${node.id}`)).body.code).toBe('conflict');

    const ready = await lease();
    const [container] = await containersOf(ready.id);
    owner = await podman('inspect', '--format', '{{index .Config.Labels "berth.owner"}}', container!);
    // A command runs in it meanwhile; the server's open files are none of the environment's.
    const running = berthExec(berth.url, BOOTSTRAP, ready.id, 'sh', '-c', 'echo x > /workspace/src/f; sleep 1');
    const workspaces = join(env.DATA_DIR!, 'workspaces');
    const server = berth.proc.pid!;
    const opened = async () => {
      const links: string[] = [];
      for (const fd of await readdir(`/proc/${server}/fd`).catch(() => [] as string[]))
        links.push(await readlink(`/proc/${server}/fd/${fd}`).catch(() => ''));
      return links;
    };
    expect((await opened()).filter((l) => l.startsWith(workspaces))).toEqual([]);
    expect(await running).toMatchObject({ code: 0 });
    expect((await opened()).filter((l) => l.startsWith(workspaces))).toEqual([]);
    await api().del(`/v1/environments/${ready.id}`);
    await reaches(berth.url, BOOTSTRAP, ready.id, 'stopped');
    await vi.waitFor(async () => expect(await containersOf(ready.id)).toEqual([]), WAIT);
  });

  it('a kill -9 of the node: the API answers throughout, the node is back, its environments adopted or failed naming it', async () => {
    const kept = await lease();
    const ended = await lease();
    const pid = await nodePid();

    // /healthz is asked without pause while the node is gone and until it is back.
    let polling = true;
    const latencies: number[] = [];
    const statuses = new Set<number>();
    const poll = (async () => {
      while (polling) {
        const started = performance.now();
        const res = await fetch(`${berth.url}/healthz`);
        await res.arrayBuffer();
        latencies.push(performance.now() - started);
        statuses.add(res.status);
      }
    })();
    process.kill(pid, 'SIGKILL');
    await berth.waitFor(/built-in node was killed \(SIGKILL\)/);
    // While no node runs: one environment's container ends.
    await podman('kill', (await containersOf(ended.id))[0]!);
    await berth.waitFor(/online as builtin/, berth.output().lastIndexOf('was killed (SIGKILL)'));
    await vi.waitFor(async () => expect((await builtin()).state).toBe('online'), BACK_ONLINE);
    polling = false;
    await poll;
    expect([...statuses]).toEqual([200]);
    latencies.sort((a, b) => a - b);
    console.log(
      `/healthz while the node restarted: ${latencies.length} answers, p50 ${latencies[Math.floor(latencies.length / 2)]!.toFixed(1)} ms, p99 ${latencies[Math.floor(latencies.length * 0.99)]!.toFixed(1)} ms`,
    );

    // Adopted: still ready, runs commands.
    expect((await state(kept.id)).state).toBe('ready');
    expect(await berthExec(berth.url, BOOTSTRAP, kept.id, 'echo', 'still here')).toMatchObject({ code: 0, stdout: 'still here\n' });
    // Failed, saying why and on which node.
    await reaches(berth.url, BOOTSTRAP, ended.id, 'failed');
    expect((await state(ended.id)).error).toMatch(new RegExp(`its container ended.*\\(node ${ended.node}\\)`));
    await vi.waitFor(async () => expect(await containersOf(ended.id)).toEqual([]), WAIT);

    await api().del(`/v1/environments/${kept.id}`);
    await reaches(berth.url, BOOTSTRAP, kept.id, 'stopped');
    await vi.waitFor(async () => expect(await containersOf(kept.id)).toEqual([]), WAIT);
  });

  it('a clean stop of the server removes the warm containers and keeps the live ones for the next start', async () => {
    await vi.waitFor(async () => expect((await builtin()).warm).toMatchObject([{ template: 'warmbox', state: 'ready' }]), WAIT);
    const live = await lease();
    expect((await ownedBy(owner)).some((n) => n.includes('warm'))).toBe(true);

    const pid = await nodePid();
    expect(await berth.kill('SIGTERM')).toBe(0);
    // The node process went with it.
    expect(() => process.kill(pid, 0)).toThrow();
    const left = await ownedBy(owner);
    expect(left.filter((n) => n.includes('warm'))).toEqual([]);
    expect((await containersOf(live.id)).length).toBe(1);

    berth = await startBerth(env);
    expect((await state(live.id)).state).toBe('ready');
    expect(await berthExec(berth.url, BOOTSTRAP, live.id, 'echo', 'adopted')).toMatchObject({ code: 0, stdout: 'adopted\n' });
    await api().del(`/v1/environments/${live.id}`);
    await reaches(berth.url, BOOTSTRAP, live.id, 'stopped');
    await vi.waitFor(async () => expect(await containersOf(live.id)).toEqual([]), WAIT);
  });
});
