// The audit log (docs/operations.md#audit-log): every change and command of the organization,
// written in the change's own transaction, read by admins through GET /v1/audit and auditEvents.
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { loadConfig } from '../src/app/config';
import { createOrganization } from '../src/modules/organizations/service';
import { openApiValidator } from './helpers/openapi';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

const FROM = { 'x-forwarded-for': '203.0.113.7' };
const DAY_MS = 24 * 60 * 60 * 1000;

interface Event {
  id: string;
  time: string;
  action: string;
  actor: { kind: string; id: string; name: string };
  target: { kind: string; id: string };
  address: string;
  outcome: string;
  detail?: Record<string, unknown>;
}

describeBackends('audit log', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let adminId: string;
  let alice: ReturnType<typeof client>;
  let aliceId: string;
  let aliceToken: string;
  let bob: ReturnType<typeof client>;
  let bobId: string;
  let stranger: ReturnType<typeof client>;
  let check: ReturnType<typeof openApiValidator>;

  /** The events GET /v1/audit answers for `query` (one page of up to 500). */
  async function audit(query = ''): Promise<Event[]> {
    const path = `/v1/audit?limit=500${query ? `&${query}` : ''}`;
    const res = await admin.get(path);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    check('GET', path, res);
    return res.body.events as Event[];
  }

  /** The one event of `action` on `target`. */
  async function eventOf(action: string, target: string): Promise<Event> {
    const events = await audit(`action=${action}&target=${encodeURIComponent(target)}`);
    expect(events, `${action} on ${target}`).toHaveLength(1);
    return events[0]!;
  }

  beforeAll(async () => {
    s = await startServer(backend, { TRUST_PROXY: '1', AUDIT_RETENTION: '30d' });
    check = openApiValidator((await admin.get('/v1/openapi.json')).body);
    adminId = (await s.app.deps.prisma.person.findFirstOrThrow({ where: { admin: true } })).id;
    const token = await admin.post('/v1/tokens', { email: 'alice@example.com', name: 'laptop' }, FROM);
    expect(token.status).toBe(201);
    aliceToken = token.body.token.id;
    alice = client(url, token.body.secret);
    aliceId = (await s.app.deps.prisma.person.findFirstOrThrow({ where: { email: 'alice@example.com' } })).id;
    bob = client(url, (await admin.post('/v1/tokens', { email: 'bob@example.com' })).body.secret);
    bobId = (await s.app.deps.prisma.person.findFirstOrThrow({ where: { email: 'bob@example.com' } })).id;
    stranger = client(url, (await createOrganization(s.app.deps.prisma, 'elsewhere', 'eve@example.com')).secret);
  });
  afterAll(() => s?.stop());

  it('records who, what, on what, from where, when and how it went', async () => {
    const before = Date.now();
    const created = await eventOf('token.create', aliceToken);
    expect(created).toMatchObject({
      action: 'token.create',
      actor: { kind: 'person', id: adminId },
      target: { kind: 'token', id: aliceToken },
      address: '203.0.113.7',
      outcome: 'success',
      detail: { email: 'alice@example.com', name: 'laptop', admin: false },
    });
    expect(created.id).toMatch(/^aud_/);
    expect(Date.parse(created.time)).toBeLessThanOrEqual(before);
    // Without a proxy header the address is the TCP peer, as the 429 lock counts it.
    const key = await admin.post('/v1/keys', { name: 'ci' });
    expect(await eventOf('key.create', key.body.key.id)).toMatchObject({
      actor: { kind: 'person', id: adminId },
      target: { kind: 'key', id: key.body.key.id },
      address: '127.0.0.1',
      detail: { name: 'ci', admin: false },
    });
  });

  it('records each change of environments and each command, by whoever made it', async () => {
    const created = await alice.post('/v1/environments', { template: 'default' }, FROM);
    expect(created.status).toBe(202);
    const env = created.body.environment;
    expect(await eventOf('environment.create', env.id)).toMatchObject({
      actor: { kind: 'person', id: aliceId, name: 'alice@example.com' },
      target: { kind: 'environment', id: env.id },
      address: '203.0.113.7',
      outcome: 'success',
      detail: { name: env.name, template: 'default', project: 'default', state: 'pending' },
    });
    await untilState(s, BOOTSTRAP, env.id, 'ready');
    expect((await alice.post(`/v1/environments/${env.id}/keepalive`)).status).toBe(200);
    expect((await eventOf('environment.keepalive', env.id)).actor.id).toBe(aliceId);
    const exec = await alice.post(`/v1/environments/${env.id}/execs`, { command: 'make test', exitCode: 2, durationMs: 5 });
    expect(exec.status).toBe(201);
    expect(await eventOf('exec.run', env.id)).toMatchObject({
      actor: { id: aliceId },
      outcome: 'success',
      detail: { exec: expect.any(Number), command: 'make test', exitCode: 2 },
    });
    expect((await alice.del(`/v1/environments/${env.id}`)).status).toBe(200);
    expect(await eventOf('environment.delete', env.id)).toMatchObject({ actor: { id: aliceId }, outcome: 'success' });
    // Asking again changes nothing and records nothing.
    expect((await alice.del(`/v1/environments/${env.id}`)).status).toBe(200);
    expect(await audit(`action=environment.delete&target=${env.id}`)).toHaveLength(1);
  });

  it('bounds the command it keeps', async () => {
    const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
    await untilState(s, BOOTSTRAP, env.id, 'ready');
    const command = `echo ${'x'.repeat(5000)}`;
    expect((await admin.post(`/v1/environments/${env.id}/execs`, { command, exitCode: 0, durationMs: 1 })).status).toBe(201);
    const kept = (await eventOf('exec.run', env.id)).detail?.command as string;
    expect(kept.length).toBeLessThanOrEqual(1001);
    expect(command.startsWith(kept.slice(0, -1))).toBe(true);
  });

  it('records admin changes, sandboxes, nodes and revocations', async () => {
    expect((await admin.put('/v1/quotas/default', { maxLeases: 7 })).status).toBe(200);
    expect(await eventOf('quota.set', 'default')).toMatchObject({ target: { kind: 'quota', id: 'default' }, detail: { maxLeases: 7 } });
    expect((await admin.put('/v1/templates/audited', { pool: 'default', idle: '10m', hard: '1h' })).status).toBe(201);
    expect(await eventOf('template.set', 'audited')).toMatchObject({ target: { kind: 'template' }, detail: { pool: 'default' } });

    const reg = await alice.post('/v1/sandboxes', { name: 'audit-box' });
    expect(reg.status).toBe(201);
    const sandboxId = reg.body.sandbox.id;
    expect(await eventOf('sandbox.register', sandboxId)).toMatchObject({ actor: { id: aliceId }, detail: { name: 'audit-box' } });
    const joined = await client(url).post('/v1/sandboxes/join', { key: reg.body.key }, { 'x-forwarded-for': '198.51.100.4' });
    expect(joined.status).toBe(201);
    expect(await eventOf('sandbox.join', sandboxId)).toMatchObject({
      actor: { kind: 'sandbox', id: sandboxId, name: 'audit-box' },
      address: '198.51.100.4',
    });
    expect((await alice.del(`/v1/sandboxes/${sandboxId}`)).status).toBe(200);
    expect((await eventOf('sandbox.remove', sandboxId)).actor.id).toBe(aliceId);

    const node = await admin.post('/v1/nodes', { pool: 'default', name: 'builder-1' });
    expect(node.status).toBe(201);
    expect(await eventOf('node.create', node.body.node.id)).toMatchObject({ detail: { name: 'builder-1', pool: 'default' } });
    expect((await admin.del(`/v1/nodes/${node.body.node.id}`)).status).toBe(200);
    expect((await eventOf('node.remove', node.body.node.id)).target.kind).toBe('node');

    // A node agent saying hello on its control channel is recorded as the node, from its address.
    const agentNode = await admin.post('/v1/nodes', { pool: 'default', name: 'agent-1' });
    const ws = new WebSocket(`${s.url.replace(/^http/, 'ws')}/v1/nodes/channel`, {
      headers: { authorization: `Bearer ${agentNode.body.secret}`, ...FROM },
    });
    try {
      const welcome = new Promise((resolve) => ws.once('message', resolve));
      await once(ws, 'open');
      ws.send(JSON.stringify({ type: 'hello', slots: 2, environments: [] }));
      await welcome;
      ws.send(JSON.stringify({ type: 'leaving' }));
      const nodeId = agentNode.body.node.id;
      await expect
        .poll(() => audit(`target=${nodeId}`).then((e) => e.map((x) => x.action)))
        .toEqual(['node.leave', 'node.connect', 'node.create']);
      expect(await eventOf('node.connect', nodeId)).toMatchObject({
        actor: { kind: 'node', id: nodeId, name: 'agent-1' },
        address: '203.0.113.7',
        detail: { slots: 2, leaving: false },
      });
    } finally {
      ws.close();
    }

    const own = await alice.post('/v1/tokens', { name: 'second' });
    expect((await alice.del(`/v1/tokens/${own.body.token.id}`)).status).toBe(200);
    expect(await eventOf('token.revoke', own.body.token.id)).toMatchObject({ actor: { id: aliceId }, outcome: 'success' });
    const key = await admin.post('/v1/keys', { name: 'deploy', admin: true });
    const keyClient = client(url, key.body.secret);
    // An API key is recorded as itself.
    expect((await keyClient.put('/v1/quotas/*', { maxLeases: 50 })).status).toBe(200);
    expect((await eventOf('quota.set', '*')).actor).toEqual({ kind: 'apiKey', id: key.body.key.id, name: 'deploy' });
    expect((await admin.del(`/v1/keys/${key.body.key.id}`)).status).toBe(200);
    expect((await eventOf('key.revoke', key.body.key.id)).actor.id).toBe(adminId);
  });

  it('records artifacts, their links and shredding', async () => {
    const upload = (who: string, name: string) =>
      fetch(`${s.url}/v1/artifacts?name=${name}&project=audited`, {
        method: 'POST',
        headers: { authorization: `Bearer ${who}`, 'content-type': 'application/octet-stream', ...FROM },
        body: 'hello audit',
      }).then(async (res) => ({ status: res.status, body: await res.json() }));
    const stored = await upload(BOOTSTRAP, 'report.txt');
    expect(stored.status).toBe(201);
    const id = stored.body.artifact.id;
    expect(await eventOf('artifact.create', id)).toMatchObject({
      actor: { id: adminId },
      address: '203.0.113.7',
      detail: { name: 'report.txt', project: 'audited', size: 11 },
    });
    expect((await admin.post(`/v1/artifacts/${id}/links`, { lifetime: '10m' })).status).toBe(201);
    expect((await eventOf('artifact.link', id)).outcome).toBe('success');
    expect((await bob.del(`/v1/artifacts/${id}/links`)).status).toBe(403);
    expect((await admin.del(`/v1/artifacts/${id}/links`)).status).toBe(200);
    expect((await audit(`action=artifact.links.revoke&target=${id}`)).map((e) => e.outcome)).toEqual(['success', 'denied']);
    expect((await bob.del(`/v1/artifacts/${id}`)).status).toBe(403);
    expect((await admin.del(`/v1/artifacts/${id}`)).status).toBe(200);
    expect((await audit(`action=artifact.delete&target=${id}`)).map((e) => [e.actor.id, e.outcome])).toEqual([
      [adminId, 'success'],
      [bobId, 'denied'],
    ]);

    expect((await upload(BOOTSTRAP, 'other.txt')).status).toBe(201);
    expect((await bob.del('/v1/project-keys/audited')).status).toBe(403);
    expect((await admin.del('/v1/project-keys/audited')).status).toBe(200);
    expect((await audit('action=project.shred&target=audited')).map((e) => [e.actor.id, e.outcome])).toEqual([
      [adminId, 'success'],
      [bobId, 'denied'],
    ]);
  });

  it('records refusals that matter as denied, and a refused change as nothing else', async () => {
    // Another member's token is answered 404, like a missing one, but the attempt is on record.
    expect((await bob.del(`/v1/tokens/${aliceToken}`)).status).toBe(404);
    expect(await eventOf('token.revoke', aliceToken)).toMatchObject({ actor: { id: bobId }, outcome: 'denied' });
    const key = await admin.post('/v1/keys', { name: 'victim' });
    expect((await bob.del(`/v1/keys/${key.body.key.id}`)).status).toBe(403);
    expect(await eventOf('key.revoke', key.body.key.id)).toMatchObject({ actor: { id: bobId }, outcome: 'denied' });
    // Reaching for more access: a token for someone else, admin rights, keys and nodes.
    expect((await bob.post('/v1/tokens', { email: 'alice@example.com' })).status).toBe(403);
    expect(await eventOf('token.create', 'alice@example.com')).toMatchObject({
      actor: { id: bobId },
      target: { kind: 'person', id: 'alice@example.com' },
      outcome: 'denied',
    });
    expect((await bob.post('/v1/tokens', { admin: true })).status).toBe(403);
    expect(await eventOf('token.create', 'bob@example.com')).toMatchObject({ actor: { id: bobId }, outcome: 'denied' });
    expect((await bob.post('/v1/keys', { name: 'mine' })).status).toBe(403);
    expect(await eventOf('key.create', 'mine')).toMatchObject({ actor: { id: bobId }, outcome: 'denied' });
    expect((await bob.post('/v1/nodes', { pool: 'default', name: 'rogue' })).status).toBe(403);
    expect(await eventOf('node.create', 'rogue')).toMatchObject({ actor: { id: bobId }, outcome: 'denied' });
    expect((await bob.put('/v1/quotas/large', { maxLeases: 1 })).status).toBe(403);
    expect(await eventOf('quota.set', 'large')).toMatchObject({ outcome: 'denied' });

    const env = (await alice.post('/v1/environments', { template: 'default' })).body.environment;
    await untilState(s, BOOTSTRAP, env.id, 'ready');
    expect((await bob.post(`/v1/environments/${env.id}/execs`, { command: 'rm -rf /', exitCode: 0, durationMs: 1 })).status).toBe(403);
    expect((await bob.del(`/v1/environments/${env.id}`)).status).toBe(403);
    const denied = await audit(`target=${env.id}&actor=${bobId}`);
    expect(denied.map((e) => [e.action, e.outcome])).toEqual([
      ['environment.delete', 'denied'],
      ['exec.run', 'denied'],
    ]);
    // A change refused for other reasons records nothing.
    expect((await admin.post('/v1/keys', { name: 'victim' })).status).toBe(409);
    const victims = (await audit(`action=key.create&actor=${adminId}`)).filter((e) => e.detail?.name === 'victim');
    expect(victims).toHaveLength(1);
  });

  it('writes the event in the transaction of the change: when it cannot be written, nothing changes', async () => {
    const prisma = s.app.deps.prisma;
    await prisma.$executeRawUnsafe(`
      CREATE FUNCTION audit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'audit refused'; END $$`);
    await prisma.$executeRawUnsafe(
      `CREATE TRIGGER audit_refuse BEFORE INSERT ON "AuditEvent" FOR EACH ROW WHEN (NEW.action = 'sandbox.register') EXECUTE FUNCTION audit_refuse()`,
    );
    try {
      expect((await admin.post('/v1/sandboxes', { name: 'never-there' })).status).toBe(500);
      expect(await prisma.sandbox.count({ where: { name: 'never-there' } })).toBe(0);
    } finally {
      await prisma.$executeRawUnsafe('DROP TRIGGER audit_refuse ON "AuditEvent"');
      await prisma.$executeRawUnsafe('DROP FUNCTION audit_refuse()');
    }
  });

  it('pages newest first and filters by action, actor, target and time', async () => {
    const all = await audit();
    expect(all.length).toBeGreaterThan(10);
    const times = all.map((e) => Date.parse(e.time));
    expect([...times].sort((a, b) => b - a)).toEqual(times);

    const paged: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await admin.get(`/v1/audit?limit=4${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.status).toBe(200);
      expect(res.body.events.length).toBeLessThanOrEqual(4);
      paged.push(...res.body.events.map((e: Event) => e.id));
      cursor = res.body.next;
    } while (cursor);
    expect(paged).toEqual(all.map((e) => e.id));

    for (const e of await audit('action=token.create')) expect(e.action).toBe('token.create');
    const byEmail = await audit('actor=Alice@Example.com');
    expect(byEmail.length).toBeGreaterThan(0);
    expect(byEmail).toEqual(await audit(`actor=${aliceId}`));
    for (const e of byEmail) expect(e.actor.id).toBe(aliceId);

    const middle = all[Math.floor(all.length / 2)]!;
    const since = await audit(`since=${middle.time}`);
    for (const e of since) expect(Date.parse(e.time)).toBeGreaterThanOrEqual(Date.parse(middle.time));
    const until = await audit(`until=${middle.time}`);
    for (const e of until) expect(Date.parse(e.time)).toBeLessThan(Date.parse(middle.time));
    expect(since.length + until.length).toBe(all.length);
    expect(await audit(`since=${encodeURIComponent('2000-01-01T00:00:00+02:00')}&until=2000-01-02T00:00:00Z`)).toEqual([]);
  });

  it('refuses bad filters with 422 naming the parameter', async () => {
    for (const [param, value] of [
      ['action', 'environment.explode'],
      ['since', 'yesterday'],
      ['since', '2026-13-01T00:00:00Z'],
      ['until', '2026-11-22'],
      ['target', 'x'.repeat(201)],
      ['actor', 'y'.repeat(201)],
      ['cursor', 'bad'],
      ['limit', '0'],
    ]) {
      const res = await admin.get(`/v1/audit?${param}=${value}`);
      expect(res.status, `${param}=${value}`).toBe(422);
      check('GET', '/v1/audit', res);
      expect(res.body).toMatchObject({ code: 'invalid', error: expect.stringMatching(new RegExp(`^${param}: `)) });
    }
    expect((await admin.get('/v1/audit?since=2026-11-22T00:00:00Z&until=2026-11-21T00:00:00Z')).status).toBe(422);
    expect((await admin.get('/v1/audit?who=me')).status).toBe(422);
  });

  it('shows the log to admins of the organization only', async () => {
    const refused = await alice.get('/v1/audit');
    expect(refused).toMatchObject({ status: 403, body: { code: 'forbidden' } });
    check('GET', '/v1/audit', refused);
    expect(await client(url).get('/v1/audit')).toMatchObject({ status: 401, body: { code: 'unauthorized' } });
    const gql = await alice.post('/graphql', { query: '{ auditEvents { nodes { id } } }' });
    expect(gql.body.data.auditEvents).toBeNull();
    expect(gql.body.errors[0].extensions.code).toBe('forbidden');
    // Another organization's admin sees its own log: none of these events.
    const theirs = await stranger.get('/v1/audit');
    expect(theirs.status).toBe(200);
    expect(theirs.body.events).toEqual([]);
    expect((await stranger.get(`/v1/audit?target=${aliceToken}`)).body.events).toEqual([]);
  });

  it('answers GraphQL auditEvents like the REST list', async () => {
    const rest = await audit('action=environment.create');
    const res = await admin.post('/graphql', {
      query: `query ($filter: AuditFilter) {
        auditEvents(first: 100, filter: $filter) {
          nodes { id time action actor { kind id name } target { kind id } address outcome detail }
          pageInfo { hasNextPage }
        }
      }`,
      variables: { filter: { action: 'environment.create' } },
    });
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data.auditEvents.nodes).toEqual(rest.map((e) => ({ ...e, detail: e.detail ?? null })));
    // A change made through GraphQL is recorded the same way, with the address of its request.
    const created = await admin.post(
      '/graphql',
      { query: 'mutation { createApiKey(input: { name: "from-graphql" }) { key { id } } }' },
      { 'x-forwarded-for': '192.0.2.55' },
    );
    const keyId = created.body.data.createApiKey.key.id;
    expect(await eventOf('key.create', keyId)).toMatchObject({ actor: { id: adminId }, address: '192.0.2.55', outcome: 'success' });
    const bad = await admin.post('/graphql', { query: '{ auditEvents(filter: { since: "soon" }) { nodes { id } } }' });
    expect(bad.body.errors[0].extensions).toMatchObject({ code: 'invalid', field: 'since' });
  });

  it('deletes events older than AUDIT_RETENTION', async () => {
    const before = await audit();
    expect(before.length).toBeGreaterThan(0);
    s.clock.advance(31 * DAY_MS);
    const fresh = await admin.post('/v1/keys', { name: 'after-the-month' });
    await s.app.deps.background.tick();
    const after = await audit();
    expect(after.map((e) => e.target.id)).toEqual([fresh.body.key.id]);
  });
});

describe('AUDIT_RETENTION', () => {
  it('is a positive duration, 365d by default; anything else stops the start', () => {
    expect(loadConfig({}).auditRetentionMs).toBe(365 * DAY_MS);
    expect(loadConfig({ AUDIT_RETENTION: '90d' }).auditRetentionMs).toBe(90 * DAY_MS);
    expect(() => loadConfig({ AUDIT_RETENTION: 'a year' })).toThrow(/^AUDIT_RETENTION: "a year" is not a valid duration/);
    expect(() => loadConfig({ AUDIT_RETENTION: '0s' })).toThrow(/AUDIT_RETENTION must be a positive duration/);
  });
});
