// Environment usage (docs/environments.md, "Usage"): samples through REST, GraphQL and the
// subscription, their history thinned, the access rules, a node speaking only for its own
// environments, and the disk limit, on files-only environments and with a real engine on both
// kinds of node.
import { once } from 'node:events';
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Client, createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { storeUsage } from '../src/modules/environments/usage';
import { createOrganization } from '../src/modules/organizations/service';
import { describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

const SAMPLE_MS = '200';
const DISK_ERROR = /^disk limit 1MiB exceeded \(\d+(\.\d)?MiB used\)$/;

interface Sample {
  cpu: number | null;
  memory: number | null;
  pids: number | null;
  disk: number;
  sampled: string;
}

/** Waits on the environment's usage subscription for a sample that passes `test`. */
function sampleWhere(ws: Client, id: string, test: (s: Sample) => boolean): Promise<Sample> {
  return new Promise((resolve, reject) => {
    const stop = ws.subscribe<{ environmentUsage: Sample }>(
      { query: 'subscription($id: String!) { environmentUsage(id: $id) { cpu memory pids disk sampled } }', variables: { id } },
      {
        next: (value) => {
          if (value.errors) return reject(new Error(JSON.stringify(value.errors)));
          if (test(value.data!.environmentUsage)) {
            stop();
            resolve(value.data!.environmentUsage);
          }
        },
        error: reject,
        complete: () => reject(new Error('the usage subscription completed')),
      },
    );
  });
}

const USAGE = 'subscription($id: String!) { environmentUsage(id: $id) { disk sampled } }';

/** The usage subscription over WebSocket: resolves with the samples it sent once it completes; `first` on its first sample. */
function usageUntilComplete(ws: Client, id: string, first: () => void = () => undefined): Promise<Sample[]> {
  return new Promise((resolve, reject) => {
    const got: Sample[] = [];
    ws.subscribe<{ environmentUsage: Sample }>(
      { query: USAGE, variables: { id } },
      {
        next: (value) => {
          if (value.errors) return reject(new Error(JSON.stringify(value.errors)));
          got.push(value.data!.environmentUsage);
          if (got.length === 1) first();
        },
        error: reject,
        complete: () => resolve(got),
      },
    );
  });
}

/** The usage subscription over SSE (GraphQL over SSE, distinct connections): the whole stream once the server ended it. */
async function usageOverSse(url: string, id: string): Promise<string> {
  const res = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ query: USAGE, variables: { id } }),
  });
  expect(res.status).toBe(200);
  return res.text();
}

function wsClient(url: string, token: string): Client {
  return createClient({
    url: `${url.replace('http', 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${token}` },
    retryAttempts: 0,
  });
}

describeBackends('usage of files-only environments', (backend) => {
  let s: TestServer;
  let dir: string;
  let ws: Client;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-usage-'));
    const shares = [{ name: 'out', direction: 'out', envPath: '/workspace/out' }];
    const templates = await writeCatalog(
      dir,
      [
        { name: 'plain', shares },
        { name: 'small', shares, resources: { disk: '1MiB' } },
      ],
      [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
    );
    s = await startServer(backend, { TEMPLATES_FILE: templates, USAGE_SAMPLE_MS: SAMPLE_MS });
    ws = wsClient(s.url, BOOTSTRAP);
  });
  afterAll(async () => {
    await ws?.dispose();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  async function lease(template: string, body: Record<string, unknown> = {}): Promise<Record<string, any>> {
    const made = await admin.post('/v1/environments', { template, ...body });
    expect(made.status, JSON.stringify(made.body)).toBe(202);
    return untilState(s, BOOTSTRAP, made.body.environment.id, 'ready');
  }

  const outFolder = (id: string) => join(s.dataDir, 'workspaces', id, 'workspace', 'out');

  it('samples the disk of its shares, through the subscription, REST and GraphQL', async () => {
    const env = await lease('plain');
    const grown = sampleWhere(ws, env.id, (u) => u.disk >= 5000);
    await writeFile(join(outFolder(env.id), 'five-thousand'), Buffer.alloc(5000));
    const sample = await grown;
    expect(sample).toMatchObject({ cpu: null, memory: null, pids: null });

    const rest = await admin.get(`/v1/environments/${env.id}/usage`);
    expect(rest.status).toBe(200);
    expect(Object.keys(rest.body).sort()).toEqual(['history', 'usage']);
    // Null fields are left out (docs/api.md): a files-only environment has no cpu, memory or pids.
    expect(Object.keys(rest.body.usage).sort()).toEqual(['disk', 'sampled']);
    expect(rest.body.usage.disk).toBeGreaterThanOrEqual(5000);
    expect(rest.body.history.length).toBeGreaterThan(0);
    expect(rest.body.history.at(-1)).toEqual(rest.body.usage);
    const times = rest.body.history.map((u: Sample) => Date.parse(u.sampled));
    expect(times).toEqual([...times].sort((a, b) => a - b));

    const gql = await admin.post('/graphql', {
      query: 'query($id: String!) { environment(id: $id) { usage { disk cpu } usageHistory { disk sampled } } }',
      variables: { id: env.name },
    });
    expect(gql.body.errors).toBeUndefined();
    expect(gql.body.data.environment.usage.disk).toBeGreaterThanOrEqual(5000);
    expect(gql.body.data.environment.usageHistory.length).toBeGreaterThan(0);
    await admin.del(`/v1/environments/${env.id}`);
  });

  it('shows usage to the members who may read the environment, and no one else', async () => {
    const env = await lease('plain');
    await sampleWhere(ws, env.id, () => true);
    const colleagueToken: string = (await admin.post('/v1/tokens', { email: 'bob@example.com', name: 'cli' })).body.secret;
    const colleague = client(() => s.url, colleagueToken);
    const other = await createOrganization(s.app.deps.prisma, `elsewhere${backend}`, 'eve@example.com');
    const stranger = client(() => s.url, other.secret);

    expect((await colleague.get(`/v1/environments/${env.id}/usage`)).status).toBe(200);
    expect(await client(() => s.url).get(`/v1/environments/${env.id}/usage`)).toMatchObject({
      status: 401,
      body: { code: 'unauthorized' },
    });
    expect(await stranger.get(`/v1/environments/${env.id}/usage`)).toMatchObject({ status: 404, body: { code: 'not_found' } });
    expect((await admin.get('/v1/environments/env_doesnotexist/usage')).status).toBe(404);

    // The subscription: the colleague gets samples; the stranger is told it does not exist.
    const colleagueWs = wsClient(s.url, colleagueToken);
    const strangerWs = wsClient(s.url, other.secret);
    try {
      expect((await sampleWhere(colleagueWs, env.id, () => true)).disk).toBeGreaterThanOrEqual(0);
      await expect(sampleWhere(strangerWs, env.id, () => true)).rejects.toThrow(/not_found|not found/);
    } finally {
      await colleagueWs.dispose();
      await strangerWs.dispose();
    }
    await admin.del(`/v1/environments/${env.id}`);
  });

  it('a node speaks only for its own environments, with samples in bounds', async () => {
    const env = await lease('plain');
    const node = await admin.post('/v1/nodes', { name: `builder-${backend}`, pool: 'remote' });
    expect(node.status).toBe(201);
    const channel = new WebSocket(`${s.url.replace(/^http/, 'ws')}/v1/nodes/channel`, {
      headers: { authorization: `Bearer ${node.body.secret}` },
    });
    const inbox: Record<string, any>[] = [];
    const waiters: (() => void)[] = [];
    channel.on('message', (data) => {
      inbox.push(JSON.parse(data.toString()));
      for (const wake of waiters.splice(0)) wake();
    });
    const next = async () => {
      while (inbox.length === 0) await new Promise<void>((resolve) => waiters.push(resolve));
      return inbox.shift()!;
    };
    const marker = 987_654_321;
    try {
      await once(channel, 'open');
      channel.send(JSON.stringify({ type: 'hello', slots: 1, environments: [] }));
      expect(await next()).toMatchObject({ type: 'welcome', usageSampleMs: Number(SAMPLE_MS) });
      const sample = { cpu: 0.5, memory: 1024, pids: 3, disk: marker };
      // The built-in pool's environment is not this node's.
      channel.send(JSON.stringify({ type: 'usage', environment: env.id, sample }));
      expect(await next()).toMatchObject({ type: 'error', code: 'forbidden' });
      for (const bad of [
        { ...sample, cpu: -1 },
        { ...sample, disk: Number.MAX_VALUE },
        { ...sample, memory: 'lots' },
        { ...sample, pids: 1.5 },
        { ...sample, extra: 1 },
        { cpu: null, memory: null, pids: null },
        null,
      ]) {
        channel.send(JSON.stringify({ type: 'usage', environment: env.id, sample: bad }));
        expect(await next()).toMatchObject({ type: 'error', code: 'invalid' });
      }
      channel.send(JSON.stringify({ type: 'usage', environment: 42, sample }));
      expect(await next()).toMatchObject({ type: 'error', code: 'invalid' });
    } finally {
      channel.close();
    }
    const { history } = (await admin.get(`/v1/environments/${env.id}/usage`)).body;
    expect(history.some((u: Sample) => u.disk === marker)).toBe(false);
    await admin.del(`/v1/environments/${env.id}`);
  });

  it('ends an environment past its disk limit failed, saving its shares as at any end', async () => {
    const key = `disk-${backend}`;
    const env = await lease('small', { snapshot: key });
    await mkdir(join(outFolder(env.id), 'build'), { recursive: true });
    // Written beside the data and moved in whole: a sample never sees it half written.
    const staged = join(s.dataDir, `big-${backend}`);
    await writeFile(staged, Buffer.alloc(3 * 1024 * 1024));
    await rename(staged, join(outFolder(env.id), 'build', 'big'));
    const ended = await untilState(s, BOOTSTRAP, env.id, ['failed', 'stopped']);
    expect(ended.state).toBe('failed');
    expect(ended.error).toMatch(DISK_ERROR);
    expect(ended.error).toBe('disk limit 1MiB exceeded (3MiB used)');
    const snapshots = (await admin.get(`/v1/snapshots?prefix=${key}`)).body.snapshots;
    expect(snapshots).toHaveLength(1);
    expect(snapshots[0]).toMatchObject({ key, files: 1 });
  });

  it('ends the usage subscription, over WebSocket and SSE, once the environment has ended', async () => {
    const env = await lease('plain');
    let sampled!: () => void;
    const firstSample = new Promise<void>((resolve) => {
      sampled = resolve;
    });
    const overWs = usageUntilComplete(ws, env.id, sampled);
    const overSse = usageOverSse(s.url, env.id);
    await firstSample;
    expect((await admin.del(`/v1/environments/${env.id}`)).status).toBe(200);
    await untilState(s, BOOTSTRAP, env.id, 'stopped');
    expect((await overWs).length).toBeGreaterThan(0);
    expect(await overSse).toMatch(/event: complete/);

    // Already ended: it completes at once and sends nothing (the last sample is the environment's `usage`).
    expect(await usageUntilComplete(ws, env.id)).toEqual([]);
    const after = await usageOverSse(s.url, env.id);
    expect(after).not.toMatch(/event: next/);
    expect(after).toMatch(/event: complete/);
    expect((await admin.get(`/v1/environments/${env.id}/usage`)).body.usage.disk).toBeGreaterThanOrEqual(0);
  });

  it("reads a list's latest samples in one query, not one per environment", async () => {
    const envs = [await lease('plain'), await lease('plain'), await lease('plain')];
    for (const env of envs) await sampleWhere(ws, env.id, () => true);
    const raw = vi.spyOn(s.app.deps.prisma, '$queryRaw');
    const findFirst = vi.spyOn(s.app.deps.prisma.usageSample, 'findFirst');
    try {
      const listed = await admin.post('/graphql', {
        query: 'query { environments(filter: { state: "live" }, first: 50) { nodes { id usage { disk sampled } } } }',
      });
      expect(listed.body.errors).toBeUndefined();
      const nodes = listed.body.data.environments.nodes as { id: string; usage: Sample | null }[];
      for (const env of envs) expect(nodes.find((n) => n.id === env.id)?.usage?.disk).toBeGreaterThanOrEqual(0);
      const usageQueries = raw.mock.calls.filter(([sql]) => (sql as unknown as string[]).join('?').includes('"UsageSample"'));
      expect(usageQueries).toHaveLength(1);
      expect(findFirst).not.toHaveBeenCalled();
    } finally {
      raw.mockRestore();
      findFirst.mockRestore();
    }
    for (const env of envs) await admin.del(`/v1/environments/${env.id}`);
  });

  it('keeps the history across a restart', async () => {
    const env = await lease('plain');
    const sample = await sampleWhere(ws, env.id, () => true);
    await ws.dispose();
    await s.restart();
    ws = wsClient(s.url, BOOTSTRAP);
    const { history } = (await admin.get(`/v1/environments/${env.id}/usage`)).body;
    expect(history.map((u: Sample) => u.sampled)).toContain(sample.sampled);
    // Sampling goes on.
    expect(Date.parse((await sampleWhere(ws, env.id, () => true)).sampled)).toBeGreaterThan(Date.parse(sample.sampled));
    await admin.del(`/v1/environments/${env.id}`);
  });

  // Last: it moves the clock an hour on.
  it('keeps the last hour: every sample of the last five minutes, one a minute before', async () => {
    const env = await lease('plain');
    await admin.del(`/v1/environments/${env.id}`);
    await untilState(s, BOOTSTRAP, env.id, 'stopped');
    // Every 20 s for 70 minutes.
    for (let i = 0; i < 210; i++) {
      s.clock.advance(20_000);
      await storeUsage(s.app.deps, env.id, { cpu: null, memory: null, pids: null, disk: i });
    }
    const { usage, history } = (await admin.get(`/v1/environments/${env.id}/usage`)).body;
    expect(usage.disk).toBe(209);
    const now = s.clock.now().getTime();
    const ages = history.map((u: Sample) => now - Date.parse(u.sampled));
    expect(ages).toEqual([...ages].sort((a, b) => b - a));
    expect(Math.max(...ages)).toBeLessThanOrEqual(60 * 60_000);
    expect(ages.filter((a: number) => a < 5 * 60_000)).toHaveLength(15);
    const minutes = history
      .filter((u: Sample) => now - Date.parse(u.sampled) >= 5 * 60_000)
      .map((u: Sample) => Math.floor(Date.parse(u.sampled) / 60_000));
    expect(new Set(minutes).size).toBe(minutes.length);
    expect(minutes.length).toBeGreaterThanOrEqual(54);
    // The table itself holds no more than that.
    const rows = await s.app.deps.prisma.usageSample.count({ where: { environmentId: env.id } });
    expect(rows).toBeLessThanOrEqual(history.length + 1);

    // An hour after an ended environment's last sample, the background jobs delete them all.
    s.clock.advance(60 * 60_000 + 1000);
    await s.app.deps.background.tick();
    expect(await s.app.deps.prisma.usageSample.count({ where: { environmentId: env.id } })).toBe(0);
    expect((await admin.get(`/v1/environments/${env.id}/usage`)).body).toEqual({ history: [] });
  });
});

for (const kind of ['built-in pool', 'berth node'] as const) {
  describeContainers(`usage of containers on the ${kind}`, () => {
    let s: TestServer;
    let dir: string;
    let node: Proc | undefined;
    let ws: Client;
    const admin = client(() => s.url, BOOTSTRAP);

    beforeAll(async () => {
      // A disk count looks at 50 entries a sample (src/node/disk-count.ts): a share of a few
      // hundred files takes several samples, as one of millions would at the real budget.
      process.env.BERTH_DISK_COUNT_ENTRIES = '50';
      dir = await mkdtemp(join(tmpdir(), 'berth-usage-containers-'));
      const pool = kind === 'berth node' ? 'remote' : 'default';
      const shares = [{ name: 'out', direction: 'out', envPath: '/workspace/out' }];
      const templates = await writeCatalog(
        dir,
        [
          { name: 'box', pool, image: TEST_IMAGE, workdir: '/workspace', shares },
          { name: 'small', pool, image: TEST_IMAGE, workdir: '/workspace', shares, resources: { disk: '1MiB' } },
        ],
        [{ name: 'remote', hotNodes: 0, maxQueued: 100 }],
      );
      s = await startServer('pglite', {
        TEMPLATES_FILE: templates,
        DOCKER_HOST: kind === 'built-in pool' ? engine() : 'none',
        NODE_HEARTBEAT_MS: '250',
        USAGE_SAMPLE_MS: SAMPLE_MS,
      });
      ws = wsClient(s.url, BOOTSTRAP);
      if (kind === 'berth node') {
        const created = await admin.post('/v1/nodes', { name: 'builder', pool: 'remote' });
        node = spawnNode(
          ['bin/berth.js', 'node', '--server', s.url, '--token', created.body.secret, '--dir', join(dir, 'node'), '--engine', engine()],
          {},
        );
        await node.waitFor(/online as builder/);
      }
    }, 120_000);
    afterAll(async () => {
      const live = await admin.get('/v1/environments?state=live');
      for (const env of live.body.environments ?? []) await admin.del(`/v1/environments/${env.id}`);
      for (let i = 0; i < 30 && (await admin.get('/v1/environments?state=live')).body.environments?.length; i++) {
        await s.app.deps.background.tick();
      }
      await ws?.dispose();
      await node?.kill();
      await s?.stop();
      await rm(dir, { recursive: true, force: true });
      delete process.env.BERTH_DISK_COUNT_ENTRIES;
    });

    async function lease(template: string, body: Record<string, unknown> = {}): Promise<Record<string, any>> {
      const made = await admin.post('/v1/environments', { template, ...body });
      expect(made.status, JSON.stringify(made.body)).toBe(202);
      return untilState(s, BOOTSTRAP, made.body.environment.id, ['ready', 'failed']);
    }

    /** Runs a shell command in the environment; resolves once its output ended. */
    async function sh(id: string, script: string): Promise<string> {
      const res = await fetch(`${s.url}/v1/environments/${id}/exec`, {
        method: 'POST',
        headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
        body: JSON.stringify({ command: ['sh', '-c', script] }),
      });
      return res.text();
    }

    it('samples CPU, memory, processes and disk of the container', async () => {
      const env = await lease('box');
      expect(env.state).toBe('ready');
      const sample = await sampleWhere(ws, env.id, (u) => u.cpu !== null);
      expect(sample.cpu).toBeGreaterThanOrEqual(0);
      expect(sample.memory).toBeGreaterThan(0);
      expect(sample.pids).toBeGreaterThanOrEqual(1);
      // The writable layer counts: a file outside the shares.
      await sh(env.id, 'dd if=/dev/zero of=/tmp/layer bs=1024 count=512');
      expect((await sampleWhere(ws, env.id, (u) => u.disk >= 512 * 1024)).disk).toBeGreaterThanOrEqual(512 * 1024);
      const rest = (await admin.get(`/v1/environments/${env.id}/usage`)).body;
      expect(Object.keys(rest.usage).sort()).toEqual(['cpu', 'disk', 'memory', 'pids', 'sampled']);
      expect(rest.usage.memory).toBeGreaterThan(0);
      await admin.del(`/v1/environments/${env.id}`);
    });

    it('ends a container past its disk limit failed, after its out share came home', async () => {
      const key = `disk-${kind.replace(/\W/g, '')}`;
      const env = await lease('small', { snapshot: key });
      expect(env.state).toBe('ready');
      await sh(env.id, 'dd if=/dev/zero of=/workspace/out/big bs=1M count=3');
      const ended = await untilState(s, BOOTSTRAP, env.id, ['failed', 'stopped']);
      expect(ended.state).toBe('failed');
      expect(ended.error).toMatch(DISK_ERROR);
      const snapshots = (await admin.get(`/v1/snapshots?prefix=${key}`)).body.snapshots;
      expect(snapshots).toHaveLength(1);
      expect(snapshots[0]).toMatchObject({ key, files: 1 });
    });

    it('counts a big file behind more files than one sample looks at', async () => {
      const env = await lease('small');
      expect(env.state).toBe('ready');
      // Six times the entries a sample counts, then the big file in a folder read after them.
      await sh(
        env.id,
        'mkdir -p /workspace/out/many/deep && cd /workspace/out/many && i=0; while [ $i -lt 300 ]; do : > f$i; i=$((i+1)); done; dd if=/dev/zero of=deep/big bs=1M count=3',
      );
      const ended = await untilState(s, BOOTSTRAP, env.id, ['failed', 'stopped']);
      expect(ended.state).toBe('failed');
      expect(ended.error).toMatch(DISK_ERROR);
    });
  });
}
