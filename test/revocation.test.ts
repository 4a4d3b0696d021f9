import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { App } from '../src/app/server';
import { BOOTSTRAP, client, describeBackends, type Reply, startServer, type TestServer } from './helpers/server';

/**
 * Revoking a credential takes effect at once, on every transport and every instance: the guard for
 * any cache of credentials (issue 10). Each credential is used on every transport before it is
 * revoked, so whatever remembers credentials has remembered it.
 */

/** Opens a graphql-ws connection: 'connected', or the close code that refused it. */
function wsOutcome(url: string, secret: string): Promise<string> {
  return new Promise((resolve) => {
    const ws = createClient({
      url: `${url.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${secret}` },
      retryAttempts: 0,
      lazy: false,
      onNonLazyError: () => undefined,
    });
    ws.on('connected', () => {
      resolve('connected');
      void ws.dispose();
    });
    ws.on('closed', (e) => resolve(String((e as { code: number }).code)));
  });
}

/** An open graphql-ws connection with a live subscription; resolves with the close code once it is closed. */
async function openSubscription(url: string, secret: string): Promise<{ closed: Promise<number> }> {
  const ws = createClient({
    url: `${url.replace('http', 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${secret}` },
    retryAttempts: 0,
  });
  const closed = new Promise<number>((resolve) => ws.on('closed', (e) => resolve((e as { code: number }).code)));
  const connected = new Promise<void>((resolve) => ws.on('connected', () => resolve()));
  ws.subscribe(
    { query: 'subscription { environments { id state } }' },
    { next: () => undefined, error: () => undefined, complete: () => undefined },
  );
  await connected;
  return { closed };
}

const VIEWER = { query: '{ viewer { name } }' };

/** A GraphQL request refused for its credential (a request error: 401, no data). */
function expectRefused(res: Reply): void {
  expect(res.status).toBe(401);
  expect(res.body.data?.viewer).toBeUndefined();
  expect(JSON.stringify(res.body.errors)).toMatch(/revoked|unauthorized/i);
}

async function expectAccepted(url: string, secret: string): Promise<void> {
  const user = client(() => url, secret);
  expect((await user.get('/v1/me')).status).toBe(200);
  expect((await user.post('/graphql', VIEWER)).body.data.viewer.name).toEqual(expect.any(String));
  expect(await wsOutcome(url, secret)).toBe('connected');
}

async function expectRevoked(url: string, secret: string): Promise<void> {
  const user = client(() => url, secret);
  expect(await user.get('/v1/me')).toMatchObject({ status: 401, body: { code: 'unauthorized' } });
  expectRefused(await user.post('/graphql', VIEWER));
  expect(await wsOutcome(url, secret)).toBe('4401');
}

describeBackends('revocation', (backend) => {
  let s: TestServer;
  const admin = () => client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    // Every refusal counts as a failed authentication from 127.0.0.1: keep the 429 lock out of the way.
    s = await startServer(backend, { AUTH_FAILURE_LIMIT: '1000' });
  });
  afterAll(() => s.stop());

  it('refuses a revoked CLI token on the very next request, over REST, GraphQL and graphql-ws', async () => {
    const created = await admin().post('/v1/tokens', { email: 'soon-revoked@example.com' });
    await expectAccepted(s.url, created.body.secret);
    expect((await admin().del(`/v1/tokens/${created.body.token.id}`)).status).toBe(200);
    await expectRevoked(s.url, created.body.secret);
  });

  it('refuses a revoked API key on the very next request', async () => {
    const created = await admin().post('/v1/keys', { name: 'soon-revoked' });
    await expectAccepted(s.url, created.body.secret);
    expect((await admin().del(`/v1/keys/${created.body.key.id}`)).status).toBe(200);
    await expectRevoked(s.url, created.body.secret);
  });

  it('closes the open graphql-ws connections of a revoked credential with 4401, on every instance', async () => {
    const created = await admin().post('/v1/tokens', { email: 'open-socket@example.com' });
    const here = await openSubscription(s.url, created.body.secret);
    const peer: App | undefined = backend === 'postgres' ? await s.startPeer() : undefined;
    const there = peer ? await openSubscription(peer.url, created.body.secret) : undefined;
    const other = await admin().post('/v1/tokens', { email: 'still-open@example.com' });
    let otherClosed = false;
    void (await openSubscription(s.url, other.body.secret)).closed.then(() => {
      otherClosed = true;
    });
    expect((await admin().del(`/v1/tokens/${created.body.token.id}`)).status).toBe(200);
    expect(await here.closed).toBe(4401);
    if (there) expect(await there.closed).toBe(4401);
    // Another credential's socket stays open.
    expect(otherClosed).toBe(false);
  });

  it('ends the open SSE subscriptions of a revoked credential, and only those', async () => {
    const open = async (secret: string) => {
      const res = await fetch(`${s.url}/graphql`, {
        method: 'POST',
        headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify({ query: 'subscription { environments { id state } }' }),
      });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      // Resolves once the stream ends, by its end or by its connection closing.
      const ended = (async () => {
        for (;;) if ((await reader.read().catch(() => ({ done: true }))).done) return true;
      })();
      return { ended, cancel: () => reader.cancel().catch(() => undefined) };
    };
    const created = await admin().post('/v1/tokens', { email: 'sse-revoked@example.com' });
    const other = await admin().post('/v1/tokens', { email: 'sse-kept@example.com' });
    const revoked = await open(created.body.secret);
    const kept = await open(other.body.secret);
    let keptEnded = false;
    void kept.ended.then(() => {
      keptEnded = true;
    });
    expect((await admin().del(`/v1/tokens/${created.body.token.id}`)).status).toBe(200);
    expect(await revoked.ended).toBe(true);
    expect(keptEnded).toBe(false);
    await kept.cancel();
  });

  it('ends the open graphql-ws connections of a credential once it expires', async () => {
    const created = await admin().post('/v1/tokens', { email: 'expiring@example.com', expiresIn: '1h' });
    const lasting = await admin().post('/v1/tokens', { email: 'lasting@example.com' });
    const expiring = await openSubscription(s.url, created.body.secret);
    let lastingClosed = false;
    void (await openSubscription(s.url, lasting.body.secret)).closed.then(() => {
      lastingClosed = true;
    });
    s.clock.advance(60 * 60_000 + 1);
    expect(await expiring.closed).toBe(4401);
    expect(lastingClosed).toBe(false);
  });

  it("refuses a removed sandbox's credential on the very next request", async () => {
    const registered = await admin().post('/v1/sandboxes', { name: 'soon-removed' });
    const joined = await client(() => s.url).post('/v1/sandboxes/join', { key: registered.body.key });
    expect(joined.status).toBe(201);
    const id = registered.body.sandbox.id;
    const agent = client(() => s.url, joined.body.credential);
    expect((await agent.get(`/v1/sandboxes/${id}/config`)).status).toBe(200);
    expect((await admin().del(`/v1/sandboxes/${id}`)).status).toBe(200);
    expect(await agent.get(`/v1/sandboxes/${id}/config`)).toMatchObject({ status: 401, body: { code: 'unauthorized' } });
  });

  it.runIf(backend === 'postgres')('refuses it at once on every instance sharing the database', async () => {
    const peer: App = await s.startPeer();
    const created = await admin().post('/v1/tokens', { email: 'revoked-everywhere@example.com' });
    await expectAccepted(s.url, created.body.secret);
    await expectAccepted(peer.url, created.body.secret);
    // Revoked through one instance, refused by the other on its very next request.
    expect((await admin().del(`/v1/tokens/${created.body.token.id}`)).status).toBe(200);
    await expectRevoked(peer.url, created.body.secret);
    await expectRevoked(s.url, created.body.secret);
  });
});
