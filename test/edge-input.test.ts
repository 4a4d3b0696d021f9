import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

// Strings PostgreSQL cannot store (NUL, lone UTF-16 surrogates) are refused at the edge with a
// 4xx naming the field; names refuse control characters, ANSI escapes and bidi overrides.
describeBackends('input at the edges', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  const json = { 'content-type': 'application/json' };

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  const refused = (reply: { status: number; body: any }, field: string) => {
    expect(reply.status).toBe(422);
    expect(reply.body).toMatchObject({ code: 'invalid', error: expect.stringContaining(field) });
  };

  it('refuses NUL and lone surrogates in REST paths, queries and bodies, naming the field', async () => {
    refused(await admin.get('/v1/environments/a%00b'), 'id');
    refused(await admin.get('/v1/sandboxes/a%00b'), 'id');
    refused(await admin.del('/v1/project-keys/a%00b'), 'project');
    refused(await admin.get('/v1/environments?template=a%00b'), 'template');
    refused(await admin.get('/v1/artifacts?name=a%00b'), 'name');
    refused(await admin.post('/v1/tokens', '{"name":"a\\u0000b"}', json), 'name');
    refused(await admin.post('/v1/environments', '{"template":"default","include":["\\ud800x"]}', json), 'include[0]');
    refused(await admin.post('/v1/environments', '{"template":"default","files":{"src/a":"\\udc00"}}', json), 'files');
    refused(await admin.put('/v1/quotas/default', '{"maxLeases":1,"idle":"1h\\u0000"}', json), 'idle');
    // Invalid UTF-8 is refused as a whole, not silently replaced.
    const bytes = Buffer.concat([Buffer.from('{"name":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]);
    const invalid = await fetch(`${url()}/v1/tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, ...json },
      body: new Uint8Array(bytes),
    });
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toMatchObject({ code: 'invalid_json', error: expect.stringContaining('UTF-8') });
    // Nothing was stored by any of them.
    expect((await admin.get('/v1/tokens')).body.tokens).toHaveLength(1);
  });

  it('refuses NUL and lone surrogates in GraphQL variables and string literals, over HTTP', async () => {
    const variables = await admin.post('/graphql', {
      query: 'query ($id: String!) { environment(id: $id) { id } }',
      variables: { id: 'a\u0000b' },
    });
    expect(variables.status).toBe(400);
    expect(variables.body.errors[0]).toMatchObject({ message: expect.stringContaining('$id'), extensions: { code: 'invalid' } });
    const nested = await admin.post('/graphql', {
      query: 'mutation ($input: CreateTokenInput) { createToken(input: $input) { secret } }',
      variables: { input: { name: 'x\ud800' } },
    });
    expect(nested.status).toBe(400);
    expect(nested.body.errors[0].message).toContain('$input.name');
    const literal = await admin.post('/graphql', { query: '{ environment(id: "a\\u0000b") { id } }' });
    expect(literal.status).toBe(400);
    expect(literal.body.errors[0]).toMatchObject({ extensions: { code: 'invalid' } });
    expect(literal.body.errors[0].message).toMatch(/U\+0000/);
  });

  it('refuses them in graphql-ws payloads too', async () => {
    const ws = createClient({
      url: `${url().replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    const run = (payload: { query: string; variables?: Record<string, unknown> }) =>
      new Promise<unknown>((resolve) => {
        ws.subscribe(payload, { next: resolve, error: resolve, complete: () => undefined });
      });
    const viaVariable = (await run({
      query: 'subscription ($id: String!) { environment(id: $id) { id } }',
      variables: { id: 'a\u0000b' },
    })) as { message: string; extensions: { code: string } }[];
    expect(viaVariable[0]).toMatchObject({ message: expect.stringContaining('$id'), extensions: { code: 'invalid' } });
    const viaLiteral = (await run({ query: 'subscription { environment(id: "a\\u0000b") { id } }' })) as { message: string }[];
    expect(viaLiteral[0]!.message).toMatch(/U\+0000/);
    await ws.dispose();
  });

  it('refuses control characters, ANSI escapes and bidi overrides in names', async () => {
    refused(await admin.post('/v1/tokens', { name: 'laptop\u001b[31m' }), 'name');
    refused(await admin.post('/v1/tokens', { name: 'evil\u202egnp.exe' }), 'name');
    refused(await admin.post('/v1/keys', { name: 'bot\nsecond line' }), 'name');
    const artifact = await fetch(`${url()}/v1/artifacts?name=${encodeURIComponent('a\u0007b.txt')}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream' },
      body: 'x',
    });
    expect(artifact.status).toBe(422);
    expect(await artifact.json()).toMatchObject({ code: 'invalid', error: expect.stringContaining('name') });
    refused(await admin.post('/v1/sandboxes', { name: 'box\u200f' }), 'name');
    refused(await admin.post('/v1/environments', { template: 'default', labels: { team: 'in\u001bfra' } }), 'labels');
    // Ordinary names, accents and emoji included, still work.
    expect((await admin.post('/v1/tokens', { name: 'Zoë’s laptop 💻' })).status).toBe(201);
  });

  it('answers body field errors in REST words and takes no bare string for an array', async () => {
    const bare = await admin.post('/v1/environments', { template: 'default', restore: 'main' });
    expect(bare).toMatchObject({ status: 422, body: { code: 'invalid', error: 'restore: must be an array of strings' } });
    const include = await admin.post('/v1/environments', { template: 'default', include: 'src/**' });
    expect(include.body.error).toBe('include: must be an array of strings');
    const type = await admin.post('/v1/environments', { template: 5 });
    expect(type).toMatchObject({ status: 422, body: { error: 'template: must be a string' } });
    expect(type.body.error).not.toMatch(/Variable|\$input/);
    const missing = await admin.post('/v1/environments', { labels: {} });
    expect(missing.body).toMatchObject({ code: 'invalid', error: 'template: is required' });
    const unknown = await admin.post('/v1/environments', { template: 'default', tempalte: 'x' });
    expect(unknown.body.error).toMatch(/^tempalte: unknown field/);
    const integer = await admin.put('/v1/quotas/default', { maxLeases: 1.5 });
    expect(integer.body.error).toBe('maxLeases: must be an integer');
    const object = await admin.post('/v1/environments', { template: 'default', labels: ['a'] });
    expect(object.body.error).toBe('labels: must be an object');
    const item = await admin.post('/v1/environments', { template: 'default', restore: ['a', 7] });
    expect(item.body.error).toBe('restore[1]: must be a string');
    // Routes with handlers of their own (join, exec) follow the same rules.
    const join = client(url);
    const extra = await join.post('/v1/sandboxes/join', { key: 'bjk_x', keey: 'y' });
    expect(extra).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(extra.body.error).toMatch(/^keey: unknown field/);
    expect((await join.post('/v1/sandboxes/join', { key: 7 })).body.error).toBe('key: must be a string');
    const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
    const exec = await admin.post(`/v1/environments/${env.id}/exec`, { command: 'ls' });
    expect(exec).toMatchObject({ status: 422, body: { code: 'invalid', error: 'command: must be an array of strings' } });
    expect((await admin.post(`/v1/environments/${env.id}/exec`, { command: ['ls'], cwd: '/' })).body.error).toMatch(/^cwd: unknown field/);
  });

  it('bounds what error messages echo, and the number of restore keys', async () => {
    const huge = 'x'.repeat(900 * 1024);
    const rest = await admin.post('/v1/environments', { template: 'default', snapshot: huge });
    expect(rest.status).toBe(422);
    expect(rest.body.error.length).toBeLessThan(1000);
    const gql = await admin.post('/graphql', {
      query: 'query ($first: Int) { environments(first: $first) { nodes { id } } }',
      variables: { first: huge },
    });
    expect(gql.status).toBe(400);
    expect(JSON.stringify(gql.body).length).toBeLessThan(2000);
    const keys = Array.from({ length: 10_000 }, (_, i) => `k${i}`);
    const restore = await admin.post('/v1/environments', { template: 'default', restore: keys });
    expect(restore).toMatchObject({ status: 422, body: { code: 'invalid', error: expect.stringMatching(/^restore: at most \d+ keys/) } });
  });
});
