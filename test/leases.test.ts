import { print } from 'graphql';
import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { graphql } from './gql';
import { openApiValidator } from './helpers/openapi';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';
import { primeSubscribers } from './helpers/subscriptions';

/** How long an environment of these templates may take to become ready. */
const READY = { timeout: 15_000, interval: 50 };

const templatesFile = new URL('./fixtures/templates-small.json', import.meta.url).pathname;
const WatchEnvironment = graphql(`subscription TestWatchEnvironment($id: String!) { environment(id: $id) { id state node error } }`);
const WatchOrg = graphql(`subscription TestWatchOrg($template: String) { environments(filter: { template: $template }) { id state } }`);

describeBackends('queue, quotas and live state', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend, { TEMPLATES_FILE: templatesFile });
  });
  afterAll(() => s?.stop());

  it('answers 503 when the pool queue is full, keeping the environment as failed', async () => {
    const first = (await admin.post('/v1/environments', { template: 'quick' })).body.environment;
    await s.app.deps.background.tick();
    const queued = [
      await admin.post('/v1/environments', { template: 'quick' }),
      await admin.post('/v1/environments', { template: 'quick' }),
    ];
    expect(queued.map((r) => r.status)).toEqual([202, 202]);
    const refused = await admin.post('/v1/environments', { template: 'quick' });
    expect(refused.status).toBe(503);
    expect(refused.body).toEqual({ error: expect.stringContaining('queue of pool tiny is full'), code: 'queue_full' });
    const id = /(env_[a-z0-9]+)/.exec(refused.body.error)![1];
    const failed = await admin.get(`/v1/environments/${id}`);
    expect(failed.body).toMatchObject({ state: 'failed', error: expect.stringContaining('full'), stopped: expect.any(String) });
    // The queue drains in order as the node frees up.
    await admin.del(`/v1/environments/${first.id}`);
    await s.app.deps.background.tick();
    const states = await Promise.all(queued.map((r) => admin.get(`/v1/environments/${r.body.environment.id}`)));
    expect(states.map((r) => r.body.state)).toEqual([expect.stringMatching(/^(starting|ready)$/), 'pending']);
    for (const r of queued) await admin.del(`/v1/environments/${r.body.environment.id}`);
    await s.app.deps.background.tick();
  });

  it('sets quotas (admins only) and admits exactly maxLeases of 50 racing creates', async () => {
    const doc = openApiValidator((await admin.get('/v1/openapi.json')).body);
    const member = client(url, (await admin.post('/v1/tokens', { email: 'q@example.com' })).body.secret);
    expect((await member.put('/v1/quotas/many', { maxLeases: 1 })).status).toBe(403);
    expect((await admin.put('/v1/quotas/nope', { maxLeases: 1 })).status).toBe(404);
    expect((await admin.put('/v1/quotas/many', { maxLeases: -1 })).status).toBe(422);
    expect((await admin.put('/v1/quotas/many', { maxLeases: 1, hard: '25h' })).status).toBe(422);
    const set = await admin.put('/v1/quotas/many', { maxLeases: 7, idle: '15m', hard: '1h' });
    doc('PUT', '/v1/quotas/many', set);
    expect(set).toMatchObject({
      status: 200,
      body: { quota: { template: 'many', maxLeases: 7, running: 0, idle: '15m0s', hard: '1h0m0s' } },
    });

    const results = await Promise.all(Array.from({ length: 50 }, () => admin.post('/v1/environments', { template: 'many' })));
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((x) => x === 202)).toHaveLength(7);
    expect(statuses.filter((x) => x === 429)).toHaveLength(43);
    expect(results.find((r) => r.status === 429)!.body).toEqual({ error: expect.stringContaining('quota'), code: 'quota' });
    const admitted = results.find((r) => r.status === 202)!.body.environment;
    expect(admitted).toMatchObject({ idle: '15m0s', hard: '1h0m0s' });
    expect((await admin.post('/v1/environments', { template: 'many', hard: '2h' })).status).toBe(422);

    const listed = await admin.get('/v1/quotas');
    doc('GET', '/v1/quotas', listed);
    expect(listed.body.quotas).toEqual([{ template: 'many', maxLeases: 7, running: 7, idle: '15m0s', hard: '1h0m0s', warnings: [] }]);

    await admin.put('/v1/quotas/*', { maxLeases: 8 });
    expect((await admin.post('/v1/environments', { template: 'other' })).status).toBe(202);
    expect((await admin.post('/v1/environments', { template: 'other' })).status).toBe(429);
    const all = (await admin.get('/v1/quotas')).body.quotas;
    expect(all.find((q: { template: string }) => q.template === '*')).toMatchObject({ maxLeases: 8, running: 8, hard: '24h0m0s' });
    for (const r of results.filter((x) => x.status === 202)) await admin.del(`/v1/environments/${r.body.environment.id}`);
    await admin.put('/v1/quotas/*', { maxLeases: 1000 });
    await admin.put('/v1/quotas/many', { maxLeases: 1000 });
  });

  it('lets graphql-ws subscribers watch pending → starting → ready → stopping → stopped', async () => {
    const ws = createClient({
      url: `${url().replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    type Seen = { id: string; state: string };
    const watch = (query: string, variables: Record<string, unknown>, into: Seen[], untilId: () => string | undefined) =>
      new Promise<void>((resolve, reject) => {
        const stop = ws.subscribe<Record<string, Seen>>(
          { query, variables },
          {
            next: (v) => {
              if (!v.data) return reject(new Error(JSON.stringify(v.errors)));
              const env = Object.values(v.data)[0]!;
              into.push(env);
              if (env.id === untilId() && env.state === 'stopped') {
                stop();
                resolve();
              }
            },
            error: reject,
            complete: () => resolve(),
          },
        );
      });
    const org: Seen[] = [];
    let id: string | undefined;
    const orgDone = watch(print(WatchOrg), { template: 'many' }, org, () => id);
    // graphql-ws acknowledges no subscription: leases made and ended until the watcher has seen one.
    await primeSubscribers(
      async () => {
        const primer = (await admin.post('/v1/environments', { template: 'many' })).body.environment.id;
        await admin.del(`/v1/environments/${primer}`);
      },
      () => org.length > 0,
    );
    const env = (await admin.post('/v1/environments', { template: 'many' })).body.environment;
    id = env.id;
    const one: Seen[] = [];
    const oneDone = watch(print(WatchEnvironment), { id: env.name }, one, () => env.id);
    // Watching one environment starts with its state then.
    await vi.waitFor(() => expect(one.length).toBeGreaterThan(0), READY);
    await vi.waitFor(async () => expect((await admin.get(`/v1/environments/${env.id}`)).body.state).toBe('ready'), READY);
    await admin.del(`/v1/environments/${env.id}`);
    await Promise.all([orgDone, oneDone]);
    await ws.dispose();
    const states = (list: Seen[]) => list.filter((e) => e.id === env.id).map((e) => e.state);
    expect(states(org)).toEqual(['pending', 'starting', 'ready', 'stopping', 'stopped']);
    // Subscribed (by name) after it was created: its state then, then every later one, in order, once.
    expect(['pending', 'starting', 'ready', 'stopping', 'stopped'].slice(-states(one).length)).toEqual(states(one));
    expect(states(one).at(-1)).toBe('stopped');
  });

  it('fails an environment stuck in starting past 10x its start time (at least a minute), saying why', async () => {
    const env = (await admin.post('/v1/environments', { template: 'slow' })).body.environment;
    await s.app.deps.background.tick();
    expect((await admin.get(`/v1/environments/${env.id}`)).body.state).toBe('starting');
    // As if the process was down past the bound: on the next look the start has timed out.
    s.clock.advance(100_001);
    await s.app.deps.background.tick();
    const failed = (await admin.get(`/v1/environments/${env.id}`)).body;
    expect(failed).toMatchObject({ state: 'failed', error: expect.stringMatching(/^did not become ready within 1m40s on node wide-\d+$/) });
    expect(await s.app.deps.prisma.node.count({ where: { environmentId: env.id } })).toBe(0);
  });

  it('never loses a DELETE that races the claim of its environment', async () => {
    const ids = await Promise.all(
      Array.from({ length: 20 }, async () => {
        const env = (await admin.post('/v1/environments', { template: 'many' })).body.environment;
        // The create nudges the scheduler; stop while the claim may be under way.
        await admin.del(`/v1/environments/${env.id}`);
        return env.id as string;
      }),
    );
    for (let i = 0; i < 5; i++) await s.app.deps.background.tick();
    const states = await Promise.all(ids.map(async (id) => (await admin.get(`/v1/environments/${id}`)).body.state));
    expect(states).toEqual(ids.map(() => 'stopped'));
  });

  it('leaves node work another instance has claimed alone, until the claim is stale', async () => {
    const env = (await admin.post('/v1/environments', { template: 'many' })).body.environment;
    await s.app.deps.background.tick();
    await admin.del(`/v1/environments/${env.id}`);
    // Let this instance's own release finish first, so only the claim below is in play.
    await untilState(s, BOOTSTRAP, env.id, 'stopped');
    // As if another instance were releasing it right now.
    await s.app.deps.prisma.environment.update({ where: { id: env.id }, data: { state: 'stopping', workClaim: s.clock.now() } });
    await s.app.deps.background.tick();
    expect((await admin.get(`/v1/environments/${env.id}`)).body.state).toBe('stopping');
    s.clock.advance(10 * 60_000 + 1);
    await s.app.deps.background.tick();
    expect((await admin.get(`/v1/environments/${env.id}`)).body.state).toBe('stopped');
  });

  it('lists templates and lets admins set their own versions', async () => {
    const list = await admin.get('/v1/templates');
    expect(list.body.templates.map((t: { name: string }) => t.name)).toEqual(['many', 'other', 'quick', 'slow']);
    expect(list.body.templates[0]).toEqual({
      name: 'many',
      version: 1,
      source: 'catalog',
      status: 'ready',
      warnings: [],
      lifecycle: [],
      pool: 'wide',
      startMs: 50,
      idle: '30m0s',
      hard: '6h0m0s',
      shares: [],
      services: [],
      resources: {},
      network: 'none',
      workdir: '/',
      shell: '/bin/sh',
      env: {},
      warm: 0,
    });
    const spec = { pool: 'wide', startMs: 20, idle: '5m', hard: '1h', services: [{ service: 'redis', target: '127.0.0.1:6379' }] };
    const member = client(url, (await admin.post('/v1/tokens', { email: 'tpl@example.com' })).body.secret);
    expect((await member.put('/v1/templates/cache', spec)).status).toBe(403);
    expect(await admin.put('/v1/templates/cache', { ...spec, hard: '30h' })).toMatchObject({
      status: 422,
      body: { code: 'invalid', error: expect.stringContaining('hard') },
    });
    expect((await admin.put('/v1/templates/cache', { ...spec, pool: 'nowhere' })).status).toBe(422);
    const put = await admin.put('/v1/templates/cache', spec);
    expect(put).toMatchObject({ status: 201, body: { template: { name: 'cache', pool: 'wide', idle: '5m0s', hard: '1h0m0s' } } });
    const env = (await admin.post('/v1/environments', { template: 'cache' })).body.environment;
    expect(env).toMatchObject({ template: 'cache', idle: '5m0s', hard: '1h0m0s' });
    await admin.del(`/v1/environments/${env.id}`);
    // Another organization does not see it.
    const { createOrganization } = await import('../src/modules/organizations/service');
    const other = client(url, (await createOrganization(s.app.deps.prisma, `tpl-${backend}`, 'o@tpl.test')).secret);
    expect((await other.get('/v1/templates')).body.templates.map((t: { name: string }) => t.name)).not.toContain('cache');
    expect((await other.post('/v1/environments', { template: 'cache' })).body.code).toBe('no_template');
  });

  it.skipIf(backend !== 'postgres')('runs as two instances on one PostgreSQL: shared quota, queue and live state', async () => {
    const peer = await s.startPeer();
    const onPeer = client(() => peer.url, BOOTSTRAP);
    await admin.put('/v1/quotas/many', { maxLeases: 6 });
    const ws = createClient({
      url: `${peer.url.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    const seen: { id: string; state: string }[] = [];
    let target: string | undefined;
    const done = new Promise<void>((resolve, reject) => {
      ws.subscribe<{ environments: { id: string; state: string } }>(
        { query: print(WatchOrg), variables: { template: 'many' } },
        {
          next: (v) => {
            if (!v.data) return reject(new Error(JSON.stringify(v.errors)));
            seen.push(v.data.environments);
            if (v.data.environments.id === target && v.data.environments.state === 'stopped') resolve();
          },
          error: reject,
          complete: () => resolve(),
        },
      );
    });
    const primers = await primeSubscribers(
      async () => {
        const primer = (await onPeer.post('/v1/environments', { template: 'many' })).body.environment.id as string;
        await onPeer.del(`/v1/environments/${primer}`);
        return primer;
      },
      () => seen.length > 0,
    );
    // Ended before the quota is counted.
    for (const primer of primers) {
      await vi.waitFor(async () => expect((await admin.get(`/v1/environments/${primer}`)).body.state).toBe('stopped'), READY);
    }
    const live = (await admin.get('/v1/quotas')).body.quotas.find((q: { template: string }) => q.template === 'many').running;
    const racing = await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 ? admin : onPeer).post('/v1/environments', { template: 'many' })),
    );
    expect(racing.filter((r) => r.status === 202)).toHaveLength(6 - live);
    const env = racing.find((r) => r.status === 202)!.body.environment;
    target = env.id;
    await vi.waitFor(async () => expect((await onPeer.get(`/v1/environments/${env.id}`)).body.state).toBe('ready'), READY);
    await admin.del(`/v1/environments/${env.id}`);
    await done;
    await ws.dispose();
    expect(seen.filter((e) => e.id === env.id).map((e) => e.state)).toEqual(['pending', 'starting', 'ready', 'stopping', 'stopped']);
    // Each environment is on its own node: no node was claimed twice across the instances.
    const nodes = await s.app.deps.prisma.node.findMany({ where: { environmentId: { not: null } } });
    expect(new Set(nodes.map((n) => n.environmentId)).size).toBe(nodes.length);
    for (const r of racing.filter((x) => x.status === 202)) await admin.del(`/v1/environments/${r.body.environment.id}`);
  });
});
