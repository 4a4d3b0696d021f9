import { afterAll, beforeAll, expect, it } from 'vitest';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

describeBackends('failed-authentication lock', (backend) => {
  let s: TestServer;
  const url = () => s.url;

  beforeAll(async () => {
    s = await startServer(backend, { AUTH_FAILURE_LIMIT: '3' });
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

    s.clock.advance(30_001);
    expect((await admin.get('/v1/me')).status).toBe(200);
    expect((await intruder.get('/v1/me')).status).toBe(401);
  });
});
