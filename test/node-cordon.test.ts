// Cordon (docs/agents.md, "Cordon"): a cordoned node takes no new leases and keeps its running
// ones; a lease that only it could take waits and says why, and is placed once it is uncordoned.
// Admins only; another organization's node is unknown; the built-in node serves every
// organization and is not one admin's to cordon. Berth in-process, `berth node` as a real process
// (files only: no engine needed).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';
import { poll } from './helpers/wait';

const CATALOG = {
  pools: [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
  templates: [{ name: 'remote', pool: 'remote', startMs: 0, idle: '30m', hard: '1h', shares: [], services: [] }],
};

describeBackends('node cordon', (backend) => {
  let s: TestServer;
  let dir: string;
  let agent: Proc | undefined;
  let nodeId: string;
  const admin = client(() => s.url, BOOTSTRAP);
  const listed = async () => (await admin.get('/v1/nodes')).body.nodes.find((n: { id: string }) => n.id === nodeId);
  const lease = async () => {
    const created = await admin.post('/v1/environments', { template: 'remote' });
    expect(created.status).toBe(202);
    return created.body.environment.id as string;
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-cordon-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify(CATALOG));
    s = await startServer(backend, { TEMPLATES_FILE: templates, DOCKER_HOST: 'none', NODE_HEARTBEAT_MS: '250' });
    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'rack1' });
    nodeId = created.body.node.id;
    agent = spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--slots', '3', '--engine', 'none'], {
      BERTH_NODE_TOKEN: created.body.secret,
    });
    await agent.waitFor(/online as rack1/);
  }, 60_000);
  afterAll(async () => {
    await agent?.kill('SIGKILL');
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  let running: string;

  it('no one but an admin of its organization cordons a node, and nothing changes when they try', async () => {
    running = await lease();
    await reaches(s.url, BOOTSTRAP, running, 'ready');
    const member = client(() => s.url, (await admin.post('/v1/tokens', { email: 'dev@example.com', name: 'cli' })).body.secret);
    const other = await createOrganization(s.app.deps.prisma, `cordonother${backend}`, 'boss@other.example');
    const stranger = client(() => s.url, other.secret);
    const anonymous = client(() => s.url);
    for (const verb of ['cordon', 'uncordon']) {
      expect(await member.post(`/v1/nodes/${nodeId}/${verb}`, {})).toMatchObject({ status: 403, body: { code: 'forbidden' } });
      // Another organization's node is as unknown as one that does not exist.
      const theirs = await stranger.post(`/v1/nodes/${nodeId}/${verb}`, {});
      const unknown = await stranger.post(`/v1/nodes/nod_nothing/${verb}`, {});
      expect(theirs).toMatchObject({ status: 404, body: { code: 'not_found' } });
      expect(unknown.body.code).toBe('not_found');
      expect((await anonymous.post(`/v1/nodes/${nodeId}/${verb}`, {})).status).toBe(401);
    }
    const builtin = (await admin.get('/v1/nodes')).body.nodes.find((n: { builtin: boolean }) => n.builtin);
    const refused = await admin.post(`/v1/nodes/${builtin.id}/cordon`, {});
    expect(refused).toMatchObject({ status: 409, body: { code: 'conflict' } });
    expect(refused.body.error).toMatch(/serves every organization/);
    expect((await listed()).cordoned).toBeUndefined();
    const denied = await admin.get('/v1/audit?action=node.cordon');
    expect(denied.body.events.map((e: { outcome?: string }) => e.outcome)).toContain('denied');
  });

  let cordonedAt: string;

  it('a cordoned node keeps its running environment; a new lease waits, saying why', async () => {
    const cordoned = await admin.post(`/v1/nodes/${nodeId}/cordon`, {});
    expect(cordoned.status).toBe(200);
    expect(cordoned.body.node).toMatchObject({ id: nodeId, state: 'online', cordoned: { by: expect.any(String) } });
    cordonedAt = cordoned.body.node.cordoned.at;
    expect(new Date(cordonedAt).toISOString()).toBe(cordonedAt);
    // Asking again changes nothing: the first cordon's time stays.
    expect((await admin.post(`/v1/nodes/${nodeId}/cordon`, {})).body.node.cordoned.at).toBe(cordonedAt);

    const waiting = await lease();
    const said = await poll('the lease to say why it waits', async () => {
      const env = (await admin.get(`/v1/environments/${waiting}`)).body;
      expect(env.state).toBe('pending');
      return typeof env.waiting === 'string' && /cordoned/.test(env.waiting) ? env.waiting : undefined;
    });
    expect(said).toBe('no online node serves pool remote: node rack1 is cordoned (no new leases until an admin uncordons it)');
    expect((await admin.get(`/v1/environments/${running}`)).body.state).toBe('ready');
    expect((await listed()).environments).toEqual([running]);

    const uncordoned = await admin.post(`/v1/nodes/${nodeId}/uncordon`, {});
    expect(uncordoned.status).toBe(200);
    expect(uncordoned.body.node.cordoned).toBeUndefined();
    await reaches(s.url, BOOTSTRAP, waiting, 'ready');
    expect((await listed()).environments).toEqual([running, waiting]);

    const audit = await admin.get(`/v1/audit?target=${nodeId}`);
    const actions = audit.body.events.filter((e: { outcome?: string }) => e.outcome !== 'denied').map((e: { action: string }) => e.action);
    expect(actions).toEqual(expect.arrayContaining(['node.cordon', 'node.uncordon']));
  });

  it('GraphQL cordons and uncordons with the same rules', async () => {
    // Not named gql: codegen would take these strings, which carry the node's id, for typed documents.
    const ask = (query: string) => admin.post('/graphql', { query });
    const on = await ask(`mutation { cordonNode(id: "${nodeId}") { id cordoned { at by } } }`);
    expect(on.body.data.cordonNode).toMatchObject({ id: nodeId, cordoned: { at: expect.any(String) } });
    const seen = await ask('{ nodes { id cordoned { at } } }');
    expect(seen.body.data.nodes.find((n: { id: string }) => n.id === nodeId).cordoned).not.toBeNull();
    const off = await ask(`mutation { uncordonNode(id: "${nodeId}") { id cordoned { at } } }`);
    expect(off.body.data.uncordonNode).toEqual({ id: nodeId, cordoned: null });
    const member = client(() => s.url, (await admin.post('/v1/tokens', { email: 'dev2@example.com', name: 'cli' })).body.secret);
    const denied = await member.post('/graphql', { query: `mutation { cordonNode(id: "${nodeId}") { id } } ` });
    expect(denied.body.errors[0].extensions.code).toBe('forbidden');
  });
});
