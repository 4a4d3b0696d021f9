import { rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { print } from 'graphql';
import { type Client, createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { graphql } from './gql';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';
import { primeSubscribers } from './helpers/subscriptions';

const WatchOne = graphql(`subscription TestWatchOneEnvironment($id: String!) { environment(id: $id) { id state } }`);
const WatchAll = graphql(`
  subscription TestWatchFilteredEnvironments($filter: EnvironmentFilter) { environments(filter: $filter) { id state labels template project sandbox } }
`);
const ListEnvironments = graphql(`
  query TestListFilteredEnvironments($filter: EnvironmentFilter) { environments(filter: $filter, first: 500) { nodes { id state } } }
`);

interface Seen {
  id: string;
  state: string;
}

interface Watched extends Seen {
  labels: Record<string, string>;
  template: string;
  project: string;
  sandbox?: string | null;
}

interface Filter {
  state?: string;
  template?: string;
  label?: string[];
  sandbox?: string;
  project?: string;
}

/** How long events may take to reach every subscriber. */
const DELIVERED = { timeout: 20_000, interval: 20 };
const LIVE = ['pending', 'starting', 'ready', 'stopping'];
const ENDED = ['stopped', 'failed'];
const same = (a: Seen) => (b: Seen) => a.id === b.id && a.state === b.state;

describeBackends('watching environments', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let ws: Client;

  beforeAll(async () => {
    s = await startServer(backend);
    ws = createClient({
      url: `${url().replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
  });
  afterAll(async () => {
    await ws?.dispose();
    await s?.stop();
  });

  /** One run of the scheduler with the clock a second further. */
  async function step() {
    s.clock.advance(1000);
    await s.app.deps.background.tick();
  }

  /**
   * Subscribes over server-sent events: the response arrives once the subscription listens, so
   * nothing committed afterwards can be missed. Collects every delivered environment.
   */
  async function watch(filter: Filter) {
    const controller = new AbortController();
    const res = await fetch(`${url()}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: print(WatchAll), variables: { filter } }),
      signal: controller.signal,
    });
    expect(res.status).toBe(200);
    const seen: Watched[] = [];
    let wake: () => void = () => undefined;
    const reading = (async () => {
      const reader = res.body!.getReader();
      let text = '';
      for (;;) {
        const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
        if (done) return;
        text += new TextDecoder().decode(value);
        let end = text.indexOf('\n\n');
        while (end >= 0) {
          const data = text
            .slice(0, end)
            .split('\n')
            .find((line) => line.startsWith('data:'));
          text = text.slice(end + 2);
          end = text.indexOf('\n\n');
          const payload = data ? JSON.parse(data.slice(5)) : undefined;
          if (payload?.data?.environments) seen.push(payload.data.environments);
          wake();
        }
      }
    })();
    return {
      seen,
      /** Waits until every one of `expected` was delivered. */
      async received(expected: Seen[]) {
        while (!expected.every((e) => seen.some(same(e)))) await new Promise<void>((r) => (wake = r));
      },
      /** What it delivered of these environments, as (id, state). */
      of(ids: string[]): Seen[] {
        return seen.filter((e) => ids.includes(e.id)).map(({ id, state }) => ({ id, state }));
      },
      async close() {
        controller.abort();
        await reading;
      },
    };
  }

  it('delivers live and ended environments to subscriptions filtered by state', async () => {
    const live = await watch({ state: 'live' });
    const ended = await watch({ state: 'ended' });
    const env = (await admin.post('/v1/environments', { template: 'default', labels: { case: `states-${backend}` } })).body.environment;
    await untilState(s, BOOTSTRAP, env.id, 'ready', { between: step });
    await admin.del(`/v1/environments/${env.id}`);
    await untilState(s, BOOTSTRAP, env.id, 'stopped', { between: step });
    const states = ['pending', 'starting', 'ready', 'stopping'].map((state) => ({ id: env.id, state }));
    await live.received(states);
    await ended.received([{ id: env.id, state: 'stopped' }]);
    expect(live.of([env.id])).toEqual(states);
    expect(ended.of([env.id])).toEqual([{ id: env.id, state: 'stopped' }]);
    await live.close();
    await ended.close();
  });

  it('gives every filter value the same meaning in the list and in the subscription', async () => {
    const box = (await admin.post('/v1/sandboxes', { name: `watch-box-${backend}` })).body.sandbox;
    const run = `run=agree-${backend}`;
    const filters: Filter[] = [
      { label: [run] },
      { label: [run], state: 'live' },
      { label: [run], state: 'ended' },
      { label: [run], state: 'ready' },
      { label: [run], state: 'stopping' },
      { label: [run], template: 'node' },
      { label: [run, 'team=a'] },
      { label: [run], sandbox: box.name },
      { label: [run], sandbox: box.id },
      { label: [run], sandbox: 'no-such-box' },
      { label: [run], project: 'p1' },
      { label: [run], project: 'p1', state: 'live', sandbox: box.name },
    ];
    // What each filter means, written out for this test: the list and the subscription must both agree with it.
    const meant = (f: Filter, e: Watched) =>
      (f.label ?? []).every((pair) => e.labels[pair.split('=')[0]!] === pair.split('=')[1]) &&
      (!f.state || (f.state === 'live' ? LIVE : f.state === 'ended' ? ENDED : [f.state]).includes(e.state)) &&
      (!f.template || e.template === f.template) &&
      (!f.project || e.project === f.project) &&
      (!f.sandbox || ([box.id, box.name].includes(f.sandbox) && e.sandbox === box.id));
    const everything = await watch({});
    const watchers = await Promise.all(filters.map((filter) => watch(filter)));
    const labels = (team: string) => Object.fromEntries([run.split('='), ['team', team]]);
    const a = (await admin.post('/v1/environments', { template: 'default', labels: labels('a'), sandbox: box.name, project: 'p1' })).body
      .environment;
    const b = (await admin.post('/v1/environments', { template: 'node', labels: labels('b') })).body.environment;
    await untilState(s, BOOTSTRAP, b.id, 'ready', { between: step });
    await untilState(s, BOOTSTRAP, a.id, 'ready', { between: step });
    await admin.del(`/v1/environments/${a.id}`);
    await untilState(s, BOOTSTRAP, a.id, 'stopped', { between: step });
    await everything.received([
      { id: a.id, state: 'stopped' },
      { id: b.id, state: 'ready' },
    ]);
    const all = everything.seen.filter((e) => [a.id, b.id].includes(e.id));
    expect(all).toHaveLength(5 + 3);
    const final = [a.id, b.id].map((id) => all.filter((e) => e.id === id).at(-1)!);
    for (const [i, filter] of filters.entries()) {
      const expected = all.filter((e) => meant(filter, e)).map(({ id, state }) => ({ id, state }));
      await watchers[i]!.received(expected);
      expect(watchers[i]!.of([a.id, b.id]), JSON.stringify(filter)).toEqual(expected);
      const listed = (await admin.gql(ListEnvironments, { filter })).body.data?.environments?.nodes.map((e) => e.id) ?? [];
      const wanted = final.filter((e) => meant(filter, e)).map((e) => e.id);
      expect([...listed].sort(), JSON.stringify(filter)).toEqual([...wanted].sort());
      await watchers[i]!.close();
    }
    await everything.close();
    // The filters did tell the two apart.
    expect(watchers[7]!.of([a.id, b.id]).map((e) => e.id)).toContain(a.id);
    expect(watchers[7]!.of([b.id])).toEqual([]);
    expect(watchers[9]!.of([a.id, b.id])).toEqual([]);
  });

  it('lists by sandbox id or name, like everywhere else; an unknown sandbox matches nothing', async () => {
    const box = (await admin.post('/v1/sandboxes', { name: `list-box-${backend}` })).body.sandbox;
    const env = (await admin.post('/v1/environments', { template: 'default', sandbox: box.name })).body.environment;
    for (const ref of [box.id, box.name]) {
      const listed = await admin.get(`/v1/environments?sandbox=${ref}`);
      expect(listed.status).toBe(200);
      expect(listed.body.environments.map((e: { id: string }) => e.id)).toEqual([env.id]);
      const gql = await admin.gql(ListEnvironments, { filter: { sandbox: ref } });
      expect(gql.body.data?.environments?.nodes.map((e) => e.id)).toEqual([env.id]);
    }
    expect((await admin.get('/v1/environments?sandbox=no-such-box')).body.environments).toEqual([]);
    expect((await admin.get('/v1/environments?sandbox=sb_aaaaaaaaaaaaaaaaaaaa')).body.environments).toEqual([]);
    await admin.del(`/v1/environments/${env.id}`);
  });

  /** Subscribes to one environment over graphql-ws; resolves with what it sent once it completes. */
  function watchOne(id: string, onFirst?: () => void): Promise<Seen[]> {
    return new Promise((resolve, reject) => {
      const seen: Seen[] = [];
      ws.subscribe<{ environment: Seen }>(
        { query: print(WatchOne), variables: { id } },
        {
          next: (value) => {
            if (value.errors) return reject(new Error(JSON.stringify(value.errors)));
            seen.push({ id: value.data!.environment.id, state: value.data!.environment.state });
            if (seen.length === 1) onFirst?.();
          },
          error: reject,
          complete: () => resolve(seen),
        },
      );
    });
  }

  it('sends one environment as it is now, then every change, and completes after it stopped', async () => {
    const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
    await untilState(s, BOOTSTRAP, env.id, 'ready', { between: step });
    let first!: () => void;
    const subscribed = new Promise<void>((r) => (first = r));
    const done = watchOne(env.name, first);
    await subscribed; // the current state arrived without any change
    await admin.del(`/v1/environments/${env.id}`);
    await untilState(s, BOOTSTRAP, env.id, 'stopped', { between: step });
    expect(await done).toEqual(['ready', 'stopping', 'stopped'].map((state) => ({ id: env.id, state })));
    // An environment that already ended: its last state, then the end of the stream.
    expect(await watchOne(env.id)).toEqual([{ id: env.id, state: 'stopped' }]);
  });

  it('completes the subscription of one environment after it failed', async () => {
    // Its node cannot prepare it: the hot pool's workspaces folder is a file for a moment.
    const workspaces = join(s.dataDir, 'workspaces');
    await rename(workspaces, `${workspaces}.aside`).catch(() => undefined);
    await writeFile(workspaces, 'not a folder');
    try {
      const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
      const done = watchOne(env.id);
      const failed = await untilState(s, BOOTSTRAP, env.id, 'failed', { between: step });
      expect(failed.error).toContain('could not prepare');
      const seen = (await done).map((e) => e.state);
      const order = ['pending', 'starting', 'failed'];
      expect(seen).toEqual(order.slice(order.indexOf(seen[0]!)));
      // Ended before the subscription: its last state, then the end of the stream.
      expect(await watchOne(env.id)).toEqual([{ id: env.id, state: 'failed' }]);
    } finally {
      await rm(workspaces, { force: true });
      await rename(`${workspaces}.aside`, workspaces).catch(() => undefined);
    }
  });

  it('loses and doubles nothing while changes race the first read', async () => {
    for (let round = 0; round < 3; round++) {
      const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
      const done = watchOne(env.id);
      // The environment moves through every state while the subscription starts.
      await untilState(s, BOOTSTRAP, env.id, 'ready', { between: step });
      await admin.del(`/v1/environments/${env.id}`);
      await untilState(s, BOOTSTRAP, env.id, 'stopped', { between: step });
      const seen = (await done).map((e) => e.state);
      const order = ['pending', 'starting', 'ready', 'stopping', 'stopped'];
      expect(seen.at(-1)).toBe('stopped');
      expect(seen).toEqual(order.slice(order.indexOf(seen[0]!)));
    }
  });

  it('gives graphql-ws subscribers of one selection the same events, in order, once each, and none of another organization', async () => {
    const { createOrganization } = await import('../src/modules/organizations/service');
    const other = await createOrganization(s.app.deps.prisma, `share-other-${backend}`, 'x@share.test');
    const theirAdmin = client(url, other.secret);
    const connect = (token: string) =>
      createClient({
        url: `${url().replace('http', 'ws')}/graphql`,
        webSocketImpl: WebSocket,
        connectionParams: { authorization: `Bearer ${token}` },
        retryAttempts: 0,
      });
    const clients = [ws, connect(BOOTSTRAP), connect(other.secret)];
    const run = `run=share-${backend}`;
    // The same document and variables in both organizations.
    const [a1, a2, b1] = clients.map((c) => {
      const seen: Watched[] = [];
      const stop = c.subscribe<{ environments: Watched }>(
        { query: print(WatchAll), variables: { filter: { label: [run] } } },
        {
          next: (value) => seen.push(value.data!.environments),
          error: (e) => seen.push({ id: 'error', state: String(e) } as Watched),
          complete: () => undefined,
        },
      );
      return { seen, stop };
    }) as { seen: Watched[]; stop: () => void }[];
    // Changes until every subscriber has had one.
    const lease = async (api: typeof admin) =>
      (await api.post('/v1/environments', { template: 'default', labels: { run: run.split('=')[1] } })).body.environment.id as string;
    const made = await primeSubscribers(
      async () => [await lease(admin), await lease(theirAdmin)],
      () => a1!.seen.length > 0 && a2!.seen.length > 0 && b1!.seen.length > 0,
    );
    const primers = { a: made.map(([a]) => a!), b: made.map(([, b]) => b!) };
    // Out of the pool's way.
    for (const id of primers.a) await admin.del(`/v1/environments/${id}`);
    for (const id of primers.b) await theirAdmin.del(`/v1/environments/${id}`);
    const x = (await admin.post('/v1/environments', { template: 'default', labels: { run: run.split('=')[1] } })).body.environment;
    const y = (await theirAdmin.post('/v1/environments', { template: 'default', labels: { run: run.split('=')[1] } })).body.environment;
    await untilState(s, BOOTSTRAP, x.id, 'ready', { between: step });
    await admin.del(`/v1/environments/${x.id}`);
    await untilState(s, BOOTSTRAP, x.id, 'stopped', { between: step });
    const hasX = (w: { seen: Watched[] }) => w.seen.some((e) => e.id === x.id && e.state === 'stopped');
    await vi.waitFor(() => expect(hasX(a1!) && hasX(a2!) && b1!.seen.some((e) => e.id === y.id)).toBe(true), DELIVERED);
    const states = (w: { seen: Watched[] }) => w.seen.filter((e) => e.id === x.id).map((e) => e.state);
    expect(states(a1!)).toEqual(['pending', 'starting', 'ready', 'stopping', 'stopped']);
    expect(a2!.seen.filter((e) => e.id === x.id)).toEqual(a1!.seen.filter((e) => e.id === x.id));
    // Each organization's subscribers saw their own organization's environments only.
    const ours = new Set([...primers.a, x.id]);
    const theirs = new Set([...primers.b, y.id]);
    for (const w of [a1!, a2!]) expect(w.seen.filter((e) => !ours.has(e.id))).toEqual([]);
    expect(b1!.seen.filter((e) => !theirs.has(e.id))).toEqual([]);
    for (const w of [a1!, a2!, b1!]) w.stop();
    await clients[1]!.dispose();
    await clients[2]!.dispose();
  });

  // 150 environments made and ended one after another: minutes on a loaded machine.
  it('drops a graphql-ws subscriber that stops reading (1008) without holding back the others', async () => {
    const run = `slow-${backend}`;
    // 64 long labels: each event is ~25 KB, so a few dozen fill what a socket may hold unsent.
    const prefix = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`;
    const big = Object.fromEntries([
      ['run', run],
      ...Array.from({ length: 63 }, (_, i) => [`${prefix}/${`k${i}`.padEnd(63, 'x')}`, 'v'.repeat(63)]),
    ]);
    const query = print(WatchAll);
    const variables = { filter: { label: [`run=${run}`] } };
    const key = (e: Seen) => `${e.id} ${e.state}`;
    const slow = new WebSocket(`${url().replace('http', 'ws')}/graphql`, 'graphql-transport-ws');
    const got: string[] = [];
    let acked!: () => void;
    const ack = new Promise<void>((r) => (acked = r));
    slow.on('message', (data) => {
      const message = JSON.parse(String(data));
      if (message.type === 'connection_ack') acked();
      if (message.type === 'next') got.push(key(message.payload.data.environments));
    });
    const closed = new Promise<number>((r) => slow.on('close', (code) => r(code)));
    await new Promise((r) => slow.once('open', r));
    slow.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${BOOTSTRAP}` } }));
    await ack;
    slow.send(JSON.stringify({ id: 'slow', type: 'subscribe', payload: { query, variables } }));
    const healthy: string[] = [];
    const stop = ws.subscribe<{ environments: Watched }>(
      { query, variables },
      { next: (value) => healthy.push(key(value.data!.environments)), error: () => undefined, complete: () => undefined },
    );
    // Each environment is created and ended at once: two events, and the pool's queue stays short.
    const churn = async () => {
      const res = await admin.post('/v1/environments', { template: 'default', labels: big });
      if (res.status !== 202) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`);
      const id = res.body.environment.id as string;
      await admin.del(`/v1/environments/${id}`);
      return id;
    };
    const primers = await primeSubscribers(churn, () => got.length > 0 && healthy.length > 0);
    const primed = (k: string) => primers.includes(k.split(' ')[0]!);
    slow.pause();
    const created: string[] = [];
    for (let i = 0; i < 150; i++) created.push(await churn());
    // The reading subscriber gets every one of them: two events each at least.
    const seenTwice = () => created.every((id) => healthy.filter((k) => k.startsWith(`${id} `)).length >= 2);
    await vi.waitFor(() => expect(seenTwice()).toBe(true), DELIVERED);
    slow.resume();
    expect(await closed).toBe(1008);
    // The dropped one got what it was sent, in order, once each, and then nothing.
    const all = healthy.filter((k) => !primed(k));
    const sent = got.filter((k) => !primed(k));
    expect(all.length).toBeGreaterThanOrEqual(2 * created.length);
    expect(sent.length).toBeLessThan(all.length);
    expect(sent).toEqual(all.slice(0, sent.length));
    stop();
  }, 180_000);

  it("refuses to watch an unknown environment or another organization's", async () => {
    const error = await watchOne('env_doesnotexist').catch((e: Error) => e.message);
    expect(error).toContain('not_found');
    const { createOrganization } = await import('../src/modules/organizations/service');
    const other = await createOrganization(s.app.deps.prisma, `watch-other-${backend}`, 'x@watch.test');
    const theirs = (await client(url, other.secret).post('/v1/environments', { template: 'default' })).body.environment;
    expect(await watchOne(theirs.id).catch((e: Error) => e.message)).toContain('not_found');
  });
});
