import { afterAll, beforeAll, expect, it } from 'vitest';
import { graphql } from './gql';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const Viewer = graphql(`query TestViewer { viewer { kind name admin organization { name } } }`);
const CreateKey = graphql(`mutation TestCreateKey($input: CreateApiKeyInput!) { createApiKey(input: $input) { key { id name } } }`);

describeBackends('authentication and identity', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it('keeps a revoked BOOTSTRAP_TOKEN revoked across restarts, and refuses one shorter than 32 characters', async () => {
    const other = await startServer(backend);
    try {
      const boss = client(() => other.url, BOOTSTRAP);
      const mine = (await boss.get('/v1/tokens')).body.tokens.find((t: { name: string }) => t.name === 'bootstrap');
      expect((await boss.del(`/v1/tokens/${mine.id}`)).status).toBe(200);
      await other.restart();
      expect(other.app.bootstrapRevoked).toBe(true);
      expect((await client(() => other.url, BOOTSTRAP).get('/v1/me')).status).toBe(401);
    } finally {
      await other.stop();
    }
    await expect(startServer(backend, { BOOTSTRAP_TOKEN: 'bct_short-0123456789' })).rejects.toThrow(
      /BOOTSTRAP_TOKEN must be at least 32 characters/,
    );
  });

  it('serves the bootstrap admin of the default organization', async () => {
    const me = await admin.get('/v1/me');
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ kind: 'person', name: 'admin@berth.local', admin: true, organization: { name: 'default' } });
    const viaGraphql = await admin.gql(Viewer);
    expect(viaGraphql.body.data?.viewer).toEqual({
      kind: 'person',
      name: 'admin@berth.local',
      admin: true,
      organization: { name: 'default' },
    });
  });

  it('answers 401 with the error body for missing, malformed and unknown credentials', async () => {
    for (const headers of [
      {} as Record<string, string>,
      { authorization: 'Basic abc' },
      { authorization: 'Bearer nope' },
      { authorization: 'Bearer' },
    ]) {
      const res = await client(url).get('/v1/me', headers);
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: expect.any(String), code: 'unauthorized' });
    }
    const gql = await client(url, 'wrong').gql(Viewer);
    expect(gql.status).toBe(401);
    expect(gql.body.errors?.[0]?.extensions?.code).toBe('unauthorized');
  });

  it('creates a CLI token for a new member, shows the secret once and stores only its hash', async () => {
    const res = await admin.post('/v1/tokens', { email: 'Dev@Example.com', name: 'laptop' });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      secret: expect.stringMatching(/^bct_[A-Za-z0-9]{43}$/),
      token: {
        id: expect.stringMatching(/^tok_/),
        name: 'laptop',
        person: 'dev@example.com',
        admin: false,
        prefix: res.body.secret.slice(0, 10),
        createdBy: 'admin@berth.local',
        created: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      },
    });
    const dev = client(url, res.body.secret);
    expect((await dev.get('/v1/me')).body).toMatchObject({ kind: 'person', name: 'dev@example.com', admin: false });
    const rows = await s.app.deps.db.pool.query(`SELECT "secretHash" FROM "Credential" WHERE id = $1`, [res.body.token.id]);
    expect(rows.rows[0].secretHash).toMatch(/^[0-9a-f]{64}$/);
    expect(rows.rows[0].secretHash).not.toContain(res.body.secret);
    const listed = await admin.get('/v1/tokens');
    expect(listed.body.tokens.map((t: { id: string }) => t.id)).toContain(res.body.token.id);
    expect(JSON.stringify(listed.body)).not.toContain(res.body.secret);
  });

  it('lets a member create a token for themself only, and never an admin', async () => {
    const { body } = await admin.post('/v1/tokens', { email: 'member@example.com' });
    const member = client(url, body.secret);
    const own = await member.post('/v1/tokens', { name: 'ci' });
    expect(own.status).toBe(201);
    expect(own.body.token.person).toBe('member@example.com');
    const other = await member.post('/v1/tokens', { email: 'someone@example.com' });
    expect(other).toMatchObject({ status: 403, body: { code: 'forbidden' } });
    const promote = await member.post('/v1/tokens', { admin: true });
    expect(promote).toMatchObject({ status: 403, body: { code: 'forbidden' } });
    const keys = await member.post('/v1/keys', { name: 'nope' });
    expect(keys).toMatchObject({ status: 403, body: { error: expect.any(String), code: 'forbidden' } });
    expect((await member.get('/v1/keys')).status).toBe(403);
    const mine = await member.get('/v1/tokens');
    expect(mine.body.tokens.every((t: { person: string }) => t.person === 'member@example.com')).toBe(true);
  });

  it('refuses expired and revoked tokens', async () => {
    const expiring = await admin.post('/v1/tokens', { email: 'temp@example.com', expiresIn: '1h' });
    expect(expiring.body.token.expires).toBeDefined();
    const temp = client(url, expiring.body.secret);
    expect((await temp.get('/v1/me')).status).toBe(200);
    s.clock.advance(60 * 60 * 1000 + 1000);
    expect(await temp.get('/v1/me')).toMatchObject({
      status: 401,
      body: { code: 'unauthorized', error: expect.stringContaining('expired') },
    });

    const revocable = await admin.post('/v1/tokens', { email: 'gone@example.com' });
    const gone = client(url, revocable.body.secret);
    const revoked = await gone.del(`/v1/tokens/${revocable.body.token.id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.body.token.revoked).toBeDefined();
    expect(await gone.get('/v1/me')).toMatchObject({ status: 401, body: { error: expect.stringContaining('revoked') } });
    const again = await admin.del(`/v1/tokens/${revocable.body.token.id}`);
    expect(again.body.token.revoked).toBe(revoked.body.token.revoked);
  });

  it('creates API keys that act for the organization under their own name', async () => {
    const created = await admin.post('/v1/keys', { name: 'deploy-bot', admin: true });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      secret: expect.stringMatching(/^bak_/),
      key: { id: expect.stringMatching(/^key_/), name: 'deploy-bot', admin: true, createdBy: 'admin@berth.local' },
    });
    const bot = client(url, created.body.secret);
    expect((await bot.get('/v1/me')).body).toMatchObject({ kind: 'apiKey', name: 'deploy-bot', admin: true });
    const token = await bot.post('/v1/tokens', { email: 'ops@example.com' });
    expect(token.body.token.createdBy).toBe('deploy-bot');
    expect((await bot.post('/v1/tokens', {})).status).toBe(422);

    const plain = await admin.post('/v1/keys', { name: 'reader' });
    const reader = client(url, plain.body.secret);
    expect((await reader.post('/v1/keys', { name: 'x' })).status).toBe(403);
    await admin.del(`/v1/keys/${plain.body.key.id}`);
    expect((await reader.get('/v1/me')).status).toBe(401);
    expect((await admin.get('/v1/keys')).body.keys.map((k: { name: string }) => k.name)).toEqual(['reader', 'deploy-bot']);
  });

  it('keeps the names of live API keys unique, so createdBy names one key', async () => {
    const first = await admin.post('/v1/keys', { name: 'ci-bot' });
    expect(first.status).toBe(201);
    const taken = await admin.post('/v1/keys', { name: 'ci-bot' });
    expect(taken).toMatchObject({ status: 409, body: { code: 'name_taken', error: expect.stringContaining('ci-bot') } });
    expect((await admin.gql(CreateKey, { input: { name: 'ci-bot' } })).body.errors?.[0]?.extensions?.code).toBe('name_taken');
    // A revoked key frees its name, and so does an expired one.
    await admin.del(`/v1/keys/${first.body.key.id}`);
    const second = await admin.post('/v1/keys', { name: 'ci-bot', expiresIn: '1h' });
    expect(second.status).toBe(201);
    s.clock.advance(60 * 60 * 1000 + 1000);
    expect((await admin.post('/v1/keys', { name: 'ci-bot' })).status).toBe(201);
    // Racing creates: exactly one takes the name.
    const racing = await Promise.all(Array.from({ length: 8 }, () => admin.post('/v1/keys', { name: 'racer' })));
    expect(racing.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409, 409, 409]);
  });

  it('validates token and key input with 422', async () => {
    expect(await admin.post('/v1/tokens', { email: 'not-an-email' })).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await admin.post('/v1/tokens', { expiresIn: 'soon' })).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await admin.post('/v1/tokens', { email: 42 })).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await admin.post('/v1/keys', {})).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await admin.post('/v1/keys', { name: '   ' })).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await admin.post('/v1/tokens', { nope: 1 })).toMatchObject({ status: 422, body: { code: 'invalid' } });
  });

  it('keeps organizations apart: another organization looks like nothing at all', async () => {
    const org = await s.app.deps.prisma.organization.create({ data: { id: 'org_other', name: 'other' } });
    const person = await s.app.deps.prisma.person.create({
      data: { id: 'usr_other', orgId: org.id, email: 'boss@other.test', admin: true },
    });
    const { issueCliToken } = await import('../src/modules/credentials/service');
    const { secret } = await issueCliToken(s.app.deps.prisma, person, { name: 't', createdBy: 'test', expires: null });
    const other = client(url, secret);
    const theirs = await other.post('/v1/keys', { name: 'theirs' });
    const ours = (await admin.get('/v1/keys')).body.keys;
    expect(ours.map((k: { id: string }) => k.id)).not.toContain(theirs.body.key.id);
    const foreign = await admin.del(`/v1/keys/${theirs.body.key.id}`);
    const unknown = await admin.del('/v1/keys/key_doesnotexist');
    expect(foreign.status).toBe(404);
    expect(foreign.body).toEqual({ error: foreign.body.error, code: 'not_found' });
    expect(foreign.body.error.replace(theirs.body.key.id, 'X')).toBe(unknown.body.error.replace('key_doesnotexist', 'X'));
    const viaGraphql = await admin.gql(graphql(`mutation TestRevokeKey($id: ID!) { revokeApiKey(id: $id) { id } }`), {
      id: theirs.body.key.id,
    });
    expect(viaGraphql.body.errors?.[0]?.extensions?.code).toBe('not_found');
    expect((await other.get('/v1/me')).body.organization.name).toBe('other');
  });

  it('keeps every record across a restart', async () => {
    const before = (await admin.get('/v1/tokens')).body.tokens;
    const key = await admin.post('/v1/keys', { name: 'survivor' });
    await s.restart();
    expect((await admin.get('/v1/tokens')).body.tokens).toEqual(before.map((t: object) => expect.objectContaining(t)));
    expect((await client(url, key.body.secret).get('/v1/me')).body.name).toBe('survivor');
  });
});
