import { afterAll, beforeAll, expect, it } from 'vitest';
import { graphql } from './gql';
import { openApiValidator } from './helpers/openapi';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const EnvironmentQuery = graphql(`query TestEnvironmentStoppedBy($id: String!) { environment(id: $id) { id state stoppedBy } }`);
const EnvironmentRuntimeQuery = graphql(`
  query TestEnvironmentRuntime($id: String!) {
    environment(id: $id) { id image resources { cpus memory pids disk } network workdir runtime }
  }
`);
const TemplatesQuery = graphql(`
  query TestTemplatesRuntime { templates { name image resources { cpus memory pids disk } network workdir env } }
`);

describeBackends('environments', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let check: ReturnType<typeof openApiValidator>;

  beforeAll(async () => {
    s = await startServer(backend);
    check = openApiValidator((await admin.get('/v1/openapi.json')).body);
  });
  afterAll(() => s?.stop());

  it('leases an environment: 202 pending, then starting, ready on a node', async () => {
    const res = await admin.post('/v1/environments', { template: 'default', labels: { team: 'infra' } });
    check('POST', '/v1/environments', res);
    expect(res.status).toBe(202);
    const env = res.body.environment;
    expect(res.body.sandboxConfig).toBeUndefined();
    expect(env).toMatchObject({
      id: expect.stringMatching(/^env_/),
      name: expect.stringMatching(/^[a-z]+-[a-z]+-\d{4}$/),
      template: 'default',
      state: 'pending',
      pool: 'default',
      labels: { team: 'infra' },
      project: 'default',
      createdBy: 'admin@berth.local',
      idle: '30m0s',
      hard: '6h0m0s',
      exports: [],
      shares: [],
    });
    expect(env.created).toMatch(ISO);
    expect(Date.parse(env.expires) - Date.parse(env.created)).toBe(6 * 3600_000);
    expect(env.node).toBeUndefined();
    const ready = await untilState(s, BOOTSTRAP, env.id, 'ready');
    check('GET', `/v1/environments/${env.id}`, { status: 200, body: ready, headers: new Headers() });
    expect(ready.node).toMatch(/^default-\d$/);
    expect(ready.readyMs).toBeGreaterThanOrEqual(200);
    expect(Date.parse(ready.ready) - Date.parse(ready.created)).toBe(ready.readyMs);
    const byName = await admin.get(`/v1/environments/${env.name}`);
    expect(byName.body).toEqual(ready);
    // Nothing waited ahead of it, so its create placed it on a node in the create's own
    // transaction (its first two versions were written by one: the rows' xmin), pending first.
    const log = await s.app.deps.prisma.$queryRaw<{ version: number; state: string; tx: string }[]>`
      SELECT version, state, xmin::text AS tx FROM "EnvironmentEvent" WHERE "environmentId" = ${env.id} ORDER BY seq`;
    expect(log.map((e) => [e.version, e.state])).toEqual([
      [1, 'pending'],
      [2, 'starting'],
      [3, 'ready'],
    ]);
    expect(log[1]!.tx).toBe(log[0]!.tx);
    expect(log[2]!.tx).not.toBe(log[1]!.tx);
  });

  it('validates creation input with 404 and 422', async () => {
    const missing = await admin.post('/v1/environments', { template: 'nope' });
    expect(missing).toMatchObject({ status: 404, body: { code: 'no_template' } });
    // It names what can be leased instead.
    expect(missing.body.error).toMatch(/^template "nope" not found; templates: .*\bdefault\b/);
    const bad: [object, string][] = [
      [{ template: 'default', labels: { 'bad key!': 'x' } }, 'labels'],
      [{ template: 'default', hard: '25h' }, '24h'],
      [{ template: 'default', idle: 'soon' }, 'idle'],
      [{ template: 'default', idle: '7h', hard: '6h' }, 'idle'],
      [{ template: 'default', project: 'Not A Project' }, 'project'],
      [{ template: 'default', snapshot: 'has space' }, 'snapshot'],
      [{ template: 'default', shares: { src: 'x' } }, 'sandbox'],
      [{ template: 'default', labels: 'x' }, 'labels: must be an object'],
    ];
    for (const [body, mention] of bad) {
      const res = await admin.post('/v1/environments', body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(res.body.code).toBe('invalid');
      expect(res.body.error).toContain(mention);
    }
    expect((await admin.post('/v1/environments', { template: 'default', hard: '24h', idle: '24h' })).status).toBe(202);
    expect((await admin.post('/v1/environments', {})).status).toBe(422);
  });

  it('stops an environment: stopping, then stopped, node freed; idempotent', async () => {
    const { body } = await admin.post('/v1/environments', { template: 'default' });
    const ready = await untilState(s, BOOTSTRAP, body.environment.id, 'ready');
    const del = await admin.del(`/v1/environments/${ready.id}`);
    check('DELETE', `/v1/environments/${ready.id}`, del);
    expect(del.status).toBe(200);
    expect(del.body.environment.state).toBe('stopping');
    const stopped = await untilState(s, BOOTSTRAP, ready.id, 'stopped');
    expect(stopped.stopped).toMatch(ISO);
    expect(stopped.error).toBeUndefined();
    const node = await s.app.deps.prisma.node.findUnique({ where: { id: ready.node } });
    expect(node?.environmentId).not.toBe(ready.id);
    const again = await admin.del(`/v1/environments/${ready.id}`);
    expect(again).toMatchObject({ status: 200, body: { environment: { state: 'stopped', stopped: stopped.stopped } } });
  });

  it('records who ended an environment: the person or API key that deleted it, nobody for a time-out', async () => {
    const byPerson = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
    const stopping = await admin.del(`/v1/environments/${byPerson.id}`);
    expect(stopping.body.environment).toMatchObject({ state: 'stopping', stoppedBy: 'admin@berth.local' });
    check('DELETE', `/v1/environments/${byPerson.id}`, stopping);
    expect(await untilState(s, BOOTSTRAP, byPerson.id, 'stopped')).toMatchObject({ stoppedBy: 'admin@berth.local' });
    // Deleting again changes nothing, not even who.
    const key = await admin.post('/v1/keys', { name: `reaper-${backend}` });
    const reaper = client(url, key.body.secret);
    expect((await reaper.del(`/v1/environments/${byPerson.id}`)).body.environment.stoppedBy).toBe('admin@berth.local');

    const byKey = (await reaper.post('/v1/environments', { template: 'default' })).body.environment;
    await reaper.del(`/v1/environments/${byKey.id}`);
    const ended = await untilState(s, BOOTSTRAP, byKey.id, 'stopped');
    expect(ended.stoppedBy).toBe(`reaper-${backend}`);
    const gql = await admin.gql(EnvironmentQuery, { id: byKey.id });
    expect(gql.body.data?.environment?.stoppedBy).toBe(`reaper-${backend}`);

    const timedOut = (await admin.post('/v1/environments', { template: 'default', idle: '1m', hard: '2m' })).body.environment;
    await untilState(s, BOOTSTRAP, timedOut.id, 'ready');
    s.clock.advance(3 * 60_000);
    const idled = await untilState(s, BOOTSTRAP, timedOut.id, 'stopped');
    expect(idled.stoppedBy).toBeUndefined();
    expect(idled.error).toMatch(/time-out/);
  });

  it('records commands newest first, counts them as activity and refuses bad ones', async () => {
    const { body } = await admin.post('/v1/environments', { template: 'default' });
    const env = await untilState(s, BOOTSTRAP, body.environment.id, 'ready');
    const first = await admin.post(`/v1/environments/${env.id}/execs`, { command: 'make build', exitCode: 0, durationMs: 1200 });
    check('POST', `/v1/environments/${env.id}/execs`, first);
    expect(first.status).toBe(201);
    expect(first.body.exec).toMatchObject({
      id: expect.any(Number),
      lease: env.id,
      actor: 'admin@berth.local',
      command: 'make build',
      exitCode: 0,
      durationMs: 1200,
    });
    await admin.post(`/v1/environments/${env.name}/execs`, { command: 'make test', exitCode: 2, durationMs: 30 });
    const list = await admin.get(`/v1/environments/${env.id}/execs`);
    check('GET', `/v1/environments/${env.id}/execs`, list);
    expect(list.body.execs.map((e: { command: string }) => e.command)).toEqual(['make test', 'make build']);
    const after = await admin.get(`/v1/environments/${env.id}`);
    expect(Date.parse(after.body.idleUntil)).toBeGreaterThan(Date.parse(env.idleUntil));
    for (const bad of [
      { command: '', exitCode: 0, durationMs: 1 },
      { command: 'x', exitCode: 1.5, durationMs: 1 },
      { command: 'x', exitCode: 0, durationMs: -1 },
      { command: 'x', exitCode: 0, durationMs: 2 ** 31 },
      { command: 'x', exitCode: '0', durationMs: 1 },
      { command: 'x', durationMs: 1 },
    ]) {
      expect((await admin.post(`/v1/environments/${env.id}/execs`, bad)).status, JSON.stringify(bad)).toBe(422);
    }
    expect((await admin.post('/v1/environments/env_unknown/execs', { command: 'x', exitCode: 0, durationMs: 1 })).status).toBe(404);
    await admin.del(`/v1/environments/${env.id}`);
    await untilState(s, BOOTSTRAP, env.id, 'stopped');
    const late = await admin.post(`/v1/environments/${env.id}/execs`, { command: 'x', exitCode: 0, durationMs: 1 });
    expect(late).toMatchObject({ status: 409, body: { code: 'invalid_transition' } });
  });

  it('ends environments at their idle and hard time-outs, saying why, across a restart', async () => {
    const idle = (await admin.post('/v1/environments', { template: 'default', idle: '10m', hard: '1h' })).body.environment;
    const hard = (await admin.post('/v1/environments', { template: 'default', idle: '50m', hard: '1h' })).body.environment;
    await untilState(s, BOOTSTRAP, idle.id, 'ready');
    await untilState(s, BOOTSTRAP, hard.id, 'ready');
    await s.restart();
    s.clock.advance(9 * 60_000);
    await admin.post(`/v1/environments/${hard.id}/keepalive`);
    await s.app.deps.background.tick();
    expect((await admin.get(`/v1/environments/${idle.id}`)).body.state).toBe('ready');
    s.clock.advance(2 * 60_000);
    const idled = await untilState(s, BOOTSTRAP, idle.id, 'stopped');
    expect(idled.error).toBe('idle time-out: no activity for 10m0s');
    expect((await admin.get(`/v1/environments/${hard.id}`)).body.state).toBe('ready');
    s.clock.advance(50 * 60_000);
    const ended = await untilState(s, BOOTSTRAP, hard.id, 'stopped');
    expect(ended.error).toBe('hard time-out: the 1h0m0s lease ended');
  });

  it('lists with filters and cursor pagination, newest first', async () => {
    const made = [];
    for (let i = 0; i < 3; i++)
      made.push((await admin.post('/v1/environments', { template: 'node', labels: { batch: 'list', i: String(i) } })).body.environment);
    const page1 = await admin.get('/v1/environments?label=batch=list&limit=2');
    check('GET', '/v1/environments', page1);
    expect(page1.body.environments.map((e: { id: string }) => e.id)).toEqual([made[2].id, made[1].id]);
    expect(page1.body.next).toEqual(expect.any(String));
    const page2 = await admin.get(`/v1/environments?label=batch=list&limit=2&cursor=${encodeURIComponent(page1.body.next)}`);
    expect(page2.body.environments.map((e: { id: string }) => e.id)).toEqual([made[0].id]);
    expect(page2.body.next).toBeUndefined();
    const both = await admin.get('/v1/environments?label=batch=list&label=i=1');
    expect(both.body.environments.map((e: { id: string }) => e.id)).toEqual([made[1].id]);
    const byTemplate = await admin.get('/v1/environments?template=node&state=live');
    expect(byTemplate.body.environments.every((e: { template: string }) => e.template === 'node')).toBe(true);
    expect((await admin.get('/v1/environments?state=sleeping')).status).toBe(422);
    expect((await admin.get('/v1/environments?limit=abc')).status).toBe(422);
  });

  it('keeps other organizations out', async () => {
    const { body } = await admin.post('/v1/environments', { template: 'default' });
    const { createOrganization } = await import('../src/modules/organizations/service');
    const other = client(url, (await createOrganization(s.app.deps.prisma, `iso-${backend}`, 'x@iso.test')).secret);
    const foreign = await other.get(`/v1/environments/${body.environment.id}`);
    const unknown = await other.get('/v1/environments/env_doesnotexist');
    expect(foreign.status).toBe(404);
    expect(foreign.body.error.replace(body.environment.id, 'X')).toBe(unknown.body.error.replace('env_doesnotexist', 'X'));
    expect((await other.get(`/v1/environments/${body.environment.name}`)).status).toBe(404);
    expect((await other.del(`/v1/environments/${body.environment.id}`)).status).toBe(404);
    expect((await other.get(`/v1/environments/${body.environment.id}/execs`)).status).toBe(404);
    expect((await other.get('/v1/environments')).body.environments).toEqual([]);
  });

  it('shows what an environment was leased with: image, resources, network and workdir of its template', async () => {
    const res = await admin.post('/v1/environments', { template: 'node' });
    check('POST', '/v1/environments', res);
    const env = res.body.environment;
    const node = {
      image: 'docker.io/library/node:20-bookworm',
      resources: { cpus: 2, memory: '4GiB', pids: 4096, disk: '16GiB' },
      network: 'egress',
      workdir: '/workspace/app',
    };
    expect(env).toMatchObject(node);
    expect(env.runtime).toBeUndefined();
    expect(env).not.toHaveProperty('envVars');
    expect(env).not.toHaveProperty('env');
    const got = await admin.get(`/v1/environments/${env.id}`);
    check('GET', `/v1/environments/${env.id}`, got);
    expect(got.body).toMatchObject(node);
    const gql = await admin.gql(EnvironmentRuntimeQuery, { id: env.id });
    expect(gql.body.data?.environment).toEqual({ id: env.id, ...node, runtime: null });
    const listed = await admin.get('/v1/environments?template=node');
    check('GET', '/v1/environments', listed);
    expect(listed.body.environments.find((e: { id: string }) => e.id === env.id)).toMatchObject(node);

    // A template that sets little: the defaults, and only the limits it sets.
    const spec = { pool: 'default', idle: '10m', hard: '1h', resources: { memory: '512MiB' }, env: { MODE: 'test' } };
    const put = await admin.put('/v1/templates/bare', spec);
    check('PUT', '/v1/templates/bare', put);
    expect(put.body.template).toMatchObject({
      name: 'bare',
      resources: { memory: '512MiB' },
      network: 'none',
      workdir: '/',
      env: { MODE: 'test' },
    });
    expect(put.body.template.image).toBeUndefined();
    const bare = (await admin.post('/v1/environments', { template: 'bare' })).body.environment;
    expect(bare).toMatchObject({ resources: { memory: '512MiB' }, network: 'none', workdir: '/' });
    expect(bare.image).toBeUndefined();
    expect(Object.keys(bare.resources)).toEqual(['memory']);
    expect((await admin.gql(EnvironmentRuntimeQuery, { id: bare.id })).body.data?.environment).toMatchObject({
      image: null,
      resources: { cpus: null, memory: '512MiB', pids: null, disk: null },
    });

    // Fixed at creation: a later edit of the template changes new leases only.
    await admin.put('/v1/templates/bare', { ...spec, image: 'busybox', network: 'egress', workdir: '/srv//app/' });
    expect((await admin.get(`/v1/environments/${bare.id}`)).body).toMatchObject({ network: 'none', workdir: '/' });
    const again = (await admin.post('/v1/environments', { template: 'bare' })).body.environment;
    expect(again).toMatchObject({ image: 'docker.io/library/busybox:latest', network: 'egress', workdir: '/srv/app' });
    for (const id of [env.id, bare.id, again.id]) await admin.del(`/v1/environments/${id}`);
  });

  it('lists the runtime fields of templates and refuses bad ones, naming the field', async () => {
    const list = await admin.get('/v1/templates');
    check('GET', '/v1/templates', list);
    expect(list.body.templates.find((t: { name: string }) => t.name === 'rust')).toMatchObject({
      image: 'docker.io/library/rust:1',
      network: 'egress',
      workdir: '/workspace/src',
      env: { CARGO_TERM_COLOR: 'never' },
    });
    const gql = await admin.gql(TemplatesQuery);
    expect(gql.body.data?.templates?.find((t) => t.name === 'node')).toMatchObject({
      image: 'docker.io/library/node:20-bookworm',
      network: 'egress',
      resources: { cpus: 2, memory: '4GiB', pids: 4096, disk: '16GiB' },
      env: { NODE_ENV: 'development', CI: 'true' },
    });
    // The shipped default holds files only: it works on a machine that reaches no registry.
    expect(gql.body.data?.templates?.find((t) => t.name === 'default')).toMatchObject({ image: null, network: 'none', env: {} });

    const spec = { pool: 'default', idle: '10m', hard: '1h' };
    const bad: [object, string][] = [
      [{ image: 'Node:20' }, 'image: "Node:20" must be lowercase in its repository name'],
      [{ image: `node@sha256:${'a'.repeat(63)}` }, 'image: '],
      [{ resources: { memory: '12XB' } }, 'resources.memory: "12XB" is not a size such as "512MiB" or "8GiB"'],
      [{ resources: { memory: '1MiB' } }, 'resources.memory: "1MiB" is less than the 6MiB minimum'],
      [{ resources: { disk: '100TiB' } }, 'resources.disk: "100TiB" exceeds the 64TiB maximum'],
      [{ resources: { cpus: 100 } }, 'resources.cpus: must be a number from 0.1 to 64'],
      [{ resources: { pids: 1 } }, 'resources.pids: must be an integer >= 16'],
      [{ resources: { swap: '1GiB' } }, 'resources.swap: unknown field'],
      [{ network: 'host' }, 'network: must be "none" or "egress" (got "host")'],
      [{ workdir: 'app' }, 'workdir: "app" must be an absolute path'],
      [{ workdir: '/a/../b' }, 'workdir: "/a/../b" must not contain ".."'],
      [{ env: { 'NOT-A-NAME': 'x' } }, 'env.NOT-A-NAME: "NOT-A-NAME" is not a variable name'],
      [{ env: { N: 1 } }, 'env.N: must be a string'],
      [{ env: { BIG: 'x'.repeat(5000) } }, 'env: holds 5005 bytes (names + values + 2 each); at most 4096 bytes'],
    ];
    for (const [fields, message] of bad) {
      const res = await admin.put('/v1/templates/broken', { ...spec, ...fields });
      check('PUT', '/v1/templates/broken', res);
      expect(res.status, JSON.stringify(fields)).toBe(422);
      expect(res.body.code).toBe('invalid');
      expect(res.body.error.startsWith(message), `${res.body.error} / ${message}`).toBe(true);
    }
    expect((await admin.get('/v1/templates')).body.templates.map((t: { name: string }) => t.name)).not.toContain('broken');
  });

  it("shows another organization the catalog's template, never this organization's own version", async () => {
    const own = {
      pool: 'large',
      idle: '10m',
      hard: '1h',
      image: 'registry.example.com/private/rust:secret',
      resources: { cpus: 3 },
      workdir: '/private',
      env: { PRIVATE_TOKEN: 'hush' },
    };
    expect((await admin.put('/v1/templates/rust', own)).status).toBe(201);
    expect((await admin.put('/v1/templates/mine-only', own)).status).toBe(201);
    const { createOrganization } = await import('../src/modules/organizations/service');
    const other = client(url, (await createOrganization(s.app.deps.prisma, `rt-${backend}`, 'x@rt.test')).secret);
    const listed = await other.get('/v1/templates');
    check('GET', '/v1/templates', listed);
    expect(JSON.stringify(listed.body)).not.toMatch(/private|hush|PRIVATE_TOKEN|mine-only/);
    expect(listed.body.templates.find((t: { name: string }) => t.name === 'rust')).toMatchObject({
      image: 'docker.io/library/rust:1',
      workdir: '/workspace/src',
    });
    const gql = await other.gql(TemplatesQuery);
    expect(JSON.stringify(gql.body)).not.toMatch(/private|hush|PRIVATE_TOKEN|mine-only/);
    const env = (await other.post('/v1/environments', { template: 'rust' })).body.environment;
    expect(env).toMatchObject({ image: 'docker.io/library/rust:1', workdir: '/workspace/src', network: 'egress' });
    const refused = (await other.post('/v1/environments', { template: 'mine-only' })).body;
    expect(refused.code).toBe('no_template');
    // The templates it lists are the caller's organization's and the catalog's only.
    expect(refused.error.split('; templates: ')[1]).not.toMatch(/mine-only|private|hush/);
    const mine = (await admin.post('/v1/environments', { template: 'rust' })).body.environment;
    expect(mine).toMatchObject({ image: 'registry.example.com/private/rust:secret', resources: { cpus: 3 }, workdir: '/private' });
    expect((await other.get(`/v1/environments/${mine.id}`)).status).toBe(404);
    expect((await other.gql(EnvironmentRuntimeQuery, { id: mine.id })).body.data?.environment ?? null).toBeNull();
    await other.del(`/v1/environments/${env.id}`);
    await admin.del(`/v1/environments/${mine.id}`);
  });
});

it('refuses to start on a bad templates file, naming the field', async () => {
  const { writeFile, mkdtemp } = await import('node:fs/promises');
  const { join } = await import('node:path');
  const { tmpdir } = await import('node:os');
  const dir = await mkdtemp(join(tmpdir(), 'berth-tpl-'));
  const file = join(dir, 'templates.json');
  await writeFile(
    file,
    JSON.stringify({ pools: [{ name: 'p', hotNodes: 1, maxQueued: 1 }], templates: [{ name: 't', pool: 'p', idle: '1m', hard: '25h' }] }),
  );
  await expect(startServer('pglite', { TEMPLATES_FILE: file })).rejects.toThrow(/templates\[0\]\.hard/);
});
