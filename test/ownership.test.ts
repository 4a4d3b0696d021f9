// Ownership inside an organization (docs/api.md#ownership): members read everything of their
// organization but change only what they created; admins and API keys change everything; a
// sandbox is wired only by whoever registered it, admins included.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';

describe('ownership', () => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let alice: ReturnType<typeof client>;
  let aliceLaptop: ReturnType<typeof client>;
  let bob: ReturnType<typeof client>;
  let key: ReturnType<typeof client>;
  let otherKey: ReturnType<typeof client>;
  let stranger: ReturnType<typeof client>;

  async function member(email: string, name = 'cli') {
    const res = await admin.post('/v1/tokens', { email, name });
    expect(res.status).toBe(201);
    return client(url, res.body.secret as string);
  }

  async function apiKey(name: string) {
    const res = await admin.post('/v1/keys', { name });
    expect(res.status).toBe(201);
    return client(url, res.body.secret as string);
  }

  async function lease(who: ReturnType<typeof client>, body: Record<string, unknown> = {}) {
    return who.post('/v1/environments', { template: 'default', ...body });
  }

  async function register(who: ReturnType<typeof client>, name: string) {
    const res = await who.post('/v1/sandboxes', { name });
    expect(res.status).toBe(201);
    return res.body.sandbox as { id: string; name: string };
  }

  beforeAll(async () => {
    s = await startServer();
    alice = await member('alice@example.com');
    aliceLaptop = await member('alice@example.com', 'laptop');
    bob = await member('bob@example.com');
    key = await apiKey('ci');
    otherKey = await apiKey('deploy');
    const other = await createOrganization(s.app.deps.prisma, 'elsewhere', 'eve@example.com');
    stranger = client(url, other.secret);
  });
  afterAll(() => s?.stop());

  it("lets members read a colleague's environment but not stop, keep alive or run commands in it", async () => {
    const created = await lease(alice);
    expect(created.status).toBe(202);
    const id = created.body.environment.id as string;
    await untilState(s, BOOTSTRAP, id, 'ready');

    expect((await bob.get(`/v1/environments/${id}`)).status).toBe(200);
    expect((await bob.get('/v1/environments')).body.environments.map((e: { id: string }) => e.id)).toContain(id);
    expect((await bob.get(`/v1/environments/${id}/execs`)).status).toBe(200);
    for (const res of [
      await bob.del(`/v1/environments/${id}`),
      await bob.post(`/v1/environments/${id}/keepalive`),
      await bob.post(`/v1/environments/${id}/exec`, { command: ['true'] }),
      await bob.post(`/v1/environments/${id}/execs`, { command: 'make', exitCode: 0, durationMs: 1 }),
    ]) {
      expect(res).toMatchObject({ status: 403, body: { code: 'forbidden', error: expect.stringContaining('belongs to the member') } });
    }
    const stopped = await bob.post('/graphql', { query: `mutation { stopEnvironment(id: "${id}") { state } }` });
    expect(stopped.body.errors[0].extensions.code).toBe('forbidden');
    expect((await bob.get(`/v1/environments/${id}`)).body.state).toBe('ready');

    // Another organization's member does not learn that it exists.
    expect(await stranger.del(`/v1/environments/${id}`)).toMatchObject({ status: 404, body: { code: 'not_found' } });

    // The creator with any of her tokens, an API key and an admin may.
    expect((await aliceLaptop.post(`/v1/environments/${id}/keepalive`)).status).toBe(200);
    expect((await key.post(`/v1/environments/${id}/keepalive`)).status).toBe(200);
    expect((await alice.post(`/v1/environments/${id}/execs`, { command: 'make', exitCode: 0, durationMs: 1 })).status).toBe(201);
    // Past the ownership check, a files-only environment has nothing to run commands in.
    expect((await alice.post(`/v1/environments/${id}/exec`, { command: ['true'] })).body.code).toBe('no_runtime');
    const deleted = await admin.del(`/v1/environments/${id}`);
    expect(deleted.status).toBe(200);
    expect((await bob.get(`/v1/environments/${id}`)).body.state).toMatch(/^(stopping|stopped)$/);
  });

  it("lets only the API key that leased an environment (or an admin, or another key) change it; members can't", async () => {
    const created = await lease(key);
    const id = created.body.environment.id as string;
    expect((await bob.post(`/v1/environments/${id}/keepalive`)).status).toBe(403);
    expect((await otherKey.post(`/v1/environments/${id}/keepalive`)).status).toBe(200);
    expect((await key.del(`/v1/environments/${id}`)).status).toBe(200);
  });

  it('wires a sandbox only for whoever registered it, admins included in the refusal', async () => {
    const laptop = await register(alice, 'alice-laptop');
    for (const who of [bob, admin, key]) {
      for (const sandbox of [laptop.id, laptop.name]) {
        const res = await lease(who, { sandbox });
        expect(res, sandbox).toMatchObject({ status: 403, body: { code: 'forbidden', error: expect.stringContaining('registered it') } });
      }
    }
    // Nothing was recorded for the refused leases.
    expect((await admin.get(`/v1/sandboxes/${laptop.id}`)).body.environments).toBe(0);
    // The same person with another of her tokens may.
    const mine = await lease(aliceLaptop, { sandbox: laptop.name });
    expect(mine.status).toBe(202);
    await admin.del(`/v1/environments/${mine.body.environment.id}`);

    const runner = await register(key, 'ci-runner');
    expect((await lease(otherKey, { sandbox: runner.id })).status).toBe(403);
    expect((await lease(alice, { sandbox: runner.id })).status).toBe(403);
    const keyed = await lease(key, { sandbox: runner.id });
    expect(keyed.status).toBe(202);
    await key.del(`/v1/environments/${keyed.body.environment.id}`);

    // A stranger's lease naming it: not found, as any other organization's record.
    expect((await lease(stranger, { sandbox: laptop.id })).body.code).toBe('not_found');
  });

  it("lets members read a colleague's sandbox; only she, an admin or an API key remove it", async () => {
    const laptop = await register(alice, 'alice-desk');
    expect((await bob.get(`/v1/sandboxes/${laptop.id}`)).status).toBe(200);
    expect(await bob.del(`/v1/sandboxes/${laptop.id}`)).toMatchObject({ status: 403, body: { code: 'forbidden' } });
    expect((await bob.get(`/v1/sandboxes/${laptop.id}`)).body.sandbox.removed).toBeFalsy();
    expect((await admin.del(`/v1/sandboxes/${laptop.id}`)).status).toBe(200);
    const second = await register(alice, 'alice-desk-2');
    expect((await aliceLaptop.del(`/v1/sandboxes/${second.id}`)).status).toBe(200);
  });

  it("lets members download a colleague's artifact; only its owner, an admin or an API key delete it", async () => {
    const res = await alice.call('POST', '/v1/artifacts?name=report.txt', 'hello', { 'content-type': 'text/plain' });
    expect(res.status).toBe(201);
    const id = res.body.artifact.id as string;
    expect((await bob.get(`/v1/artifacts/${id}`)).status).toBe(200);
    expect(await bob.del(`/v1/artifacts/${id}`)).toMatchObject({ status: 403, body: { code: 'forbidden' } });
    expect(await bob.del(`/v1/artifacts/${id}/links`)).toMatchObject({ status: 403 });
    expect((await bob.get(`/v1/artifacts/${id}`)).status).toBe(200);
    expect((await key.del(`/v1/artifacts/${id}`)).status).toBe(200);
  });

  it('refuses out shares on the sandbox folder itself and any path into .berth/, naming the field', async () => {
    const laptop = await register(alice, 'alice-paths');
    const cases: [Record<string, unknown>, string][] = [
      [{ shares: { out: '.' } }, 'shares.out'],
      [{ shares: { out: './' } }, 'shares.out'],
      [{ shares: { out: '.berth' } }, 'shares.out'],
      [{ shares: { out: '.berth/hooks' } }, 'shares.out'],
      [{ shares: { src: '.berth' } }, 'shares.src'],
      [{ shares: { out: '' } }, 'shares.out'],
      [{ files: { 'src/cred.json': '.berth/sandbox.json' } }, 'files.src/cred.json'],
      [{ files: { 'src/cred.json': './.berth/../.berth/sandbox.json' } }, 'files.src/cred.json'],
    ];
    for (const [body, field] of cases) {
      const res = await lease(alice, { sandbox: laptop.id, ...body });
      expect(res, JSON.stringify(body)).toMatchObject({
        status: 422,
        body: { code: 'invalid', error: expect.stringContaining(`${field}:`) },
      });
    }
    // An `in` share may be the sandbox folder itself (the agent then never sends .berth/).
    const whole = await lease(alice, { sandbox: laptop.id, shares: { src: '.' } });
    expect(whole.status).toBe(202);
    await alice.del(`/v1/environments/${whole.body.environment.id}`);
  });
});
