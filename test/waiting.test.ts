// A reason for every wait: a pending environment says why (`waiting`, REST and GraphQL, pushed by
// the subscriptions), in words that follow the scheduler's own rule; a quota above what its pool
// can run says so (`warnings`). Another organization's leases count, never by name.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { print } from 'graphql';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { graphql } from './gql';
import { writeCatalog } from './helpers/catalog';
import { openApiValidator } from './helpers/openapi';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const EnvironmentWaiting = graphql(`query TestEnvironmentWaiting($id: String!) { environment(id: $id) { id state waiting } }`);
const WatchWaiting = graphql(`subscription TestWatchWaiting($id: String!) { environment(id: $id) { id state waiting } }`);
const SetQuotaWarnings = graphql(`
  mutation TestSetQuotaWarnings($template: String!, $input: QuotaInput!) { setQuota(template: $template, input: $input) { template maxLeases warnings } }
`);

/** How long a start may take to finish once the test's clock passed it (the jobs run on each tick). */
const MOVED = { timeout: 20_000, interval: 100 };

interface Seen {
  id: string;
  state: string;
  waiting: string | null;
}

describeBackends('why a lease waits', (backend) => {
  let s: TestServer;
  let dir: string;
  let node: Proc | undefined;
  const admin = client(() => s.url, BOOTSTRAP);
  const tick = () => s.app.deps.background.tick();
  const get = async (id: string) => (await admin.get(`/v1/environments/${id}`)).body;
  const lease = async (who: ReturnType<typeof client>, template: string) => {
    const res = await who.post('/v1/environments', { template });
    expect(res.status).toBe(202);
    return res.body.environment as { id: string; name: string };
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-waiting-'));
    const templates = await writeCatalog(
      dir,
      [
        { name: 'remote', pool: 'remote', startMs: 0 },
        // Starts take ten minutes of the test's clock: busy slots stay `starting` until it moves.
        { name: 'small', pool: 'small', startMs: 600_000 },
        { name: 'shared', pool: 'shared', startMs: 0 },
        { name: 'long', pool: 'long', startMs: 600_000 },
      ],
      [
        { name: 'remote', hotNodes: 0, maxQueued: 10 },
        { name: 'small', hotNodes: 2, maxQueued: 10 },
        { name: 'shared', hotNodes: 2, maxQueued: 10 },
        { name: 'long', hotNodes: 1, maxQueued: 30 },
      ],
    );
    s = await startServer(backend, { TEMPLATES_FILE: templates });
  });
  afterAll(async () => {
    await node?.kill();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** Every version of one environment the GraphQL subscription (SSE) delivers, from the instance at `url`. */
  async function watch(id: string, url = s.url) {
    const controller = new AbortController();
    const res = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: print(WatchWaiting), variables: { id } }),
      signal: controller.signal,
    });
    expect(res.status).toBe(200);
    const seen: Seen[] = [];
    /** Called after each version arrives. */
    const arrived = new Set<() => void>();
    const reading = (async () => {
      const reader = res.body!.getReader();
      let text = '';
      for (;;) {
        const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
        if (done) return;
        text += new TextDecoder().decode(value);
        for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
          const data = text
            .slice(0, end)
            .split('\n')
            .find((line) => line.startsWith('data:'));
          text = text.slice(end + 2);
          const environment = data ? JSON.parse(data.slice(5))?.data?.environment : undefined;
          if (environment) {
            seen.push(environment);
            for (const look of arrived) look();
          }
        }
      }
    })();
    return {
      seen,
      /** The first version that passes `check`, as soon as it arrives. */
      until: (check: (env: Seen) => boolean) =>
        new Promise<Seen>((resolve) => {
          const look = () => {
            const found = seen.find(check);
            if (!found) return;
            arrived.delete(look);
            resolve(found);
          };
          arrived.add(look);
          look();
        }),
      async close() {
        controller.abort();
        await reading;
      },
    };
  }

  it('a lease no node serves says so, in REST and GraphQL, and is pushed the moment a node comes online', async () => {
    const none =
      'no node serves pool remote: it has no built-in nodes and your organization has registered none for it; an admin adds one with POST /v1/nodes and runs berth node there';
    const doc = openApiValidator((await admin.get('/v1/openapi.json')).body);
    // Said from the start: in the 202, and in the lease's first version, which the scheduler keeps.
    const leased = await admin.post('/v1/environments', { template: 'remote' });
    doc('POST', '/v1/environments', leased);
    expect(leased).toMatchObject({ status: 202, body: { environment: { state: 'pending', waiting: none } } });
    const env = leased.body.environment as { id: string; name: string };
    await tick();
    const version = async () => (await s.app.deps.prisma.environment.findUniqueOrThrow({ where: { id: env.id } })).version;
    expect(await version()).toBe(1);
    const got = await admin.get(`/v1/environments/${env.id}`);
    doc('GET', `/v1/environments/${env.id}`, got);
    expect(got.body).toMatchObject({ state: 'pending', waiting: none });
    expect((await admin.gql(EnvironmentWaiting, { id: env.name })).body.data?.environment).toEqual({
      id: env.id,
      state: 'pending',
      waiting: none,
    });
    const listed = await admin.get('/v1/environments?state=pending&template=remote');
    doc('GET', '/v1/environments?state=pending&template=remote', listed);
    expect(listed.body.environments).toEqual([expect.objectContaining({ id: env.id, waiting: none })]);

    // A node registered but not connected is named: it is the organization's own.
    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'builder' });
    expect(created.status).toBe(201);
    const watched = await watch(env.id);
    await watched.until((e) => e.waiting === none);
    await tick();
    expect((await get(env.id)).waiting).toBe('no online node serves pool remote: node builder has not connected yet');
    await watched.until((e) => e.waiting === 'no online node serves pool remote: node builder has not connected yet');

    // `berth node` connects: the lease is placed, and its subscriber hears it with no reason left.
    node = spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--slots', '3', '--engine', 'none'], {
      BERTH_NODE_TOKEN: created.body.secret,
    });
    await node.waitFor(/online as builder/);
    const placed = await watched.until((e) => e.state !== 'pending');
    expect(placed).toMatchObject({ state: expect.stringMatching(/^(starting|ready)$/), waiting: null });
    await watched.close();
    // Every version the subscriber got while pending carried a reason; none after.
    expect(watched.seen.filter((e) => e.state === 'pending').every((e) => e.waiting)).toBe(true);
    expect((await get(env.id)).waiting).toBeUndefined();
    await admin.del(`/v1/environments/${env.id}`);
  });

  it('a full pool says how busy and how many leases are ahead, counting other organizations without naming them', async () => {
    const other = await createOrganization(s.app.deps.prisma, 'neighbour', 'admin@neighbour.example');
    const theirs = client(() => s.url, other.secret);
    const running = [await lease(admin, 'small'), await lease(admin, 'small')];
    await tick();
    for (const env of running) expect((await get(env.id)).state).toBe('starting');
    const their1 = await lease(theirs, 'small');
    const mine1 = await lease(admin, 'small');
    const mine2 = await lease(admin, 'small');
    await tick();
    expect((await theirs.get(`/v1/environments/${their1.id}`)).body.waiting).toBe(
      'pool small: 2 of 2 nodes busy (2 starting), next in line',
    );
    expect((await get(mine1.id)).waiting).toBe('pool small: 2 of 2 nodes busy (2 starting), 1 lease ahead');
    expect((await get(mine2.id)).waiting).toBe('pool small: 2 of 2 nodes busy (2 starting), 2 leases ahead');
    // Nothing of another organization in the words: no name, id or environment of theirs.
    const words = [(await get(mine1.id)).waiting, (await theirs.get(`/v1/environments/${their1.id}`)).body.waiting].join(' ');
    for (const secret of [their1.id, their1.name, 'neighbour', ...running.flatMap((e) => [e.id, e.name])])
      expect(words).not.toContain(secret);

    // Nothing moves, nothing is written: no new version, no event.
    const versions = async () =>
      (
        await s.app.deps.prisma.environment.findMany({ where: { id: { in: [their1.id, mine1.id, mine2.id] } }, select: { version: true } })
      ).map((e) => e.version);
    const before = await versions();
    // Each said so from its creation, in the words the scheduler then agreed with: one version each.
    expect(before).toEqual([1, 1, 1]);
    const events = await s.app.deps.prisma.environmentEvent.count();
    await tick();
    await tick();
    expect(await versions()).toEqual(before);
    expect(await s.app.deps.prisma.environmentEvent.count()).toBe(events);

    // The starts finish: the words change, and are pushed (on PostgreSQL by another instance, whose
    // own scheduler looks at the same queue and agrees).
    const peer = backend === 'postgres' ? await s.startPeer() : undefined;
    const watched = await watch(mine2.id, peer?.url);
    s.clock.advance(600_000);
    for (const env of running) {
      await vi.waitFor(async () => {
        const { state } = await get(env.id);
        if (state !== 'ready') await tick();
        expect(state).toBe('ready');
      }, MOVED);
    }
    await watched.until((e) => e.waiting === 'pool small: 2 of 2 nodes busy, 2 leases ahead');
    // One ends: the lease at the front is placed (another organization's, first in line), the others move up.
    await admin.del(`/v1/environments/${running[0]!.id}`);
    await tick();
    expect((await theirs.get(`/v1/environments/${their1.id}`)).body).toMatchObject({ state: 'starting' });
    expect((await get(mine1.id)).waiting).toBe('pool small: 2 of 2 nodes busy (1 starting), next in line');
    await watched.until((e) => e.waiting === 'pool small: 2 of 2 nodes busy (1 starting), 1 lease ahead');
    await watched.close();
    await peer?.stop();
    for (const env of [running[1]!, mine1, mine2]) await admin.del(`/v1/environments/${env.id}`);
    await theirs.del(`/v1/environments/${their1.id}`);
  });

  it("an organization at its share of the built-in nodes is told so, while another's leases are served", async () => {
    const org = await createOrganization(s.app.deps.prisma, 'sharer', 'admin@sharer.example');
    await s.app.deps.prisma.organization.update({ where: { id: org.org.id }, data: { poolShare: 0.5 } });
    const theirs = client(() => s.url, org.secret);
    const first = await lease(theirs, 'shared');
    const second = await lease(theirs, 'shared');
    const third = await lease(theirs, 'shared');
    await tick();
    const read = async (id: string) => (await theirs.get(`/v1/environments/${id}`)).body;
    expect((await read(first.id)).state).not.toBe('pending');
    const held = 'pool shared: your organization holds its share of the built-in nodes (1 of 2 at pool share 0.5)';
    expect((await read(second.id)).waiting).toBe(`${held}, next in line`);
    expect((await read(third.id)).waiting).toBe(`${held}, 1 lease ahead`);
    // The other hot node is free for everyone else.
    const mine = await lease(admin, 'shared');
    await tick();
    expect((await get(mine.id)).state).not.toBe('pending');
    for (const env of [first, second, third]) await theirs.del(`/v1/environments/${env.id}`);
    await admin.del(`/v1/environments/${mine.id}`);
  });

  it('past 20 leases ahead a position is a bucket: one lease leaving rewrites the front of the queue, not all of it', async () => {
    const busy = await lease(admin, 'long');
    await tick();
    expect((await get(busy.id)).state).toBe('starting');
    const queue: { id: string; name: string }[] = [];
    for (let i = 0; i < 22; i++) queue.push(await lease(admin, 'long'));
    await tick();
    const rows = async () =>
      new Map(
        (await s.app.deps.prisma.environment.findMany({ where: { id: { in: queue.map((e) => e.id) } } })).map((e) => [
          e.id,
          { waiting: e.waiting, version: e.version },
        ]),
      );
    const before = await rows();
    expect(before.get(queue[0]!.id)?.waiting).toBe('pool long: 1 of 1 node busy (1 starting), next in line');
    expect(before.get(queue[19]!.id)?.waiting).toBe('pool long: 1 of 1 node busy (1 starting), 19 leases ahead');
    expect(before.get(queue[20]!.id)?.waiting).toBe('pool long: 1 of 1 node busy, at least 20 leases ahead');
    expect(before.get(queue[21]!.id)?.waiting).toBe('pool long: 1 of 1 node busy, at least 20 leases ahead');

    await admin.del(`/v1/environments/${queue[0]!.id}`);
    await tick();
    const after = await rows();
    expect(after.get(queue[20]!.id)?.waiting).toBe('pool long: 1 of 1 node busy (1 starting), 19 leases ahead');
    // The last one's words did not change: it was not written again.
    expect(after.get(queue[21]!.id)).toEqual(before.get(queue[21]!.id));
    for (const env of [busy, ...queue]) await admin.del(`/v1/environments/${env.id}`);
  });

  it('warns when a quota is above what its pool can ever run of the organization', async () => {
    const doc = openApiValidator((await admin.get('/v1/openapi.json')).body);
    // The node of the first test holds 3 slots of pool remote, which has no built-in nodes.
    const over = await admin.put('/v1/quotas/remote', { maxLeases: 5 });
    doc('PUT', '/v1/quotas/remote', over);
    expect(over).toMatchObject({
      status: 200,
      body: {
        quota: {
          template: 'remote',
          maxLeases: 5,
          warnings: [
            "pool remote can run at most 3 of your organization's environments at once (no built-in nodes; 3 slots on 1 node of your organization): leases of remote past 3 wait in its queue",
          ],
        },
      },
    });
    expect((await admin.put('/v1/quotas/remote', { maxLeases: 3 })).body.quota.warnings).toEqual([]);
    // The listing says the same of every quota as it stands now.
    await admin.put('/v1/quotas/small', { maxLeases: 9 });
    const listed = await admin.get('/v1/quotas');
    doc('GET', '/v1/quotas', listed);
    expect(listed.body.quotas).toEqual([
      expect.objectContaining({ template: 'remote', warnings: [] }),
      expect.objectContaining({
        template: 'small',
        warnings: [
          "pool small can run at most 2 of your organization's environments at once (its 2 built-in nodes; no node of your organization): leases of small past 2 wait in its queue",
        ],
      }),
    ]);
    // `*`: every pool together (default 32 + remote 3 + small 2 + shared 2 + long 1).
    const all = await admin.gql(SetQuotaWarnings, { template: '*', input: { maxLeases: 41 } });
    expect(all.body.data?.setQuota).toEqual({
      template: '*',
      maxLeases: 41,
      warnings: [
        'your organization can run at most 40 environments at once across all pools (default 32, remote 3, small 2, shared 2, long 1): leases past 40 wait in the queues',
      ],
    });
    // An organization's pool share counts; a pool with neither built-in nor own nodes runs none of it.
    const org = await createOrganization(s.app.deps.prisma, 'quotas', 'admin@quotas.example');
    await s.app.deps.prisma.organization.update({ where: { id: org.org.id }, data: { poolShare: 0.5 } });
    const theirs = client(() => s.url, org.secret);
    expect((await theirs.gql(SetQuotaWarnings, { template: 'shared', input: { maxLeases: 2 } })).body.data?.setQuota?.warnings).toEqual([
      "pool shared can run at most 1 of your organization's environments at once (1 of its 2 built-in nodes at pool share 0.5; no node of your organization): leases of shared past 1 wait in its queue",
    ]);
    expect((await theirs.put('/v1/quotas/remote', { maxLeases: 1 })).body.quota.warnings).toEqual([
      "pool remote can run none of your organization's environments (no built-in nodes; no node of your organization): leases of remote wait until an admin adds a node with POST /v1/nodes and runs berth node there",
    ]);
    for (const t of ['remote', 'small', '*']) await admin.put(`/v1/quotas/${encodeURIComponent(t)}`, { maxLeases: 1000 });
  });

  it('a lease of a pool the catalog dropped at a restart says that nothing will take it', async () => {
    await node?.kill();
    const mine = [await lease(admin, 'shared'), await lease(admin, 'shared'), await lease(admin, 'shared')];
    await writeCatalog(dir, [{ name: 'small', pool: 'small', startMs: 0 }], [{ name: 'small', hotNodes: 2, maxQueued: 10 }]);
    await s.restart();
    await tick();
    const words = 'pool shared is no longer in the templates catalog: no node will take it; stop it and lease again';
    const pending = (await admin.get('/v1/environments?state=pending&template=shared')).body.environments;
    expect(pending.length).toBeGreaterThan(0);
    for (const env of pending) expect(env.waiting).toBe(words);
    for (const env of mine) expect((await admin.del(`/v1/environments/${env.id}`)).status).toBe(200);
  });
});
