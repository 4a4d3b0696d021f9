// The relay endpoint's checks (docs/agents.md, "The relay"): every refusal is an HTTP answer
// `{error, code}` before the upgrade.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { openRelay, type ServerError } from '../src/agent/sandbox-agent';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

describeBackends('relay checks', (backend) => {
  let s: TestServer;
  let credential: string;
  let otherCredential: string;
  let envId: string;
  const refusal = (token: string, params: Record<string, string>) =>
    openRelay(s.url, token, params).then(
      (ws) => {
        ws.close();
        return { status: 101, code: 'upgraded' };
      },
      (error: ServerError) => ({ status: error.status, code: error.code }),
    );

  beforeAll(async () => {
    s = await startServer(backend);
    const admin = client(() => s.url, BOOTSTRAP);
    const anonymous = client(() => s.url);
    const mine = await admin.post('/v1/sandboxes', { name: 'mine' });
    credential = (await anonymous.post('/v1/sandboxes/join', { key: mine.body.key })).body.credential;
    const other = await admin.post('/v1/sandboxes', { name: 'other' });
    otherCredential = (await anonymous.post('/v1/sandboxes/join', { key: other.body.key })).body.credential;
    const created = await admin.post('/v1/environments', { template: 'default', sandbox: 'mine' });
    envId = created.body.environment.id;
  });
  afterAll(() => s?.stop());

  it('refuses what a sandbox may not open, with the reason, before the upgrade', async () => {
    // Pending: no node yet.
    expect(await refusal(credential, { environment: envId, kind: 'import', service: 'postgres' })).toEqual({
      status: 409,
      code: 'conflict',
    });
    await untilState(s, BOOTSTRAP, envId, 'ready');
    expect(await refusal('bsc_nonsense', { environment: envId, kind: 'import', service: 'postgres' })).toEqual({
      status: 401,
      code: 'unauthorized',
    });
    expect(await refusal(BOOTSTRAP, { environment: envId, kind: 'import', service: 'postgres' })).toEqual({
      status: 403,
      code: 'forbidden',
    });
    expect(await refusal(otherCredential, { environment: envId, kind: 'import', service: 'postgres' })).toEqual({
      status: 404,
      code: 'not_found',
    });
    expect(await refusal(credential, { kind: 'import', service: 'postgres' })).toEqual({ status: 422, code: 'invalid' });
    expect(await refusal(credential, { environment: envId, kind: 'tunnel' })).toEqual({ status: 422, code: 'invalid' });
    expect(await refusal(credential, { environment: envId, kind: 'import', service: 'redis' })).toEqual({ status: 404, code: 'not_found' });
    expect(await refusal(credential, { environment: envId, kind: 'share', share: 'nope' })).toEqual({ status: 404, code: 'not_found' });
    expect(await refusal(credential, { environment: envId, kind: 'share', share: 'src', final: '1' })).toEqual({
      status: 422,
      code: 'invalid',
    });
    expect(await refusal(credential, { environment: envId, kind: 'share', share: 'out' })).toEqual({ status: 101, code: 'upgraded' });
  });
});
