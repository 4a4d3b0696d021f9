// Templates through the API (docs/environments.md, "Templates through the API"): versions, the
// organization's own over the catalog's, DELETE, GraphQL, audit and webhooks, devcontainer.json
// without a build, and who may do what. Builds on a real engine: test/template-builds.test.ts.
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tar from 'tar-stream';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { writeCatalog } from './helpers/catalog';
import { openApiValidator } from './helpers/openapi';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const JSON_TEMPLATE = { pool: 'default', idle: '10m', hard: '1h', workdir: '/srv' };

/** A tar of `files` (path → text). */
export async function tarOf(files: Record<string, string>): Promise<Buffer> {
  const pack = tar.pack();
  for (const [name, text] of Object.entries(files)) pack.entry({ name }, text);
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of pack) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

describeBackends('templates through the API', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let memberToken: string;
  let member: ReturnType<typeof client>;
  let stranger: ReturnType<typeof client>;
  let check: ReturnType<typeof openApiValidator>;

  const gql = async (token: string, query: string, variables: Record<string, unknown> = {}) => {
    const res = await fetch(`${s.url}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ query, variables }),
    });
    return (await res.json()) as { data?: Record<string, any>; errors?: { message: string; extensions?: Record<string, unknown> }[] };
  };
  const putTar = (name: string, body: Buffer, token = BOOTSTRAP) =>
    fetch(`${s.url}/v1/templates/${name}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-tar' },
      body: new Uint8Array(body),
    });

  beforeAll(async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-templates-api-'));
    const templates = await writeCatalog(dir, [{ name: 'base', description: 'the catalog one' }]);
    s = await startServer(backend, { TEMPLATES_FILE: templates, WEBHOOK_ALLOW_PRIVATE: '1' });
    memberToken = (await admin.post('/v1/tokens', { email: 'member@example.com' })).body.secret;
    member = client(url, memberToken);
    stranger = client(url, (await createOrganization(s.app.deps.prisma, 'elsewhere', 'eve@example.com')).secret);
    check = openApiValidator((await admin.get('/v1/openapi.json')).body);
  });
  afterAll(() => s?.stop());

  it('makes a template (201, version 1), changes it (200, version 2), shows it, and leases record the version', async () => {
    const made = await admin.put('/v1/templates/own', JSON_TEMPLATE);
    check('PUT', '/v1/templates/own', made);
    expect(made.status).toBe(201);
    expect(made.body.template).toMatchObject({ name: 'own', version: 1, source: 'api', status: 'ready', warnings: [], workdir: '/srv' });
    expect(made.body.template.error).toBeUndefined();
    // What a GET shows, changed and put back: the version and status it shows are not the template's to set.
    const changed = await admin.put('/v1/templates/own', { ...made.body.template, workdir: '/app', version: 7, status: 'failed' });
    expect(changed.status).toBe(200);
    expect(changed.body.template).toMatchObject({ version: 2, workdir: '/app', status: 'ready' });
    const got = await member.get('/v1/templates/own');
    check('GET', '/v1/templates/own', got);
    expect(got.body.template).toMatchObject({ name: 'own', version: 2, source: 'api', status: 'ready' });
    expect((await member.get('/v1/templates/base')).body.template).toMatchObject({ source: 'catalog', version: 1 });
    expect((await member.get('/v1/templates/nope')).body).toEqual({ error: expect.stringContaining('not found'), code: 'no_template' });

    const lease = await member.post('/v1/environments', { template: 'own' });
    expect(lease.status).toBe(202);
    const seen = await gql(BOOTSTRAP, 'query($id: String!) { environment(id: $id) { templateVersion } }', {
      id: lease.body.environment.id,
    });
    expect(seen.data?.environment).toEqual({ templateVersion: 2 });
    await member.del(`/v1/environments/${lease.body.environment.id}`);
  });

  it("gives an organization its own version of a catalog template; DELETE brings the catalog's back, and refuses with 409 when only the catalog's is left", async () => {
    expect((await admin.put('/v1/templates/base', { ...JSON_TEMPLATE, description: 'ours' })).status).toBe(201);
    expect((await admin.get('/v1/templates/base')).body.template).toMatchObject({ source: 'api', description: 'ours', version: 1 });
    // Another organization keeps the catalog's.
    expect((await stranger.get('/v1/templates/base')).body.template).toMatchObject({ source: 'catalog', description: 'the catalog one' });
    const removed = await admin.del('/v1/templates/base');
    check('DELETE', '/v1/templates/base', removed);
    expect(removed.status).toBe(204);
    expect((await admin.get('/v1/templates/base')).body.template).toMatchObject({ source: 'catalog', description: 'the catalog one' });
    expect(await admin.del('/v1/templates/base')).toMatchObject({ status: 409, body: { code: 'conflict' } });
    expect(await admin.del('/v1/templates/never')).toMatchObject({ status: 404, body: { code: 'no_template' } });

    // A template of its own only: after the DELETE, new leases get 404; live ones go on.
    await admin.put('/v1/templates/short-lived', JSON_TEMPLATE);
    const live = await admin.post('/v1/environments', { template: 'short-lived' });
    expect((await admin.del('/v1/templates/short-lived')).status).toBe(204);
    expect(await admin.post('/v1/environments', { template: 'short-lived' })).toMatchObject({ status: 404, body: { code: 'no_template' } });
    expect((await admin.get(`/v1/environments/${live.body.environment.id}`)).body.state).not.toBe('failed');
    await admin.del(`/v1/environments/${live.body.environment.id}`);
  });

  it('lets only admins change templates, and no one outside the organization see its own', async () => {
    expect((await member.put('/v1/templates/m', JSON_TEMPLATE)).status).toBe(403);
    expect((await putTar('m', await tarOf({ 'devcontainer.json': '{"image": "busybox"}' }), memberToken)).status).toBe(403);
    await admin.put('/v1/templates/secret', JSON_TEMPLATE);
    expect((await member.del('/v1/templates/secret')).status).toBe(403);
    expect((await stranger.get('/v1/templates/secret')).status).toBe(404);
    expect((await stranger.get('/v1/templates/secret/log')).status).toBe(404);
    // (another organization's admin: it has no template of that name)
    expect((await stranger.del('/v1/templates/secret')).status).toBe(404);
    expect((await admin.get('/v1/templates/secret')).status).toBe(200);
    const anonymous = client(url);
    expect((await anonymous.get('/v1/templates/secret')).status).toBe(401);
    expect((await anonymous.put('/v1/templates/secret', JSON_TEMPLATE)).status).toBe(401);
    expect((await anonymous.del('/v1/templates/secret')).status).toBe(401);
    // Nothing refused was stored.
    expect((await admin.get('/v1/templates/m')).status).toBe(404);
  });

  it('refuses bad input with 422 naming the field, storing nothing', async () => {
    const raw = await fetch(`${s.url}/v1/templates/bad`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
      body: '{"pool": ',
    });
    expect(raw.status).toBe(422);
    expect(await raw.json()).toMatchObject({ code: 'invalid', error: expect.stringContaining('body') });
    const wrong = await admin.put('/v1/templates/bad', { ...JSON_TEMPLATE, warm: 'many' });
    expect(wrong).toMatchObject({ status: 422, body: { code: 'invalid', error: expect.stringContaining('warm') } });
    const typed = await putTar('bad', await tarOf({ '.devcontainer/devcontainer.json': '{"image": 3}' }));
    expect(typed.status).toBe(422);
    expect(((await typed.json()) as { error: string }).error).toContain('devcontainer.image');
    const out = await putTar('bad', await tarOf({ 'devcontainer.json': '{"image": "busybox"}', '../escape': 'x' }));
    expect(out.status).toBe(422);
    const features = await putTar('bad', await tarOf({ 'devcontainer.json': '{"image": "busybox", "features": {"ghcr.io/x/y:1": {}}}' }));
    expect(features.status).toBe(422);
    expect(((await features.json()) as { error: string }).error).toContain('features');
    const notTar = await putTar('bad', Buffer.from('not a tar at all, not at all'));
    expect(notTar.status).toBe(422);
    const other = await fetch(`${s.url}/v1/templates/bad`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'text/plain' },
      body: 'image: busybox',
    });
    expect(other.status).toBe(400);
    expect((await admin.get('/v1/templates/bad')).status).toBe(404);
  });

  it('takes a devcontainer.json with an image (JSONC) by tar and by GraphQL, listing what it does not honour', async () => {
    const devcontainer = `{
      // comments and trailing commas are fine
      "image": "localhost/berth-test/busybox:1",
      "remoteUser": "builder",
      "containerEnv": { "A": "1", },
      "forwardPorts": [3000],
      "portsAttributes": { "3000": { "label": "Web App" } },
      "postCreateCommand": "echo made",
      "runArgs": ["--privileged"],
      "customizations": { "vscode": { "extensions": ["x"] }, "berth": { "warm": 0, "idle": "15m" } },
    }`;
    const res = await putTar('dc', await tarOf({ '.devcontainer/devcontainer.json': devcontainer }));
    expect(res.status).toBe(201);
    const { template } = (await res.json()) as { template: Record<string, any> };
    expect(template).toMatchObject({
      name: 'dc',
      source: 'api',
      status: 'ready',
      user: 'builder',
      image: 'localhost/berth-test/busybox:1',
      env: { A: '1' },
      idle: '15m0s',
      lifecycle: [{ phase: 'postCreateCommand', argv: ['/bin/sh', '-c', 'echo made'] }],
    });
    expect(template.services).toEqual([{ service: expect.stringMatching(/web/), target: '127.0.0.1:3000' }]);
    expect(template.warnings.join('\n')).toMatch(/runArgs/);
    expect(template.warnings.join('\n')).toMatch(/vscode/);

    const put = await gql(
      BOOTSTRAP,
      'mutation($d: String!) { putTemplate(name: "dc", devcontainer: $d) { name version source status warnings user } }',
      { d: '{"image": "localhost/berth-test/busybox:1", "containerUser": "builder"}' },
    );
    expect(put.errors).toBeUndefined();
    expect(put.data?.putTemplate).toMatchObject({ name: 'dc', version: 2, source: 'api', status: 'ready', user: 'builder' });
    const bad = await gql(BOOTSTRAP, 'mutation($d: String!) { putTemplate(name: "dc", devcontainer: $d) { name } }', { d: '{"image": 3}' });
    expect(bad.errors?.[0]?.message).toContain('devcontainer.image');
    const build = await gql(BOOTSTRAP, 'mutation($d: String!) { putTemplate(name: "dc", devcontainer: $d) { name } }', {
      d: '{"build": {"dockerfile": "Dockerfile"}}',
    });
    expect(build.errors?.[0]?.message).toContain('tar');
    const one = await gql(BOOTSTRAP, '{ template(name: "dc") { version log } }');
    expect(one.data?.template).toEqual({ version: 2, log: '' });
    const memberPut = await gql(memberToken, 'mutation { deleteTemplate(name: "dc") }');
    expect(memberPut.errors).toBeDefined();
    const deleted = await gql(BOOTSTRAP, 'mutation { deleteTemplate(name: "dc") }');
    expect(deleted.data).toEqual({ deleteTemplate: true });
  });

  it('audits every change and sends template.changed to webhooks', async () => {
    const hook = await admin.post('/v1/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['template.changed'] });
    expect(hook.status).toBe(201);
    await admin.put('/v1/templates/hooked', JSON_TEMPLATE);
    await admin.put('/v1/templates/hooked', { ...JSON_TEMPLATE, idle: '5m' });
    await admin.del('/v1/templates/hooked');
    const deliveries = (await admin.get(`/v1/webhooks/${hook.body.webhook.id}/deliveries`)).body.deliveries as { event: string }[];
    expect(deliveries.filter((d) => d.event === 'template.changed')).toHaveLength(3);
    const audit = (await admin.get('/v1/audit?action=template.set')).body.events as { target: { id: string } }[];
    expect(audit.filter((e) => e.target.id === 'hooked')).toHaveLength(2);
    const deletes = (await admin.get('/v1/audit?action=template.delete')).body.events as { target: { id: string } }[];
    expect(deletes.filter((e) => e.target.id === 'hooked')).toHaveLength(1);
    await admin.del(`/v1/webhooks/${hook.body.webhook.id}`);
  });

  it('keeps templates across a restart', async () => {
    await admin.put('/v1/templates/kept', JSON_TEMPLATE);
    await admin.put('/v1/templates/kept', JSON_TEMPLATE);
    await s.restart();
    expect((await admin.get('/v1/templates/kept')).body.template).toMatchObject({ name: 'kept', version: 2, source: 'api' });
  });
});
