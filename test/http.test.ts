import { print } from 'graphql';
import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import { graphql } from './gql';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';
import { nextListener } from './helpers/subscriptions';

/** The bus topic of an organization's credential changes (credentialsChanged). */
const CREDENTIALS = /:credentials$/;

const CredentialsChanged = graphql(`subscription TestCredentialsChanged { credentialsChanged { kind action id } }`);

describeBackends('HTTP edges', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it('answers malformed bodies with 400 and the error body', async () => {
    const bad = await admin.post('/v1/tokens', '{"email": ', { 'content-type': 'application/json' });
    expect(bad).toMatchObject({ status: 400, body: { error: expect.stringContaining('malformed JSON'), code: 'invalid_json' } });
    const array = await admin.post('/v1/tokens', '[1,2]', { 'content-type': 'application/json' });
    expect(array).toMatchObject({ status: 400, body: { code: 'invalid_json' } });
    const type = await admin.post('/v1/tokens', 'email=a@b.c', { 'content-type': 'application/x-www-form-urlencoded' });
    expect(type).toMatchObject({ status: 400, body: { code: 'bad_content_type' } });
    const huge = await admin.post('/v1/tokens', JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) }), {
      'content-type': 'application/json',
    });
    expect(huge).toMatchObject({ status: 413, body: { code: 'too_large' } });
    // Nothing was created by any of them.
    expect((await admin.get('/v1/tokens')).body.tokens).toHaveLength(1);
  });

  it('answers unknown routes 404 and wrong methods 405, both with the error body', async () => {
    expect(await admin.get('/v1/nothing-here')).toMatchObject({ status: 404, body: { error: expect.any(String), code: 'not_found' } });
    expect(await admin.get('/nowhere')).toMatchObject({ status: 404, body: { code: 'not_found' } });
    const wrong = await admin.put('/v1/tokens', {});
    expect(wrong).toMatchObject({ status: 405, body: { error: expect.any(String), code: 'method_not_allowed' } });
    expect(wrong.headers.get('allow')).toBe('POST, GET');
  });

  it('serves GraphQL over GET and refuses browser requests without a preflight header', async () => {
    const query = encodeURIComponent('{ viewer { name } }');
    const ok = await admin.get(`/graphql?query=${query}`, { accept: 'application/json' });
    expect(ok.body).toEqual({ data: { viewer: { name: 'admin@berth.local' } } });
    const simple = await fetch(`${url()}/graphql?query=${query}`);
    expect(simple.status).toBe(403);
  });

  it('refuses queries over the cost limit before running them', async () => {
    const fine = await admin.call('POST', '/graphql', { query: '{ viewer { organization { name } } }' });
    expect(fine.body.data.viewer.organization.name).toBe('default');
    const aliases = Array.from({ length: 4000 }, (_, i) => `a${i}: viewer { organization { name } }`).join(' ');
    const res = await admin.call('POST', '/graphql', { query: `{ ${aliases} }` });
    expect(res.body.errors?.[0]?.message).toMatch(/cost/i);
    expect(res.body.data).toBeUndefined();
  });

  it('delivers subscriptions over graphql-ws and refuses sockets without credentials', async () => {
    const ws = createClient({
      url: `${url().replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    const events: unknown[] = [];
    const listening = nextListener(s.app.deps, CREDENTIALS);
    const done = new Promise<void>((resolve, reject) => {
      const unsubscribe = ws.subscribe<{ credentialsChanged: unknown }>(
        { query: print(CredentialsChanged) },
        {
          next: (value) => {
            events.push(value.data?.credentialsChanged);
            if (events.length === 2) {
              unsubscribe();
              resolve();
            }
          },
          error: reject,
          complete: () => undefined,
        },
      );
    });
    await listening;
    const key = await admin.post('/v1/keys', { name: 'watched' });
    await admin.del(`/v1/keys/${key.body.key.id}`);
    await done;
    expect(events).toEqual([
      { kind: 'key', action: 'created', id: key.body.key.id },
      { kind: 'key', action: 'revoked', id: key.body.key.id },
    ]);
    await ws.dispose();

    const anonymous = createClient({
      url: `${url().replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      retryAttempts: 0,
      lazy: false,
    });
    const closed = await new Promise<number>((resolve) => anonymous.on('closed', (e) => resolve((e as { code: number }).code)));
    expect(closed).toBe(4401);
    await anonymous.dispose();
  });

  it('delivers subscriptions over server-sent events', async () => {
    const controller = new AbortController();
    const listening = nextListener(s.app.deps, CREDENTIALS);
    const res = await fetch(`${url()}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: print(CredentialsChanged) }),
      signal: controller.signal,
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const reader = res.body!.getReader();
    await listening;
    const key = await admin.post('/v1/keys', { name: 'sse' });
    let text = '';
    while (!text.includes(key.body.key.id)) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    controller.abort();
    const data = text.split('\n').find((line) => line.startsWith('data:') && line.includes(key.body.key.id))!;
    expect(JSON.parse(data.slice(5))).toEqual({ data: { credentialsChanged: { kind: 'key', action: 'created', id: key.body.key.id } } });
  });

  it('keeps admin-only GraphQL fields from members', async () => {
    const member = client(url, (await admin.post('/v1/tokens', { email: 'm@example.com' })).body.secret);
    const res = await member.gql(graphql(`query TestApiKeys { apiKeys { id } }`));
    expect(res.body.errors?.[0]?.extensions?.code).toBe('forbidden');
  });
});
