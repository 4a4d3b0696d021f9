// After kill -9 of the server, no container outlives its environment: the restarted server
// adopts the running ones, fails the live ones whose container ended (with why), and removes the
// containers it owns that belong to no live environment.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { containersOf, describeContainers, engine, removeOwned, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { type BerthProc, berthExec, startBerth } from './helpers/processes';
import { BOOTSTRAP, client } from './helpers/server';
import { reaches } from './helpers/states';

/** How long the restarted server may take to remove containers (the engine answers each). */
const WAIT = { timeout: 30_000, interval: 100 };

describeContainers('containers across a kill -9 of the server', () => {
  let dir: string;
  let env: Record<string, string>;
  let berth: BerthProc;
  /** This server's owner label (its containers carry it). */
  let owner = '';
  const api = () => client(() => berth.url, BOOTSTRAP);
  const state = async (id: string) => (await api().get(`/v1/environments/${id}`)).body;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-restart-'));
    const templates = await writeCatalog(dir, [{ name: 'box', image: TEST_IMAGE, startMs: 0 }]);
    env = { DATA_DIR: join(dir, 'data'), BOOTSTRAP_TOKEN: BOOTSTRAP, TEMPLATES_FILE: templates, DOCKER_HOST: engine() };
    berth = await startBerth(env);
  });
  afterAll(async () => {
    await berth?.kill('SIGKILL');
    await removeOwned(owner);
    await rm(dir, { recursive: true, force: true });
  });

  it('adopts the running, fails the stopped with the reason, removes the unknown', async () => {
    const lease = async () =>
      reaches(berth.url, BOOTSTRAP, (await api().post('/v1/environments', { template: 'box' })).body.environment.id, 'ready');
    const kept = await lease();
    const stopped = await lease();
    const [keptContainer] = await containersOf(kept.id);
    owner = await podman('inspect', '--format', '{{index .Config.Labels "berth.owner"}}', keptContainer!);

    await berth.kill('SIGKILL');
    // While no server runs: one environment's container ends, and a container of this server's
    // appears that belongs to no environment of it.
    await podman('kill', (await containersOf(stopped.id))[0]!);
    const ghost = await podman(
      'run',
      '-d',
      '--ulimit',
      'nofile=1024:8192',
      '--ulimit',
      'nproc=16384',
      '--label',
      `berth.owner=${owner}`,
      '--label',
      'berth.environment=env_ghost0000',
      '--label',
      'berth.template=box',
      TEST_IMAGE,
      'sleep',
      '600',
    );
    berth = await startBerth(env);

    const failed = await reaches(berth.url, BOOTSTRAP, stopped.id, 'failed');
    expect(failed.error).toMatch(/its container ended: the image's command exited with code 137/);
    await vi.waitFor(async () => expect([...(await containersOf('env_ghost0000')), ...(await containersOf(stopped.id))]).toEqual([]), WAIT);
    expect(await podman('ps', '-aq', '--filter', `id=${ghost}`)).toBe('');

    // The adopted one still runs commands, and is watched again: its container's end fails it.
    expect((await state(kept.id)).state).toBe('ready');
    expect(await berthExec(berth.url, BOOTSTRAP, kept.id, 'echo', 'still here')).toMatchObject({ code: 0, stdout: 'still here\n' });
    await podman('kill', keptContainer!);
    const ended = await reaches(berth.url, BOOTSTRAP, kept.id, 'failed');
    expect(ended.error).toMatch(/exited with code 137/);
    await vi.waitFor(async () => expect(await containersOf(kept.id)).toEqual([]), WAIT);
  });
});
