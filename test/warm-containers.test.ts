// Warm templates on the built-in pool (docs/environments.md, "Warm templates"), with a real engine:
// a template's `warm: N` keeps N started containers before any lease, a lease claims one (named
// after the environment, its snapshot restored into it), the pool refills, a template change
// replaces them, `warm: 0` removes them; another organization never claims an organization's,
// an organization's stay within its share of the hot nodes, a lease of another template evicts
// one rather than waiting, and a bad `warm` is a 422 naming the field.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as pause } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { parseCatalog } from '../src/modules/templates/catalog';
import { containersOf, describeContainers, engine, removeOwned, TEST_IMAGE, TEST_USER_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';
import type { PollOptions } from './helpers/wait';

const METRICS_TOKEN = 'warm-containers-metrics-0123456789abcdef';
const SHARED = [{ name: 'src', direction: 'in', envPath: '/workspace/src' }];

/** The engine's warm containers (not yet claimed) of `template`: name, whether it runs, spec label. */
async function warmOf(template: string): Promise<{ name: string; running: boolean; spec: string }[]> {
  const list = async (...filters: string[]) =>
    (
      await podman(
        'ps',
        '-a',
        '--filter',
        'label=berth.warm',
        '--filter',
        `label=berth.template=${template}`,
        ...filters,
        '--format',
        '{{.Names}} {{.Labels}}',
      )
    )
      .split('\n')
      .filter((l) => l.startsWith('berth-warm-'));
  const up = new Set((await list('--filter', 'status=running')).map((l) => l.split(' ')[0]));
  return (await list()).map((line) => ({
    name: line.split(' ')[0]!,
    running: up.has(line.split(' ')[0]),
    spec: /berth\.spec:(\w+)/.exec(line)?.[1] ?? '',
  }));
}

const running = async (template: string) => (await warmOf(template)).filter((c) => c.running);

describeContainers('warm containers on the built-in node', () => {
  let s: TestServer;
  let dir: string;
  /** The server's log, one JSON line each. */
  const logged: string[] = [];
  const admin = client(() => s.url, BOOTSTRAP);
  /** Environment waits: the server's own timers do the work (no extra rounds of its jobs). */
  const onItsOwn: PollOptions = { timeout: 60_000, between: () => pause(50) };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-warm-'));
    const templates = await writeCatalog(
      dir,
      [
        { name: 'warmbox', image: TEST_USER_IMAGE, warm: 2, workdir: '/workspace', shares: SHARED },
        { name: 'twin', image: TEST_IMAGE, pool: 'small' },
        { name: 'tinywarm', image: TEST_IMAGE, pool: 'tiny', warm: 1 },
        { name: 'tinycold', image: TEST_IMAGE, pool: 'tiny' },
      ],
      [
        { name: 'small', hotNodes: 4, maxQueued: 10 },
        { name: 'tiny', hotNodes: 1, maxQueued: 10 },
      ],
    );
    s = await startServer(
      'pglite',
      { TEMPLATES_FILE: templates, DOCKER_HOST: engine(), POOL_ORG_SHARE: '0.5', METRICS_TOKEN },
      { logLines: (line) => void logged.push(line) },
    );
  }, 60_000);
  afterAll(async () => {
    const live = await admin.get('/v1/environments?state=live');
    for (const env of live.body.environments ?? []) await admin.del(`/v1/environments/${env.id}`);
    for (let i = 0; i < 30 && (await admin.get('/v1/environments?state=live')).body.environments?.length; i++) {
      await s.app.deps.background.tick();
    }
    await s?.stop();
    // What the server kept warm goes with it (a server stopped for good leaves its engine clean).
    await removeOwned(s.app.deps.builtin.owner);
    await rm(dir, { recursive: true, force: true });
  });

  /** What the metrics endpoint shows now. */
  async function scraped(): Promise<string> {
    return (await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).text();
  }

  async function sh(id: string, script: string): Promise<{ stdout: string; exitCode?: number }> {
    const res = await fetch(`${s.url}/v1/environments/${id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command: ['sh', '-c', script] }),
    });
    let stdout = '';
    let exitCode: number | undefined;
    for (const line of (await res.text()).split('\n').filter(Boolean)) {
      const item = JSON.parse(line);
      if (item.stream === 'stdout') stdout += Buffer.from(item.data, 'base64').toString();
      if (item.exitCode !== undefined) exitCode = item.exitCode;
    }
    return { stdout, exitCode };
  }

  it('keeps N started containers before any lease; a lease claims one, restored, and the pool refills', async () => {
    const wait = { timeout: 60_000, interval: 100 };
    await vi.waitFor(async () => expect(await running('warmbox')).toHaveLength(2), wait);
    // Never an environment; operators see them in the metrics.
    expect((await admin.get('/v1/environments?state=live')).body.environments).toEqual([]);
    await vi.waitFor(async () => {
      expect(await scraped()).toMatch(/^berth_warm_containers\{pool="default",template="warmbox",state="ready"\} 2$/m);
    }, wait);

    // A first lease saves a file to its snapshot; the next claims a warm container and gets it back.
    const first = await admin.post('/v1/environments', { template: 'warmbox', snapshot: 'warm-key' });
    const one = await untilState(s, BOOTSTRAP, first.body.environment.id, 'ready', onItsOwn);
    expect((await sh(one.id, 'echo kept > /workspace/src/kept')).exitCode).toBe(0);
    await admin.del(`/v1/environments/${one.id}`);
    await untilState(s, BOOTSTRAP, one.id, 'stopped', onItsOwn);
    await vi.waitFor(async () => expect(await running('warmbox')).toHaveLength(2), wait);
    const before = (await warmOf('warmbox')).map((c) => c.name);

    const made = await admin.post('/v1/environments', { template: 'warmbox', snapshot: 'warm-key' });
    const env = await untilState(s, BOOTSTRAP, made.body.environment.id, 'ready', onItsOwn);
    expect(env.readyMs).toEqual(expect.any(Number));
    expect(env.runtime).toBe('container');
    // The container is one of the warm ones, now named after the environment.
    const claimed = await podman('ps', '--filter', `name=^berth-${env.id}$`, '--format', '{{.Labels}}');
    expect(claimed).toMatch(/berth\.warm:/);
    expect(before.some((name) => claimed.includes(`berth.warm:${name.slice('berth-warm-'.length)}`))).toBe(true);
    // Restored, owned by the image's user, and commands run; its hostname is the template's name.
    const seen = await sh(env.id, 'cat /workspace/src/kept; stat -c %u /workspace/src/kept; id -u; hostname');
    expect(seen).toEqual({ stdout: 'kept\n1234\n1234\nwarmbox\n', exitCode: 0 });
    expect((await admin.get(`/v1/environments/${env.id}`)).body.restored).toMatchObject({ files: 1 });
    // The pool makes another, so two wait again besides the claimed one.
    await vi.waitFor(async () => expect(await running('warmbox')).toHaveLength(2), wait);
    await admin.del(`/v1/environments/${env.id}`);
    await untilState(s, BOOTSTRAP, env.id, 'stopped', onItsOwn);
    expect(await podman('ps', '-aq', '--filter', `name=^berth-${env.id}$`)).toBe('');
  });

  it("replaces an organization's warm containers when its template changes and removes them at warm: 0; another organization never claims them", async () => {
    const wait = { timeout: 60_000, interval: 100 };
    const body = { pool: 'small', image: TEST_IMAGE, idle: '30m', hard: '2h', warm: 1 };
    expect((await admin.put('/v1/templates/twin', body)).status).toBe(201);
    await vi.waitFor(async () => expect(await running('twin')).toHaveLength(1), wait);
    const [first] = await warmOf('twin');

    // Another organization leases the catalog's twin (the same container spec): it never takes ours.
    const other = await createOrganization(s.app.deps.prisma, 'warmother', 'boss@warm.example');
    const them = client(() => s.url, other.secret);
    const theirs = await them.post('/v1/environments', { template: 'twin' });
    expect(theirs.status).toBe(202);
    const ready = await untilState(s, other.secret, theirs.body.environment.id, 'ready', onItsOwn);
    expect(await containersOf(ready.id)).toHaveLength(1);
    expect((await warmOf('twin')).map((c) => c.name)).toEqual([first!.name]);
    expect((await them.get('/v1/environments?state=live')).body.environments.map((e: { id: string }) => e.id)).toEqual([ready.id]);
    await them.del(`/v1/environments/${ready.id}`);

    // A change of what the container is made from replaces it.
    expect((await admin.put('/v1/templates/twin', { ...body, env: { CHANGED: '1' } })).status).toBe(200);
    await vi.waitFor(async () => {
      const now = await running('twin');
      expect(now).toHaveLength(1);
      expect(now[0]!.spec).not.toBe(first!.spec);
    }, wait);
    expect((await admin.get('/v1/templates')).body.templates.find((t: { name: string }) => t.name === 'twin')).toMatchObject({ warm: 1 });

    expect((await admin.put('/v1/templates/twin', { ...body, warm: 0 })).status).toBe(200);
    await vi.waitFor(async () => expect(await warmOf('twin')).toEqual([]), wait);
  });

  it("keeps an organization's warm containers within its share of the hot nodes", async () => {
    // 4 hot nodes, POOL_ORG_SHARE 0.5: two of them at most, whatever the template asks.
    const body = { pool: 'small', image: TEST_IMAGE, idle: '30m', hard: '2h', warm: 4 };
    expect((await admin.put('/v1/templates/greedy', body)).status).toBe(201);
    await vi.waitFor(async () => expect(await running('greedy')).toHaveLength(2), { timeout: 60_000, interval: 100 });
    await s.app.deps.background.tick();
    expect(await warmOf('greedy')).toHaveLength(2);
    expect((await admin.put('/v1/templates/greedy', { ...body, warm: 0 })).status).toBe(200);
    await vi.waitFor(async () => expect(await warmOf('greedy')).toEqual([]), { timeout: 60_000, interval: 100 });
  });

  it("a lease of another template takes a warm container's slot rather than waiting", async () => {
    const wait = { timeout: 60_000, interval: 100 };
    await vi.waitFor(async () => expect(await running('tinywarm')).toHaveLength(1), wait);
    const made = await admin.post('/v1/environments', { template: 'tinycold' });
    const env = await untilState(s, BOOTSTRAP, made.body.environment.id, 'ready', onItsOwn);
    expect(await containersOf(env.id)).toHaveLength(1);
    expect(await warmOf('tinywarm')).toEqual([]);
    await admin.del(`/v1/environments/${env.id}`);
    await untilState(s, BOOTSTRAP, env.id, 'stopped', onItsOwn);
    // Once the slot is free again, the warm container comes back.
    await vi.waitFor(async () => expect(await running('tinywarm')).toHaveLength(1), wait);
  });

  it('makes one that could not be made, or whose command ended, again after a backoff that doubles', async () => {
    const wait = { timeout: 60_000, interval: 100 };
    const body = { pool: 'small', idle: '30m', hard: '2h', warm: 1 };
    const said = (template: string, seconds: number, why: RegExp) =>
      logged.some((line) => {
        const msg = String(JSON.parse(line).msg);
        const m = new RegExp(
          `^built-in node: the warm container of ${template} on slot \\S+ failed \\(tried again in ${seconds} s\\): (.*)$`,
        ).exec(msg);
        return m !== null && why.test(m[1]!);
      });

    // A container whose command ends (killed from outside, as a crash would end it): each end is
    // seen by the node's next look and waits twice as long as the one before, across makings.
    expect((await admin.put('/v1/templates/crashy', { ...body, image: TEST_IMAGE })).status).toBe(201);
    for (const seconds of [5, 10, 20]) {
      await vi.waitFor(async () => expect(await running('crashy')).toHaveLength(1), wait);
      await podman('kill', (await running('crashy'))[0]!.name);
      // The node watches it: its end is reported at once.
      await vi.waitFor(() => expect(said('crashy', seconds, /^its container ended$/), logged.slice(-5).join('\n')).toBe(true), wait);
      expect(await scraped()).toMatch(/^berth_warm_containers\{pool="small",template="crashy",state="failed"\} 1$/m);
      s.clock.advance(seconds * 1000);
      await s.app.deps.background.tick();
    }
    await vi.waitFor(async () => expect(await running('crashy')).toHaveLength(1), wait);

    // An image that cannot be pulled: the engine's words, tried again later each time.
    const image = 'localhost:1/berth-test/nowhere:1';
    expect((await admin.put('/v1/templates/unpullable', { ...body, image })).status).toBe(201);
    await vi.waitFor(() => expect(said('unpullable', 5, /^cannot pull image localhost:1\/berth-test\/nowhere:1: /)).toBe(true), wait);
    s.clock.advance(5000);
    await s.app.deps.background.tick();
    await vi.waitFor(() => expect(said('unpullable', 10, /^cannot pull image /)).toBe(true), wait);
    expect(await warmOf('unpullable')).toEqual([]);

    for (const name of ['crashy', 'unpullable'])
      expect((await admin.put(`/v1/templates/${name}`, { ...body, image: TEST_IMAGE, warm: 0 })).status).toBe(200);
    await vi.waitFor(async () => expect(await warmOf('crashy')).toEqual([]), wait);
  });

  it('refuses a warm outside 0-32 with 422 naming the field, over REST, GraphQL and the catalog', async () => {
    for (const warm of [33, -1, 'x', 1.5]) {
      const res = await admin.put('/v1/templates/bad', { pool: 'small', image: TEST_IMAGE, idle: '30m', hard: '2h', warm });
      expect(res.status, JSON.stringify(warm)).toBe(422);
      expect(res.body.code).toBe('invalid');
      expect(res.body.error).toMatch(/^warm: must be (an integer >= 0|at most 32)/);
    }
    const gql = await admin.post('/graphql', {
      query: 'mutation { putTemplate(name: "bad", spec: {pool: "small", idle: "30m", hard: "2h", warm: 33}) { name } }',
    });
    expect(gql.body.errors[0].message).toMatch(/^warm: must be at most 32/);
    expect(() =>
      parseCatalog(
        { pools: [{ name: 'p', hotNodes: 1, maxQueued: 1 }], templates: [{ name: 't', pool: 'p', idle: '1m', hard: '1h', warm: 33 }] },
        'x.json',
      ),
    ).toThrow('x.json: templates[0].warm: must be at most 32');
  });
});
