import { afterAll, beforeAll, expect, it } from 'vitest';
import { openApiValidator } from './helpers/openapi';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

describeBackends('OpenAPI document', (backend) => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it('is served at /v1/openapi.json as OpenAPI 3.1 and describes every real response', async () => {
    const doc = await admin.get('/v1/openapi.json');
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toBe('3.1.0');
    const check = openApiValidator(doc.body);
    const calls: [string, string, unknown?][] = [
      ['GET', '/v1/me'],
      ['POST', '/v1/tokens', { email: 'a@example.com', expiresIn: '30d' }],
      ['POST', '/v1/tokens', {}],
      ['GET', '/v1/tokens'],
      ['POST', '/v1/keys', { name: 'k' }],
      ['GET', '/v1/keys'],
      ['POST', '/v1/keys', { name: 42 }],
      ['DELETE', '/v1/keys/key_missing'],
    ];
    for (const [method, path, body] of calls) check(method, path, await admin.call(method, path, body));
    const token = (await admin.get('/v1/tokens')).body.tokens[0];
    check('DELETE', `/v1/tokens/${token.id}`, await admin.del(`/v1/tokens/${token.id}`));
    const key = (await admin.get('/v1/keys')).body.keys[0];
    check('DELETE', `/v1/keys/${key.id}`, await admin.del(`/v1/keys/${key.id}`));
    // A stream route's answer: its log as text, documented as such.
    const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
    const log = await admin.get(`/v1/environments/${env.id}/log`);
    expect(log.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    check('GET', `/v1/environments/${env.id}/log`, log);
    check('GET', '/v1/environments/env_missing/log', await admin.get('/v1/environments/env_missing/log'));
    expect(doc.body.paths['/v1/environments/{id}/log'].get.responses['200'].content).toEqual({
      'text/plain': { schema: { type: 'string' } },
    });
  });
});
