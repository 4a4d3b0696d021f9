import { afterAll, beforeAll, expect, it } from 'vitest';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

describeBackends('failed-authentication lock', (backend) => {
  let s: TestServer;
  const url = () => s.url;

  beforeAll(async () => {
    // One proxy in front: each test names its own client address.
    s = await startServer(backend, { AUTH_FAILURE_LIMIT: '3', TRUST_PROXY: '1' });
  });
  afterAll(() => s?.stop());

  it('locks an address out for one minute after more than AUTH_FAILURE_LIMIT failures in a minute', async () => {
    const intruder = client(url, 'bct_wrong');
    const admin = client(url, BOOTSTRAP);
    for (let i = 0; i < 3; i++) expect((await intruder.get('/v1/me')).status).toBe(401);
    // Failures older than the window do not add up.
    s.clock.advance(61_000);
    for (let i = 0; i < 3; i++) expect((await intruder.get('/v1/me')).status).toBe(401);
    expect((await admin.get('/v1/me')).status).toBe(200);

    const locked = await intruder.get('/v1/me');
    expect(locked.status).toBe(429);
    expect(locked.body).toEqual({ error: expect.any(String), code: 'rate_limited' });
    expect(Number(locked.headers.get('retry-after'))).toBe(60);

    // Every request from the address is refused while locked, valid credentials included.
    const blocked = await admin.get('/v1/me');
    expect(blocked.status).toBe(429);
    expect((await client(url).get('/v1/me')).status).toBe(429);
    const gql = await admin.call('POST', '/graphql', { query: '{ viewer { name } }' });
    expect(gql.status).toBe(429);
    expect(gql.headers.get('retry-after')).toBeTruthy();

    s.clock.advance(30_000);
    expect(Number((await admin.get('/v1/me')).headers.get('retry-after'))).toBe(30);

    // The lock is in the database: a restart does not lift it.
    await s.restart();
    expect((await admin.get('/v1/me')).status).toBe(429);
    // The built-in node shares loopback with every local client: its own credential still connects
    // (the restart waited for it), a wrong one of its kind is refused like any.
    const node = await s.app.deps.prisma.remoteNode.findUniqueOrThrow({ where: { id: s.app.deps.builtin.id } });
    expect(node.state).toBe('online');
    expect((await client(url, 'bnd_builtin_guessed').get('/v1/me')).status).toBe(429);

    s.clock.advance(30_001);
    expect((await admin.get('/v1/me')).status).toBe(200);
    expect((await intruder.get('/v1/me')).status).toBe(401);
  });

  it('prunes the failures of addresses whose window is over and that are not locked', async () => {
    const intruder = client(url, 'bct_wrong-again');
    const failures = () => s.app.deps.prisma.authFailure.count({ where: { address: { startsWith: '198.51.100.' } } });
    for (let i = 1; i <= 20; i++) {
      expect((await intruder.get('/v1/me', { 'x-forwarded-for': `198.51.100.${i}` })).status).toBe(401);
    }
    // One address fails once 30 s later, then three times more 20 s after that: locked until 110 s.
    s.clock.advance(30_000);
    await intruder.get('/v1/me', { 'x-forwarded-for': '198.51.100.99' });
    s.clock.advance(20_000);
    for (let i = 0; i < 3; i++) await intruder.get('/v1/me', { 'x-forwarded-for': '198.51.100.99' });
    expect((await intruder.get('/v1/me', { 'x-forwarded-for': '198.51.100.99' })).status).toBe(429);
    expect(await failures()).toBe(21);
    await s.app.deps.background.tick();
    expect(await failures()).toBe(21); // all within their window
    s.clock.advance(45_000);
    await s.app.deps.background.tick();
    expect(await failures()).toBe(1); // the locked one keeps its row while its lock holds
    s.clock.advance(16_000);
    await s.app.deps.background.tick();
    expect(await failures()).toBe(0);
  });
});
