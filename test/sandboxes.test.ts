import { print } from 'graphql';
import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { Actor } from '../src/app/context';
import { newId } from '../src/kernel/names';
import { DEFAULT_IGNORES } from '../src/kernel/sync-rules';
import { authenticate } from '../src/modules/credentials/auth';
import { notifySandboxConfig, planWiring, sandboxConfig, type Wiring, type WiringInput } from '../src/modules/sandboxes/wiring';
import type { TemplateSpec } from '../src/modules/templates/catalog';
import { graphql } from './gql';
import { openApiValidator } from './helpers/openapi';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const HOUR = 60 * 60 * 1000;
const DAY = 24 * HOUR;

const TEMPLATE: TemplateSpec = {
  name: 'web',
  pool: 'default',
  startMs: 0,
  idle: '30m',
  hard: '6h',
  idleMs: 30 * 60 * 1000,
  hardMs: 6 * HOUR,
  shares: [
    { name: 'src', direction: 'in', envPath: '/workspace/src' },
    { name: 'out', direction: 'out', envPath: '/workspace/out' },
  ],
  services: [
    { service: 'postgres', target: '127.0.0.1:5432' },
    { service: 'web', target: '127.0.0.1:8080' },
  ],
  resources: {},
  network: 'none',
  workdir: '/',
  shell: '/bin/sh',
  env: {},
  warm: 0,
  lifecycle: [],
};

const Sandboxes = graphql(`query TestSandboxes { sandboxes { sandbox { id name org } environments } }`);
const SandboxConfigQuery = graphql(`query TestSandboxConfig($id: ID!) { sandboxConfig(id: $id) }`);
const RegisterSandbox = graphql(`
  mutation TestRegisterSandbox($input: RegisterSandboxInput) { registerSandbox(input: $input) { sandbox { id name } key config } }
`);
const JoinSandbox = graphql(`mutation TestJoinSandbox($key: String!) { joinSandbox(key: $key) { sandbox { id lastSeen } credential } }`);
const RemoveSandbox = graphql(`mutation TestRemoveSandbox($id: ID!) { removeSandbox(id: $id) { id removed removedBy } }`);
const WatchConfig = graphql(`subscription TestWatchSandboxConfig($id: ID!) { sandboxConfig(id: $id) }`);

describeBackends('sandboxes', (backend) => {
  let s: TestServer;
  let orgId: string;
  /** The bootstrap admin, who registers the sandboxes these tests wire. */
  let actor: Actor;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  const anonymous = client(url);

  beforeAll(async () => {
    s = await startServer(backend);
    orgId = (await s.app.deps.prisma.organization.findUniqueOrThrow({ where: { name: 'default' } })).id;
    actor = await authenticate(s.app.deps, `Bearer ${BOOTSTRAP}`, '127.0.0.1');
  });
  afterAll(() => s?.stop());

  async function register(body: Record<string, unknown> = {}) {
    const res = await admin.post('/v1/sandboxes', body);
    expect(res.status).toBe(201);
    return res.body as { sandbox: { id: string; name: string }; key: string; config: Record<string, unknown> };
  }

  async function joined(name?: string) {
    const reg = await register(name ? { name } : {});
    const res = await anonymous.post('/v1/sandboxes/join', { key: reg.key });
    expect(res.status).toBe(201);
    return {
      id: reg.sandbox.id,
      name: reg.sandbox.name,
      agent: client(url, res.body.credential as string),
      credential: res.body.credential as string,
    };
  }

  /** Plans the wiring in a transaction, the way environment creation does, and records the row. */
  async function wire(input: WiringInput, state = 'ready', extra: { project?: string; template?: TemplateSpec } = {}) {
    const prisma = s.app.deps.prisma;
    return prisma.$transaction(async (tx) => {
      const wiring = await planWiring(tx, actor, extra.template ?? TEMPLATE, input);
      const env = await insertEnvironment(tx, wiring, state, extra.project);
      return { wiring, env };
    });
  }

  // Rows the hot-node scheduler leaves alone: an unknown pool, `starting` without a start time,
  // time-outs a month away.
  async function insertEnvironment(db: Pick<typeof s.app.deps.prisma, 'environment'>, wiring: Wiring, state: string, project = 'default') {
    const now = s.clock.now();
    return db.environment.create({
      data: {
        id: newId('env'),
        orgId,
        name: `t-${newId('x').slice(2, 14)}`,
        template: TEMPLATE.name,
        pool: 'not-scheduled',
        state,
        sandboxId: wiring.sandboxId,
        project,
        createdBy: 'test',
        created: now,
        expires: new Date(now.getTime() + 30 * DAY),
        idleUntil: new Date(now.getTime() + 30 * DAY),
        idleMs: HOUR,
        hardMs: HOUR,
        exports: wiring.exports as never,
        shares: wiring.shares as never,
        sync: wiring.sync as never,
        restore: [],
      },
    });
  }

  it('registers a sandbox by name, by hostname, or with a generated name', async () => {
    const named = await admin.post('/v1/sandboxes', { name: 'Build-Box' });
    expect(named.status).toBe(201);
    expect(named.body).toEqual({
      sandbox: {
        id: expect.stringMatching(/^sb_[a-z2-7]{20}$/),
        org: 'default',
        name: 'build-box',
        createdBy: 'admin@berth.local',
        created: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      },
      config: { sandbox: { id: named.body.sandbox.id, name: 'build-box', org: 'default' }, version: 0, environments: [] },
      key: expect.stringMatching(/^bjk_[A-Za-z0-9]{43}$/),
    });
    const host = await register({ name: '', hostname: 'Dev Laptop.corp.example' });
    expect(host.sandbox.name).toBe('dev-laptop');
    // A hostname that is taken gets a suffix; an explicit name that is taken is refused.
    expect((await register({ hostname: 'dev-laptop' })).sandbox.name).toBe('dev-laptop-2');
    expect(await admin.post('/v1/sandboxes', { name: 'dev-laptop' })).toMatchObject({ status: 409, body: { code: 'name_taken' } });
    const generated = await register();
    expect(generated.sandbox.name).toMatch(/^[a-z]+-[a-z]+-\d{4}$/);
    expect((await register({ hostname: '...' })).sandbox.name).toMatch(/^[a-z]+-[a-z]+-\d{4}$/);

    for (const name of ['-x', 'x-', 'a_b', 'a.b', 'x'.repeat(64), 'é']) {
      expect(await admin.post('/v1/sandboxes', { name })).toMatchObject({ status: 422, body: { code: 'invalid' } });
    }
    expect(await admin.post('/v1/sandboxes', { name: 7 })).toMatchObject({ status: 422 });
    expect(await admin.post('/v1/sandboxes', { hostname: 'h'.repeat(300) })).toMatchObject({ status: 422, body: { code: 'invalid' } });

    // Only the key's hash is stored.
    const rows = await s.app.deps.db.pool.query(`SELECT hash, expires FROM "JoinKey" WHERE "sandboxId" = $1`, [named.body.sandbox.id]);
    expect(rows.rows[0].hash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(rows.rows)).not.toContain(named.body.key);
    expect(new Date(rows.rows[0].expires).getTime() - new Date(named.body.sandbox.created).getTime()).toBe(HOUR);

    const viaGraphql = await admin.gql(RegisterSandbox, { input: { name: 'gql-box' } });
    expect(viaGraphql.body.data?.registerSandbox).toMatchObject({ sandbox: { name: 'gql-box' }, key: expect.stringMatching(/^bjk_/) });
  });

  it('joins once with a key and no other credential; the second use is refused', async () => {
    const reg = await register({ name: 'joiner' });
    const first = await anonymous.post('/v1/sandboxes/join', { key: reg.key });
    expect(first.status).toBe(201);
    expect(first.body).toEqual({
      sandbox: { ...reg.sandbox, lastSeen: expect.any(String) },
      // The agent's config carries the keyring; the member who registered it saw none.
      config: { ...reg.config, keyring: [] },
      credential: expect.stringMatching(/^bsc_[A-Za-z0-9]{43}$/),
    });
    const again = await anonymous.post('/v1/sandboxes/join', { key: reg.key });
    expect(again).toMatchObject({ status: 409, body: { error: expect.stringContaining('already used'), code: 'key_used' } });

    const agent = client(url, first.body.credential);
    const own = await agent.get(`/v1/sandboxes/${reg.sandbox.id}/config`);
    expect(own).toMatchObject({ status: 200, body: { config: { sandbox: { id: reg.sandbox.id, name: 'joiner' } } } });
    expect((await agent.get('/v1/sandboxes/joiner/config')).status).toBe(200);

    expect(await anonymous.post('/v1/sandboxes/join', { key: 'bjk_nope' })).toMatchObject({ status: 401, body: { code: 'unauthorized' } });
    expect(await anonymous.post('/v1/sandboxes/join', {})).toMatchObject({ status: 422, body: { code: 'invalid' } });
  });

  it('refuses a key after its hour', async () => {
    const reg = await register({ name: 'late' });
    s.clock.advance(HOUR + 1000);
    const res = await anonymous.post('/v1/sandboxes/join', { key: reg.key });
    expect(res).toMatchObject({ status: 410, body: { error: expect.stringContaining('expired'), code: 'key_expired' } });
    // Just inside the hour still works.
    const fresh = await register({ name: 'on-time' });
    s.clock.advance(HOUR - 1000);
    expect((await anonymous.post('/v1/sandboxes/join', { key: fresh.key })).status).toBe(201);
  });

  it('lets exactly one of two racing joins win', async () => {
    for (let round = 0; round < 3; round++) {
      const reg = await register();
      const replies = await Promise.all([0, 1, 2].map(() => anonymous.post('/v1/sandboxes/join', { key: reg.key })));
      expect(replies.map((r) => r.status).sort()).toEqual([201, 409, 409]);
      const credentials = await s.app.deps.prisma.credential.count({ where: { sandboxId: reg.sandbox.id } });
      expect(credentials).toBe(1);
    }
  });

  it('gives a sandbox credential its own config, heartbeat and nothing else', async () => {
    const { id, agent, credential } = await joined('agent-only');
    const other = await register({ name: 'someone-else' });
    s.clock.advance(5000);
    const beat = await agent.post(`/v1/sandboxes/${id}/heartbeat`);
    expect(beat.status).toBe(200);
    expect(new Date(beat.body.sandbox.lastSeen).getTime()).toBeGreaterThanOrEqual(s.clock.now().getTime() - 1000);
    for (const [method, path, body] of [
      ['GET', '/v1/sandboxes'],
      ['GET', `/v1/sandboxes/${id}`],
      ['DELETE', `/v1/sandboxes/${id}`],
      ['POST', '/v1/sandboxes', { name: 'sneaky' }],
      ['GET', `/v1/sandboxes/${other.sandbox.id}/config`],
      ['POST', `/v1/sandboxes/${other.sandbox.id}/heartbeat`],
      ['GET', '/v1/environments'],
      ['POST', '/v1/environments', { template: 'default', sandbox: id }],
      ['POST', '/v1/tokens', {}],
      ['GET', '/v1/tokens'],
      ['GET', '/v1/me'],
      ['GET', '/v1/quotas'],
      ['PUT', '/v1/quotas/default', { maxLeases: 1 }],
      ['GET', '/v1/templates'],
      ['GET', '/v1/snapshots'],
      ['DELETE', '/v1/project-keys/default'],
      ['GET', '/v1/artifacts'],
      ['GET', '/v1/artifacts/art_aaaaaaaaaaaaaaaaaaaa/content'],
      ['GET', '/v1/keys'],
      ['POST', '/v1/keys', { name: 'sneaky' }],
    ] as const) {
      const res = await agent.call(method, path, body);
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body.code).toBe('forbidden');
    }
    const gql = await agent.gql(Sandboxes);
    expect(gql.body.errors?.[0]?.extensions?.code).toBe('forbidden');
    const upload = await fetch(`${url()}/v1/artifacts?name=x`, {
      method: 'POST',
      headers: { authorization: `Bearer ${credential}`, 'content-type': 'application/octet-stream' },
      body: 'bytes',
    });
    expect(upload.status).toBe(403);
    for (const query of [
      '{ viewer { name } }',
      '{ templates { name } }',
      '{ quotas { template } }',
      '{ environments { nodes { id } } }',
      '{ tokens { id } }',
      '{ apiKeys { id } }',
      '{ artifacts { nodes { id } } }',
      '{ snapshots { project } }',
      'mutation { createEnvironment(input: {template: "default"}) { environment { id } } }',
      'mutation { shredProject(project: "default") { at } }',
      'mutation { setQuota(template: "default", input: {maxLeases: 1}) { template } }',
    ]) {
      const res = await agent.call('POST', '/graphql', { query });
      expect(res.body.errors?.[0]?.extensions?.code, query).toBe('forbidden');
    }
    expect((await agent.gql(SandboxConfigQuery, { id })).body.data?.sandboxConfig).toMatchObject({ sandbox: { id } });
    // Members read any sandbox's config, but the heartbeat is the agent's.
    expect((await admin.get(`/v1/sandboxes/${id}/config`)).status).toBe(200);
    expect(await admin.post(`/v1/sandboxes/${id}/heartbeat`)).toMatchObject({ status: 403, body: { code: 'forbidden' } });
    expect(await admin.post('/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaa/heartbeat')).toMatchObject({ status: 404, body: { code: 'not_found' } });
  });

  it('joins over GraphQL for a caller of the same organization', async () => {
    const reg = await register({ name: 'via-graphql' });
    const res = await admin.gql(JoinSandbox, { key: reg.key });
    expect(res.body.data?.joinSandbox).toMatchObject({
      sandbox: { id: reg.sandbox.id, lastSeen: expect.any(String) },
      credential: expect.stringMatching(/^bsc_/),
    });
    const again = await admin.gql(JoinSandbox, { key: reg.key });
    expect(again.body.errors?.[0]?.extensions?.code).toBe('key_used');
  });

  it('counts live environments per sandbox in the listing', async () => {
    const a = await register({ name: 'count-a' });
    const b = await register({ name: 'count-b' });
    for (const state of ['pending', 'starting', 'ready', 'stopped', 'failed']) await wire({ sandbox: a.sandbox.id }, state);
    await wire({ sandbox: b.sandbox.id }, 'ready');
    await wire({}, 'ready');
    const list = await admin.get('/v1/sandboxes');
    expect(list.status).toBe(200);
    const counts = Object.fromEntries(
      list.body.sandboxes.map((e: { sandbox: { name: string }; environments: number }) => [e.sandbox.name, e.environments]),
    );
    expect(counts).toMatchObject({ 'count-a': 3, 'count-b': 1, 'build-box': 0 });
    expect(list.body.sandboxes[0]).toEqual({
      sandbox: expect.objectContaining({ id: expect.any(String), org: 'default' }),
      environments: expect.any(Number),
    });
    expect((await admin.get(`/v1/sandboxes/${a.sandbox.id}`)).body).toMatchObject({ sandbox: { name: 'count-a' }, environments: 3 });
    expect((await admin.get('/v1/sandboxes/count-b')).body).toMatchObject({ sandbox: { id: b.sandbox.id }, environments: 1 });
    const viaGraphql = await admin.gql(Sandboxes);
    expect(viaGraphql.body.data?.sandboxes?.find((e) => e.sandbox.name === 'count-a')?.environments).toBe(3);
  });

  it('builds the config from the live environments wired to the sandbox', async () => {
    const { id, agent } = await joined('configured');
    const before = (await agent.get(`/v1/sandboxes/${id}/config`)).body.config;
    const { env, wiring } = await wire(
      {
        sandbox: id,
        shares: { src: 'app/', out: 'build/out' },
        files: { 'src/.env': './secrets/dev.env', 'src/conf/local.json': 'conf.json' },
        include: ['dist', './node_modules/.prisma', '**/*.gen.ts'],
        noIgnore: false,
      },
      'ready',
      { project: 'payments' },
    );
    expect(wiring).toEqual({
      sandboxId: id,
      exports: [
        { service: 'postgres', listen: '127.0.0.1:15432', target: '127.0.0.1:5432' },
        { service: 'web', listen: '127.0.0.1:18080', target: '127.0.0.1:8080' },
      ],
      shares: [
        { name: 'src', direction: 'in', envPath: '/workspace/src', localPath: 'app', files: ['.env', 'conf/local.json'] },
        { name: 'out', direction: 'out', envPath: '/workspace/out', localPath: 'build/out', files: [] },
      ],
      sync: {
        include: ['dist', 'node_modules/.prisma', '**/*.gen.ts'],
        noIgnore: false,
        files: { 'src/.env': 'secrets/dev.env', 'src/conf/local.json': 'conf.json' },
      },
    });
    const ended = await wire({ sandbox: id }, 'stopped');
    const unmapped = await wire({ sandbox: id, noIgnore: true }, 'pending', { project: 'default' });
    await notifySandboxConfig(s.app.deps, orgId, id);

    const { config } = (await agent.get(`/v1/sandboxes/${id}/config`)).body;
    expect(config.version).toBeGreaterThan(before.version);
    expect(config.sandbox).toEqual({ id, name: 'configured', org: 'default' });
    expect(config.environments.map((e: { id: string }) => e.id)).toEqual([env.id, unmapped.env.id]);
    expect(config.environments.map((e: { id: string }) => e.id)).not.toContain(ended.env.id);
    expect(config.environments[0]).toEqual({
      id: env.id,
      name: env.name,
      state: 'ready',
      template: 'web',
      project: 'payments',
      imports: wiring.exports,
      shares: [
        {
          name: 'src',
          direction: 'in',
          envPath: '/workspace/src',
          localPath: 'app',
          files: ['.env', 'conf/local.json'],
          sync: {
            include: ['dist', 'node_modules/.prisma', '**/*.gen.ts'],
            noIgnore: false,
            defaultIgnores: [...DEFAULT_IGNORES],
            files: { '.env': 'secrets/dev.env', 'conf/local.json': 'conf.json' },
          },
        },
        {
          name: 'out',
          direction: 'out',
          envPath: '/workspace/out',
          localPath: 'build/out',
          files: [],
          sync: {
            include: ['dist', 'node_modules/.prisma', '**/*.gen.ts'],
            noIgnore: false,
            defaultIgnores: [...DEFAULT_IGNORES],
            files: {},
          },
        },
      ],
    });
    // Unmapped shares sit at their own name; the second environment's ports differ from the first's.
    expect(config.environments[1].shares.map((sh: { localPath: string }) => sh.localPath)).toEqual(['src', 'out']);
    expect(config.environments[1].shares[0].sync.noIgnore).toBe(true);
    expect(config.environments[1].imports.map((i: { listen: string }) => i.listen)).toEqual(['127.0.0.1:25432', '127.0.0.1:28080']);

    // The keyring holds the current data key of each project, the same one the server seals with.
    const { currentKey } = await import('../src/kernel/project-keys');
    const expected = await Promise.all(
      ['default', 'payments'].map(async (project) => {
        const k = await currentKey(s.app.deps, orgId, project);
        return { project, version: k.version, key: k.key.toString('base64') };
      }),
    );
    expect(config.keyring).toEqual(expected);
    expect(Buffer.from(config.keyring[0].key, 'base64')).toHaveLength(32);

    // Members see the same config without the keyring.
    const { keyring: _keyring, ...withoutKeys } = config;
    expect((await admin.get(`/v1/sandboxes/${id}/config`)).body.config).toEqual(withoutKeys);
    // An environment that ends leaves the config.
    await s.app.deps.prisma.environment.update({ where: { id: env.id }, data: { state: 'stopped' } });
    await notifySandboxConfig(s.app.deps, orgId, id);
    const after = (await agent.get(`/v1/sandboxes/${id}/config`)).body.config;
    expect(after.environments.map((e: { id: string }) => e.id)).toEqual([unmapped.env.id]);
    expect(after.keyring.map((k: { project: string }) => k.project)).toEqual(['default']);
    expect(after.version).toBe(config.version + 1);
  });

  it("gives the project keys to the sandbox's own agent only; people see the rest of the config", async () => {
    const { id, agent, credential } = await joined('keyholder');
    const created = await admin.post('/v1/environments', { template: 'default', sandbox: id, project: 'vault' });
    expect(created.status).toBe(202);
    expect(created.body.sandboxConfig.environments.map((e: { id: string }) => e.id)).toContain(created.body.environment.id);
    expect(created.body.sandboxConfig).not.toHaveProperty('keyring');
    // Once ready it stays put, so every reader below sees the same config.
    for (let i = 0; i < 50 && (await admin.get(`/v1/environments/${created.body.environment.id}`)).body.state !== 'ready'; i++) {
      s.clock.advance(1000);
      await s.app.deps.background.tick();
    }

    const own = (await agent.get(`/v1/sandboxes/${id}/config`)).body.config;
    expect(own.keyring).toEqual([{ project: 'vault', version: expect.any(Number), key: expect.any(String) }]);
    const { keyring: _keyring, ...withoutKeys } = own;
    const member = client(url, (await admin.post('/v1/tokens', { email: `reader-${backend}@example.com` })).body.secret);
    const key = client(url, (await admin.post('/v1/keys', { name: `config-reader-${backend}`, admin: true })).body.secret);
    for (const who of [admin, member, key]) {
      const config = (await who.get(`/v1/sandboxes/${id}/config`)).body.config;
      expect(config).toEqual(withoutKeys);
      expect(JSON.stringify(config)).not.toContain(own.keyring[0].key);
      expect((await who.gql(SandboxConfigQuery, { id })).body.data?.sandboxConfig).toEqual(withoutKeys);
    }
    // The same over the subscription: a member's stream has no keyring, the agent's has.
    const first = async (token: string) => {
      const ws = createClient({
        url: `${url().replace('http', 'ws')}/graphql`,
        webSocketImpl: WebSocket,
        connectionParams: { authorization: `Bearer ${token}` },
        retryAttempts: 0,
      });
      const config = await new Promise<Record<string, unknown>>((resolve, reject) => {
        ws.subscribe<{ sandboxConfig: Record<string, unknown> }>(
          { query: print(WatchConfig), variables: { id } },
          { next: (value) => resolve(value.data!.sandboxConfig), error: reject, complete: () => undefined },
        );
      });
      await ws.dispose();
      return config;
    };
    expect(await first(BOOTSTRAP)).toEqual(withoutKeys);
    expect((await first(credential)).keyring).toEqual(own.keyring);
    await admin.del(`/v1/environments/${created.body.environment.id}`);
  });

  it('refuses bad wiring with 422 naming the field', async () => {
    const {
      sandbox: { id },
    } = await register({ name: 'strict' });
    const bad: [WiringInput, string][] = [
      [{ shares: { src: 'a' } }, 'shares'],
      [{ files: { 'src/a': 'b' } }, 'files'],
      [{ sandbox: id, shares: { nope: 'a' } }, 'shares.nope'],
      [{ sandbox: id, shares: { src: '/etc' } }, 'shares.src'],
      [{ sandbox: id, shares: { src: 'C:\\work' } }, 'shares.src'],
      [{ sandbox: id, shares: { src: '../outside' } }, 'shares.src'],
      [{ sandbox: id, shares: { src: 'a/../../b' } }, 'shares.src'],
      [{ sandbox: id, shares: { src: '' } }, 'shares.src'],
      [{ sandbox: id, shares: { src: 42 as never } }, 'shares.src'],
      [{ sandbox: id, shares: { src: 'same', out: 'same/' } }, 'shares.out'],
      [{ sandbox: id, shares: { src: 'out' } }, 'shares.src'],
      [{ sandbox: id, shares: ['src'] }, 'shares'],
      [{ sandbox: id, files: { 'nope/a': 'b' } }, 'files.nope/a'],
      [{ sandbox: id, files: { src: 'b' } }, 'files.src'],
      [{ sandbox: id, files: { 'out/a': 'b' } }, 'files.out/a'],
      [{ sandbox: id, files: { 'src/../a': 'b' } }, 'files.src/../a'],
      [{ sandbox: id, files: { 'src/a': '/etc/passwd' } }, 'files.src/a'],
      [{ sandbox: id, files: { 'src/a': '../../.ssh/id_rsa' } }, 'files.src/a'],
      [{ sandbox: id, files: { 'src/a': 'x', 'src/./a': 'y' } }, 'files.src/./a'],
      [{ sandbox: id, files: 'src/a=b' }, 'files'],
      [{ sandbox: id, include: ['/abs'] }, 'include[0]'],
      [{ sandbox: id, include: ['ok', '../up'] }, 'include[1]'],
      [{ sandbox: id, include: ['[z-a]'] }, 'include[0]'],
      [{ sandbox: id, include: ['a{b'] }, 'include[0]'],
      [{ sandbox: id, include: 'dist' }, 'include'],
      [{ include: ['!negated'] }, 'include[0]'],
      [{ sandbox: id, noIgnore: 'yes' }, 'noIgnore'],
      [{ sandbox: 42 as never }, 'sandbox'],
    ];
    for (const [input, field] of bad) {
      const error = await s.app.deps.prisma.$transaction((tx) => planWiring(tx, actor, TEMPLATE, input)).catch((e: unknown) => e);
      expect(error, JSON.stringify(input)).toMatchObject({ code: 'invalid', field });
    }
    // Without a sandbox: sync rules still apply, nothing is exported or shared.
    const plain = await s.app.deps.prisma.$transaction((tx) =>
      planWiring(tx, actor, TEMPLATE, { include: ['dist'], noIgnore: true, shares: {} }),
    );
    expect(plain).toEqual({ sandboxId: null, exports: [], shares: [], sync: { include: ['dist'], noIgnore: true, files: {} } });
    // `.` maps a share to the sandbox's folder itself.
    const root = await s.app.deps.prisma.$transaction((tx) => planWiring(tx, actor, TEMPLATE, { sandbox: 'strict', shares: { src: '.' } }));
    expect(root.shares[0]).toMatchObject({ name: 'src', localPath: '.' });
  });

  it('refuses unknown, removed and foreign sandboxes with 404 not_found', async () => {
    const removed = await register({ name: 'gone-soon' });
    expect((await admin.del(`/v1/sandboxes/${removed.sandbox.id}`)).status).toBe(200);
    const foreignOrg = await s.app.deps.prisma.organization.create({ data: { id: newId('org'), name: `other-${Date.now()}` } });
    const foreign = await s.app.deps.prisma.sandbox.create({
      data: { id: newId('sb'), orgId: foreignOrg.id, name: 'theirs', createdBy: 'x' },
    });
    for (const sandbox of ['sb_aaaaaaaaaaaaaaaaaaaa', 'no-such-box', removed.sandbox.id, 'gone-soon', foreign.id, 'theirs']) {
      const error = await s.app.deps.prisma.$transaction((tx) => planWiring(tx, actor, TEMPLATE, { sandbox })).catch((e: unknown) => e);
      expect(error, sandbox).toMatchObject({ code: 'not_found' });
    }
  });

  it('never hands out a port twice among the live environments of a sandbox', async () => {
    const {
      sandbox: { id },
    } = await register({ name: 'ports' });
    const other = await register({ name: 'ports-other' });
    const first = await wire({ sandbox: id });
    // Another sandbox may use the same ports.
    expect((await wire({ sandbox: other.sandbox.id })).wiring.exports.map((e) => e.listen)).toEqual(
      first.wiring.exports.map((e) => e.listen),
    );
    // Concurrent creates take turns on the sandbox row.
    const concurrent = await Promise.all(Array.from({ length: 6 }, () => wire({ sandbox: id }, 'starting')));
    const listens = [first, ...concurrent].flatMap((w) => w.wiring.exports.map((e) => e.listen));
    expect(new Set(listens).size).toBe(listens.length);
    // The first gets the ports named after the targets; whichever create came next the 20000 ones.
    expect(listens.slice(0, 2)).toEqual(['127.0.0.1:15432', '127.0.0.1:18080']);
    expect(listens).toEqual(expect.arrayContaining(['127.0.0.1:25432', '127.0.0.1:28080', '127.0.0.1:10000']));
    for (const listen of listens) {
      const port = Number(listen.split(':')[1]);
      expect(port).toBeGreaterThanOrEqual(10000);
      expect(port).toBeLessThanOrEqual(29999);
    }
    // An ended environment frees its ports.
    await s.app.deps.prisma.environment.update({ where: { id: first.env.id }, data: { state: 'stopped' } });
    const reused = await wire({ sandbox: id });
    expect(reused.wiring.exports.map((e) => e.listen)).toContain('127.0.0.1:15432');
  });

  it('removes a sandbox: credential revoked, key refused, wiring refused, config emptied; idempotent', async () => {
    const { id, agent } = await joined('retiring');
    const key = (await register({ name: 'retiring-unjoined' })).key;
    const running = await wire({ sandbox: id });
    const removed = await admin.del(`/v1/sandboxes/${id}`);
    expect(removed).toMatchObject({ status: 200, body: { sandbox: { id, name: 'retiring', removed: expect.any(String) } } });
    expect(await agent.get(`/v1/sandboxes/${id}/config`)).toMatchObject({ status: 401, body: { code: 'unauthorized' } });
    const again = await admin.del(`/v1/sandboxes/${id}`);
    expect(again.body).toEqual(removed.body);
    // The environment keeps running, but the removed sandbox's config shows nothing.
    expect((await s.app.deps.prisma.environment.findUniqueOrThrow({ where: { id: running.env.id } })).state).toBe('ready');
    const { config } = (await admin.get(`/v1/sandboxes/${id}/config`)).body;
    expect(config).toMatchObject({ sandbox: { id, removed: removed.body.sandbox.removed }, environments: [] });
    expect(removed.body.sandbox.removedBy).toBe('admin@berth.local');
    // Removed sandboxes leave the listing unless asked for; the name is free again.
    expect((await admin.get('/v1/sandboxes')).body.sandboxes.map((e: { sandbox: { id: string } }) => e.sandbox.id)).not.toContain(id);
    expect((await admin.get('/v1/sandboxes?removed=true')).body.sandboxes.map((e: { sandbox: { id: string } }) => e.sandbox.id)).toContain(
      id,
    );
    expect((await register({ name: 'retiring' })).sandbox.id).not.toBe(id);

    const unjoined = (await admin.get('/v1/sandboxes/retiring-unjoined')).body.sandbox.id;
    const janitor = client(url, (await admin.post('/v1/keys', { name: `janitor-${backend}` })).body.secret);
    expect((await janitor.gql(RemoveSandbox, { id: unjoined })).body.data?.removeSandbox).toMatchObject({
      id: unjoined,
      removed: expect.any(String),
      removedBy: `janitor-${backend}`,
    });
    expect((await admin.get(`/v1/sandboxes/${unjoined}`)).body.sandbox.removedBy).toBe(`janitor-${backend}`);
    expect(await anonymous.post('/v1/sandboxes/join', { key })).toMatchObject({ status: 410, body: { code: 'sandbox_removed' } });
  });

  it("keeps organizations apart: another organization's sandbox is unknown", async () => {
    const theirs = await s.app.deps.prisma.organization.create({ data: { id: newId('org'), name: `tenant-${Date.now()}` } });
    const person = await s.app.deps.prisma.person.create({
      data: { id: newId('usr'), orgId: theirs.id, email: 'boss@tenant.test', admin: true },
    });
    const { issueCliToken } = await import('../src/modules/credentials/service');
    const other = client(url, (await issueCliToken(s.app.deps.prisma, person, { name: 't', createdBy: 'test', expires: null })).secret);
    const mine = await joined('tenant-mine');
    const reg = await other.post('/v1/sandboxes', { name: 'tenant-mine' });
    expect(reg.status).toBe(201);
    expect(reg.body.sandbox.org).toBe(theirs.name);
    expect((await other.get('/v1/sandboxes')).body.sandboxes.map((e: { sandbox: { id: string } }) => e.sandbox.id)).toEqual([
      reg.body.sandbox.id,
    ]);
    for (const path of [`/v1/sandboxes/${mine.id}`, `/v1/sandboxes/${mine.id}/config`]) {
      const foreign = await other.get(path);
      const unknown = await other.get(path.replace(mine.id, 'sb_aaaaaaaaaaaaaaaaaaaa'));
      expect(foreign).toMatchObject({ status: 404, body: { code: 'not_found' } });
      expect(foreign.body.error.replace(mine.id, 'X')).toBe(unknown.body.error.replace('sb_aaaaaaaaaaaaaaaaaaaa', 'X'));
    }
    expect((await other.del(`/v1/sandboxes/${mine.id}`)).status).toBe(404);
    // A key of another organization's sandbox is an unknown key to GraphQL callers of this one.
    const foreignKey = (await other.post('/v1/sandboxes', { name: 'tenant-key' })).body.key;
    expect((await admin.gql(JoinSandbox, { key: foreignKey })).body.errors?.[0]?.extensions?.code).toBe('unauthorized');
    // The agent's credential cannot reach the other organization either.
    expect((await mine.agent.get(`/v1/sandboxes/${reg.body.sandbox.id}/config`)).status).toBe(403);
  });

  it('streams the config to the agent over graphql-ws: now, on every change, and a last one on removal', async () => {
    const { id, credential } = await joined('watched');
    const ws = createClient({
      url: `${url().replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${credential}` },
      retryAttempts: 0,
    });
    const configs: { version: number; environments: { id: string }[]; sandbox: { removed?: string } }[] = [];
    let wake: () => void = () => undefined;
    const completed = new Promise<void>((resolve, reject) => {
      ws.subscribe<{ sandboxConfig: (typeof configs)[number] }>(
        { query: print(WatchConfig), variables: { id } },
        {
          next: (value) => {
            if (value.errors) reject(new Error(JSON.stringify(value.errors)));
            configs.push(value.data!.sandboxConfig);
            wake();
          },
          error: reject,
          complete: resolve,
        },
      );
    });
    const waitFor = async (n: number) => {
      while (configs.length < n) await new Promise<void>((r) => (wake = r));
    };
    await waitFor(1);
    expect(configs[0]).toMatchObject({ sandbox: { id }, environments: [] });

    const { env } = await wire({ sandbox: id });
    await notifySandboxConfig(s.app.deps, orgId, id);
    await waitFor(2);
    expect(configs[1]!.environments.map((e) => e.id)).toEqual([env.id]);
    expect(configs[1]!.version).toBeGreaterThan(configs[0]!.version);

    await s.app.deps.prisma.environment.update({ where: { id: env.id }, data: { state: 'failed' } });
    await notifySandboxConfig(s.app.deps, orgId, id);
    await waitFor(3);
    expect(configs[2]!.environments).toEqual([]);

    await admin.del(`/v1/sandboxes/${id}`);
    await completed;
    expect(configs.at(-1)!.sandbox.removed).toEqual(expect.any(String));
    expect(configs.map((c) => c.version)).toEqual([...configs.map((c) => c.version)].sort((a, b) => a - b));
    await ws.dispose();

    // A member may watch too; another sandbox's agent may not.
    const viewer = await joined('watcher');
    const refused = createClient({
      url: `${url().replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${viewer.credential}` },
      retryAttempts: 0,
    });
    const other = await register({ name: 'not-yours' });
    const error = await new Promise<unknown>((resolve) => {
      refused.subscribe(
        { query: print(WatchConfig), variables: { id: other.sandbox.id } },
        { next: resolve, error: resolve, complete: () => resolve(null) },
      );
    });
    expect(JSON.stringify(error)).toContain('forbidden');
    await refused.dispose();
  });

  it('streams the config over server-sent events', async () => {
    const { id, credential } = await joined('sse-agent');
    const controller = new AbortController();
    const res = await fetch(`${url()}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${credential}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: print(WatchConfig), variables: { id } }),
      signal: controller.signal,
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const reader = res.body!.getReader();
    let text = '';
    const readUntil = async (needle: string) => {
      while (!text.includes(needle)) {
        const { value, done } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
    };
    await readUntil('"environments"');
    const { env } = await wire({ sandbox: id });
    await notifySandboxConfig(s.app.deps, orgId, id);
    await readUntil(env.id);
    controller.abort();
    const events = text
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => JSON.parse(line.slice(5)));
    expect(events.at(-1).data.sandboxConfig.environments[0].id).toBe(env.id);
    expect(await sandboxConfig(s.app.deps, orgId, id, { keyring: true })).toEqual(events.at(-1).data.sandboxConfig);
  });

  it('describes every response in the OpenAPI document', async () => {
    const check = openApiValidator((await admin.get('/v1/openapi.json')).body);
    const reg = await admin.post('/v1/sandboxes', { name: 'documented' });
    check('POST', '/v1/sandboxes', reg);
    check('POST', '/v1/sandboxes', await admin.post('/v1/sandboxes', {}));
    check('POST', '/v1/sandboxes', await admin.post('/v1/sandboxes', { name: 'documented' }));
    check('POST', '/v1/sandboxes', await admin.post('/v1/sandboxes', { name: 'Not Valid' }));
    const join = await anonymous.post('/v1/sandboxes/join', { key: reg.body.key });
    check('POST', '/v1/sandboxes/join', join);
    check('POST', '/v1/sandboxes/join', await anonymous.post('/v1/sandboxes/join', { key: reg.body.key }));
    check('POST', '/v1/sandboxes/join', await anonymous.post('/v1/sandboxes/join', { key: 'bjk_unknown' }));
    const id = reg.body.sandbox.id;
    await wire({ sandbox: id, shares: { src: 'app' }, files: { 'src/.env': 'dev.env' } });
    await notifySandboxConfig(s.app.deps, orgId, id);
    const agent = client(url, join.body.credential);
    for (const [who, method, path] of [
      [admin, 'GET', '/v1/sandboxes'],
      [admin, 'GET', '/v1/sandboxes?removed=true'],
      [admin, 'GET', `/v1/sandboxes/${id}`],
      [admin, 'GET', '/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaa'],
      [admin, 'GET', `/v1/sandboxes/${id}/config`],
      [agent, 'GET', `/v1/sandboxes/${id}/config`],
      [agent, 'POST', `/v1/sandboxes/${id}/heartbeat`],
      [agent, 'GET', '/v1/sandboxes'],
      [admin, 'DELETE', `/v1/sandboxes/${id}`],
      [admin, 'DELETE', `/v1/sandboxes/${id}`],
    ] as const) {
      check(method, path, await who.call(method, path));
    }
  });
});
