import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

// GraphQL over HTTP: request errors (parse, validation, variables, credentials) are 4xx; errors
// while executing are 200 with `errors` beside the other fields' data.
describeBackends('GraphQL edge', (backend) => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it('answers a not-found beside other fields with 200, their data and the error', async () => {
    const res = await admin.post('/graphql', { query: '{ viewer { name } environment(id: "nope") { id } }' });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ viewer: { name: 'admin@berth.local' }, environment: null });
    expect(res.body.errors).toEqual([
      expect.objectContaining({ path: ['environment'], extensions: { code: 'not_found' }, message: expect.stringContaining('nope') }),
    ]);
    // REST keeps its statuses.
    expect(await admin.get('/v1/environments/nope')).toMatchObject({ status: 404, body: { code: 'not_found' } });
  });

  it('answers request errors with 4xx', async () => {
    expect((await admin.post('/graphql', { query: '{ viewer { nope } }' })).status).toBe(400);
    expect((await admin.post('/graphql', { query: '{ viewer ' })).status).toBe(400);
    const anonymous = await client(() => s.url).post('/graphql', { query: '{ viewer { name } }' });
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.errors[0].extensions.code).toBe('unauthorized');
  });

  it('answers a document that does not parse or validate, or variables that do not coerce, with 200 to clients asking for application/json', async () => {
    const requests = [
      { query: '{ viewer ' },
      { query: '{ viewer { nope } }' },
      { query: 'query ($id: ID!) { environment(id: $id) { id } }', variables: { id: null } },
    ];
    for (const body of requests) {
      const json = await admin.post('/graphql', body, { accept: 'application/json' });
      expect(json.status, body.query).toBe(200);
      expect(json.headers.get('content-type')).toContain('application/json');
      expect(json.body.data).toBeUndefined();
      expect(json.body.errors[0].extensions.code).toBe('invalid');
      // GraphQL over HTTP's own media type, and clients that name no type, keep the 400.
      expect((await admin.post('/graphql', body, { accept: 'application/graphql-response+json' })).status, body.query).toBe(400);
      expect((await admin.post('/graphql', body, { accept: '*/*' })).status, body.query).toBe(400);
    }
  });

  it('checks credentials before it reads a document: refused ones answer 401, however broken the document', async () => {
    const broken = '{ viewer { name ';
    // Over 64 KiB: yoga's path rather than the direct POST path.
    const large = `{ ${'viewer { name } '.repeat(5000)}`;
    for (const token of [undefined, 'bct_not-a-token-of-this-server']) {
      const caller = client(() => s.url, token);
      for (const query of [broken, large]) {
        const res = await caller.post('/graphql', { query });
        expect(res.status, `${token} ${query.length}`).toBe(401);
        expect(res.body.errors[0].extensions.code).toBe('unauthorized');
      }
      const get = await caller.get(`/graphql?query=${encodeURIComponent(broken)}`, { 'x-graphql-yoga-csrf': '1' });
      expect(get.status).toBe(401);
      const sse = await caller.post('/graphql', { query: `subscription ${broken}` }, { accept: 'text/event-stream' });
      expect(sse.status).toBe(401);
    }
    // With credentials, the same documents are read, and refused for what they say.
    expect((await admin.post('/graphql', { query: broken })).status).toBe(400);
    expect((await admin.post('/graphql', { query: large })).status).toBe(400);
  });

  it('reads no operation of a graphql-ws connection before its credentials are accepted', async () => {
    const closeOf = async (first: unknown, second?: unknown) => {
      const ws = new WebSocket(`${s.url.replace('http', 'ws')}/graphql`, 'graphql-transport-ws');
      await new Promise((resolve) => ws.once('open', resolve));
      const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
      ws.send(JSON.stringify(first));
      if (second) ws.send(JSON.stringify(second));
      return closed;
    };
    const subscribe = { id: '1', type: 'subscribe', payload: { query: 'subscription { broken ' } };
    expect(await closeOf(subscribe)).toBe(4401);
    expect(await closeOf({ type: 'connection_init', payload: { authorization: 'Bearer bct_not-a-token-of-this-server' } }, subscribe)).toBe(
      4401,
    );
  });

  it('refuses a query over the depth or cost limit with 400 on every path, and over graphql-ws', async () => {
    const costly = `{ ${Array.from({ length: 12 }, (_, i) => `a${i}: environments(first: 500) { nodes { id name } }`).join(' ')} }`;
    const deep = `{ __type(name: "Query") { fields { type { ${'ofType { '.repeat(10)}name${' }'.repeat(10)} } } } }`;
    for (const [query, limit] of [
      [costly, /cost limit of 20000/i],
      [deep, /depth limit of 12/i],
    ] as const) {
      // Small JSON POSTs (the direct POST path), whatever the client accepts; GET (yoga).
      for (const accept of ['application/json', 'application/graphql-response+json', '*/*']) {
        const res = await admin.post('/graphql', { query }, { accept });
        expect(res.status, accept).toBe(400);
        expect(res.body.data).toBeUndefined();
        expect(res.body.errors[0]).toMatchObject({ extensions: { code: 'invalid' }, message: expect.stringMatching(limit) });
      }
      const get = await admin.get(`/graphql?query=${encodeURIComponent(query)}`, { accept: 'application/json' });
      expect(get.status).toBe(400);
      expect(get.body.errors[0].message).toMatch(limit);
    }
    const ws = createClient({
      url: `${s.url.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    const outcome = await new Promise<unknown>((resolve) => {
      ws.subscribe({ query: costly }, { next: resolve, error: resolve, complete: () => undefined });
    });
    expect(outcome).toEqual([
      expect.objectContaining({ message: expect.stringMatching(/cost limit/i), extensions: expect.objectContaining({ code: 'invalid' }) }),
    ]);
    await ws.dispose();
  });

  it('refuses documents over the parse limits with 400, to clients asking for application/json too', async () => {
    const nested = `{ ${'a { '.repeat(100)}b${' }'.repeat(100)} }`;
    const tokens = `{ ${Array.from({ length: 30_000 }, (_, i) => `a${i}: __typename`).join(' ')} }`;
    for (const [query, limit] of [
      [nested, /nested more than 64 levels/],
      [tokens, /more than 50000 tokens/],
    ] as const) {
      for (const accept of ['application/json', 'application/json, application/graphql-response+json']) {
        const res = await admin.post('/graphql', { query }, { accept });
        expect(res.status, accept).toBe(400);
        expect(res.body.errors[0]).toMatchObject({ extensions: { code: 'invalid' }, message: expect.stringMatching(limit) });
      }
    }
  });

  it('refuses documents nested thousands of levels deep while parsing, without overflowing', async () => {
    const deep = (n: number) => `{ ${'a { '.repeat(n)}b${' }'.repeat(n)} }`;
    for (const query of [deep(5000), deep(100_000)]) {
      const res = await admin.post('/graphql', { query });
      expect(res.status).toBe(400);
      expect(res.body.errors[0]).toMatchObject({ extensions: { code: 'invalid' }, message: expect.stringMatching(/nest/i) });
    }
    const literal = `mutation { putTemplate(name: "x", spec: ${'{a: '.repeat(3000)}1${'}'.repeat(3000)}) { name } }`;
    const res = await admin.post('/graphql', { query: literal });
    expect(res.status).toBe(400);
    expect(res.body.errors[0].message).toMatch(/nest/i);
    const list = `{ environments(filter: {label: ${'['.repeat(3000)}"a"${']'.repeat(3000)}}) { nodes { id } } }`;
    expect((await admin.post('/graphql', { query: list })).status).toBe(400);
  });

  it('refuses documents with too many tokens while parsing', async () => {
    const query = `{ ${Array.from({ length: 30_000 }, (_, i) => `a${i}: __typename`).join(' ')} }`;
    const res = await admin.post('/graphql', { query });
    expect(res.status).toBe(400);
    expect(res.body.errors[0].message).toMatch(/tokens/);
  });

  it('refuses deep documents over graphql-ws the same way', async () => {
    const ws = createClient({
      url: `${s.url.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    const errors = await new Promise<{ message: string }[]>((resolve) => {
      ws.subscribe(
        { query: `subscription { ${'a { '.repeat(20_000)}b${' }'.repeat(20_000)} }` },
        { next: () => resolve([]), error: (e) => resolve(e as { message: string }[]), complete: () => undefined },
      );
    });
    expect(errors[0]!.message).toMatch(/nest/i);
    await ws.dispose();
  });

  it('holds at most 100 subscriptions on one graphql-ws connection: the next is refused, a completed one frees its place', async () => {
    const ws = createClient({
      url: `${s.url.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    type Errors = { message: string; extensions?: { code?: string } }[];
    const query = 'subscription { environments { state } }';
    /** Subscribes; `outcome` settles with its first event or its error. */
    const subscribe = () => {
      let settle: (value: 'event' | Errors) => void = () => undefined;
      const outcome = new Promise<'event' | Errors>((resolve) => {
        settle = resolve;
      });
      const stop = ws.subscribe({ query }, { next: () => settle('event'), error: (e) => settle(e as Errors), complete: () => undefined });
      return { stop, outcome };
    };
    const held = Array.from({ length: 100 }, subscribe);
    const refused = await subscribe().outcome;
    expect(refused).not.toBe('event');
    expect((refused as Errors)[0]).toMatchObject({ extensions: { code: 'too_many_subscriptions' } });
    expect((refused as Errors)[0]!.message).toMatch(/at most 100 subscriptions per connection/);
    // One completed: the next is accepted, and hears of the next change like the others.
    held[0]!.stop();
    const next = subscribe();
    const created = await admin.post('/v1/environments', { template: 'default' });
    expect(await next.outcome).toBe('event');
    expect(await held[1]!.outcome).toBe('event');
    await admin.del(`/v1/environments/${created.body.environment.id}`);
    await ws.dispose();
  });

  it('serves no GraphiQL page (it would load scripts from another origin)', async () => {
    const page = await fetch(`${s.url}/graphql`, { headers: { accept: 'text/html' } });
    expect(page.headers.get('content-type') ?? '').not.toMatch(/text\/html/);
    expect(await page.text()).not.toMatch(/<script|unpkg|jsdelivr/);
  });

  it('closes a graphql-ws connection whose frame is larger than 1 MiB, before buffering it', async () => {
    const ws = new WebSocket(`${s.url.replace('http', 'ws')}/graphql`, 'graphql-transport-ws');
    await new Promise((resolve) => ws.once('open', resolve));
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    ws.send(Buffer.alloc(1024 * 1024 + 1, 'a').toString());
    expect(await closed).toBe(1009);
    // A frame up to the limit is read (and refused for what it says, not for its size).
    const fine = new WebSocket(`${s.url.replace('http', 'ws')}/graphql`, 'graphql-transport-ws');
    await new Promise((resolve) => fine.once('open', resolve));
    const fineClosed = new Promise<number>((resolve) => fine.once('close', (code) => resolve(code)));
    fine.send(JSON.stringify({ type: 'connection_init', payload: { pad: 'a'.repeat(1000) } }));
    fine.close(1000);
    expect(await fineClosed).not.toBe(1009);
  });

  it('refuses a query string that is not well-formed UTF-8, as REST does', async () => {
    for (const bad of ['%FF', '%ED%A0%80', '%zz']) {
      const res = await admin.get(`/graphql?query=${bad}`);
      expect(res).toMatchObject({ status: 400, body: { code: 'bad_request', error: expect.stringContaining('query: malformed') } });
    }
    const good = await admin.get(`/graphql?query=${encodeURIComponent('{ viewer { name } }')}`, { accept: 'application/json' });
    expect(good).toMatchObject({ status: 200, body: { data: { viewer: { name: 'admin@berth.local' } } } });
  });

  it('answers 406, 413 and 415 with an error body', async () => {
    const huge = await admin.post('/graphql', { query: '{ viewer { name } }', variables: { x: 'x'.repeat(2 * 1024 * 1024) } });
    expect(huge).toMatchObject({ status: 413, body: { error: expect.any(String), code: 'too_large' } });
    const notAcceptable = await fetch(`${s.url}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json', accept: 'image/png' },
      body: JSON.stringify({ query: '{ viewer { name } }' }),
    });
    expect(notAcceptable.status).toBe(406);
    expect(await notAcceptable.json()).toMatchObject({ error: expect.any(String), code: 'not_acceptable' });
    const unsupported = await fetch(`${s.url}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'text/plain' },
      body: '{ viewer { name } }',
    });
    expect(unsupported.status).toBe(415);
    expect(await unsupported.json()).toMatchObject({ error: expect.any(String), code: 'unsupported_media_type' });
  });
});
