// Webhooks end to end: a local receiver verifies the Standard Webhooks signatures itself, sees the
// events as they happen and in order per environment, retries keep the webhook-id, and a delivery
// survives a kill -9 of the server. Plus who may manage them and which URLs are refused.
import { createHmac } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { openApiValidator } from './helpers/openapi';
import { type BerthProc, startBerth } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

interface Received {
  id: string;
  timestamp: string;
  body: string;
  json: { type: string; timestamp: string; data: Record<string, any> };
  /** Whether the signature checked out against the secret. */
  verified: boolean;
}

/** What the receiver answers the nth request (0-based): a status, or 'hang' (never answers). */
type Answer = (n: number, got: Received) => number | 'hang';

/** A webhook endpoint on 127.0.0.1 that checks signatures independently of Berth's code. */
async function receiver(answer: Answer = () => 204) {
  let secret = '';
  const got: Received[] = [];
  const waiters: { check: () => boolean; resolve: () => void }[] = [];
  const hung = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const id = String(req.headers['webhook-id']);
      const timestamp = String(req.headers['webhook-timestamp']);
      const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
      const expected = `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
      const signatures = String(req.headers['webhook-signature'] ?? '').split(' ');
      const item: Received = { id, timestamp, body, json: JSON.parse(body), verified: signatures.includes(expected) };
      const reply = answer(got.length, item);
      got.push(item);
      for (const w of [...waiters]) {
        if (w.check()) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
      }
      if (reply === 'hang') hung.add(res);
      else res.writeHead(reply).end(reply >= 300 ? 'boom' : '');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    port,
    got,
    setSecret(s: string) {
      secret = s;
    },
    /** Resolves once `check` holds over what arrived (the test's time-out bounds it). */
    arrived(check: (got: Received[]) => boolean): Promise<void> {
      if (check(got)) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ check: () => check(got), resolve }));
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hung) res.destroy();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** How long the server may take to put a delivery's attempt on record (one may wait out a time-out). */
const RECORDED = { timeout: 30_000, interval: 100 };

type Receiver = Awaited<ReturnType<typeof receiver>>;

describeBackends('webhooks', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let check: ReturnType<typeof openApiValidator>;

  /** One run of the scheduler with the clock a second further. */
  async function step() {
    s.clock.advance(1000);
    await s.app.deps.background.tick();
  }

  async function register(r: Receiver, events: string[]) {
    const res = await admin.post('/v1/webhooks', { url: r.url, events });
    expect(res.status).toBe(201);
    check('post', '/v1/webhooks', res);
    r.setSecret(res.body.secret);
    return res.body.webhook as { id: string };
  }

  async function upload(project: string, data: string) {
    const res = await fetch(`${s.url}/v1/artifacts?project=${project}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream' },
      body: data,
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { artifact: { id: string } }).artifact;
  }

  const deliveries = async (id: string) => {
    const res = await admin.get(`/v1/webhooks/${id}/deliveries`);
    expect(res.status).toBe(200);
    check('get', '/v1/webhooks/{id}/deliveries', res);
    return res.body.deliveries as Record<string, any>[];
  };

  /** The server's warnings (JSON lines). */
  const warnings: Record<string, any>[] = [];

  beforeAll(async () => {
    s = await startServer(
      backend,
      { WEBHOOK_ALLOW_PRIVATE: '1', WEBHOOK_TIMEOUT_MS: '1000', LOG_LEVEL: 'warn' },
      { logLines: (line) => warnings.push(JSON.parse(line)) },
    );
    check = openApiValidator((await admin.get('/v1/openapi.json')).body);
  });
  afterAll(() => s?.stop());

  it('delivers every event as it happens, signed, in order per environment', async () => {
    const r = await receiver();
    const hook = await register(r, [
      'environment.created',
      'environment.state',
      'artifact.created',
      'artifact.deleted',
      'snapshot.created',
      'project.shredded',
    ]);

    const created = await admin.post('/v1/environments', { template: 'default', project: 'hooks', snapshot: 'main' });
    expect(created.status).toBe(202);
    const envId: string = created.body.environment.id;
    await untilState(s, BOOTSTRAP, envId, 'ready', { between: step });
    const src = join(s.dataDir, 'workspaces', envId, 'workspace', 'src');
    await mkdir(src, { recursive: true });
    await writeFile(join(src, 'a.txt'), 'alpha');
    await admin.del(`/v1/environments/${envId}`);
    await untilState(s, BOOTSTRAP, envId, 'stopped', { between: step });
    const ofEnv = (got: Received[]) => got.filter((g) => g.json.data.id === envId);
    await r.arrived((got) => ofEnv(got).some((g) => g.json.data.state === 'stopped'));
    await r.arrived((got) => got.some((g) => g.json.type === 'snapshot.created'));
    expect(ofEnv(r.got).map((g) => `${g.json.type}:${g.json.data.state}`)).toEqual([
      'environment.created:pending',
      'environment.state:starting',
      'environment.state:ready',
      'environment.state:stopping',
      'environment.state:stopped',
    ]);
    const snapshot = r.got.find((g) => g.json.type === 'snapshot.created')!;
    expect(snapshot.json.data).toMatchObject({ project: 'hooks', key: 'main', lease: envId });

    const artifact = await upload('hooks', 'some bytes');
    await r.arrived((got) => got.some((g) => g.json.type === 'artifact.created'));
    expect((await admin.del(`/v1/artifacts/${artifact.id}`)).status).toBe(200);
    await r.arrived((got) => got.some((g) => g.json.type === 'artifact.deleted'));
    expect(r.got.find((g) => g.json.type === 'artifact.deleted')!.json.data).toMatchObject({ id: artifact.id, project: 'hooks' });

    expect((await admin.del('/v1/project-keys/hooks')).status).toBe(200);
    await r.arrived((got) => got.some((g) => g.json.type === 'project.shredded'));
    expect(r.got.find((g) => g.json.type === 'project.shredded')!.json.data).toMatchObject({ project: 'hooks' });

    for (const g of r.got) {
      expect(g.verified).toBe(true);
      expect(g.id).toMatch(/^msg_[a-z2-7]{20}$/);
      expect(Object.keys(g.json).sort()).toEqual(['data', 'timestamp', 'type']);
      expect(Number.isNaN(Date.parse(g.json.timestamp))).toBe(false);
    }
    expect(new Set(r.got.map((g) => g.id)).size).toBe(r.got.length);

    // REST leaves null fields out: a delivered one has no nextAttempt.
    const listed = await vi.waitFor(async () => {
      const all = await deliveries(hook.id);
      expect(all.every((d) => d.delivered)).toBe(true);
      return all;
    }, RECORDED);
    expect(listed).toHaveLength(r.got.length);
    expect(listed.every((d) => d.attempts === 1 && d.lastStatus === 204 && d.nextAttempt === undefined)).toBe(true);
    const page = await admin.get(`/v1/webhooks/${hook.id}/deliveries?limit=2`);
    expect(page.body.deliveries).toHaveLength(2);
    const rest = await admin.get(`/v1/webhooks/${hook.id}/deliveries?limit=500&cursor=${page.body.next}`);
    expect(rest.body.deliveries).toHaveLength(listed.length - 2);
    // The list rule: a cursor of another list, or a page size out of range, is 422.
    const otherCursor: string = (await admin.get('/v1/audit?limit=1')).body.next;
    expect(otherCursor).toBeTruthy();
    for (const query of [`cursor=${otherCursor}`, 'cursor=nonsense', 'limit=0', 'limit=501']) {
      const bad = await admin.get(`/v1/webhooks/${hook.id}/deliveries?${query}`);
      expect(bad.status, query).toBe(422);
    }

    expect((await admin.del(`/v1/webhooks/${hook.id}`)).body).toEqual({ deleted: hook.id });
    await r.close();
  });

  it('retries with the same webhook-id, marks a failing endpoint and clears it on success', async () => {
    // 500, a time-out, 500, 500, 500, then success.
    const r = await receiver((n) => (n === 1 ? 'hang' : n < 5 ? 500 : 204));
    const hook = await register(r, ['artifact.created']);
    await upload('retries', 'x');
    await r.arrived((got) => got.length === 1);
    const first = await vi.waitFor(async () => {
      const [d] = await deliveries(hook.id);
      expect(d?.attempts).toBe(1);
      return d!;
    }, RECORDED);
    expect(first).toMatchObject({ event: 'artifact.created', attempts: 1, lastStatus: 500, lastError: 'HTTP 500: boom' });
    expect(first.delivered).toBeUndefined();
    expect(first.nextAttempt).not.toBeNull();

    const waits = [5_000, 30_000, 120_000, 600_000, 1_800_000];
    for (const [i, wait] of waits.entries()) {
      s.clock.advance(wait);
      await s.app.deps.background.tick();
      await r.arrived((got) => got.length >= i + 2);
      if (i === 0) {
        const [d] = await deliveries(hook.id);
        expect(d).toMatchObject({ attempts: 2, lastError: 'no answer within 1000 ms' });
        expect(d!.lastStatus).toBeUndefined();
      }
      if (i === 3) {
        const listed = (await admin.get('/v1/webhooks')).body.webhooks.find((w: { id: string }) => w.id === hook.id);
        expect(listed).toMatchObject({ failing: true, consecutiveFailures: 5 });
      }
    }
    expect(new Set(r.got.map((g) => g.id)).size).toBe(1);
    expect(r.got.every((g) => g.verified)).toBe(true);
    const [done] = await deliveries(hook.id);
    expect(done).toMatchObject({ attempts: 6, lastStatus: 204 });
    expect(done!.delivered).toBeDefined();
    for (const gone of ['lastError', 'nextAttempt', 'gaveUp']) expect(done).not.toHaveProperty(gone);
    // Every attempt is kept with what it met: the success did not wipe out why the others failed.
    const boom = 'HTTP 500: boom';
    expect(done!.history.map((a: Record<string, any>) => [a.attempt, a.status ?? null, a.error ?? null])).toEqual([
      [1, 500, boom],
      [2, null, 'no answer within 1000 ms'],
      [3, 500, boom],
      [4, 500, boom],
      [5, 500, boom],
      [6, 204, null],
    ]);
    const times = done!.history.map((a: { at: string }) => Date.parse(a.at));
    expect(times).toEqual([...times].sort((a, b) => a - b));
    // And each failure is in the log, with its reason and what happens next.
    const said = warnings.map((w) => w.msg as string).filter((m) => m.includes(`delivery ${done!.id}`));
    expect(said).toEqual([
      `webhook ${hook.id}: delivery ${done!.id} (artifact.created) attempt 1 failed: ${boom}; tried again in 5 s`,
      `webhook ${hook.id}: delivery ${done!.id} (artifact.created) attempt 2 failed: no answer within 1000 ms; tried again in 30 s`,
      `webhook ${hook.id}: delivery ${done!.id} (artifact.created) attempt 3 failed: ${boom}; tried again in 120 s`,
      `webhook ${hook.id}: delivery ${done!.id} (artifact.created) attempt 4 failed: ${boom}; tried again in 600 s`,
      `webhook ${hook.id}: delivery ${done!.id} (artifact.created) attempt 5 failed: ${boom}; tried again in 1800 s`,
    ]);
    const listed = (await admin.get('/v1/webhooks')).body.webhooks.find((w: { id: string }) => w.id === hook.id);
    expect(listed).toMatchObject({ failing: false, consecutiveFailures: 0 });
    expect(listed).not.toHaveProperty('failingSince');
    // Finished deliveries are kept 30 days.
    s.clock.advance(31 * 24 * 3600_000);
    await s.app.deps.background.tick();
    expect(await deliveries(hook.id)).toEqual([]);
    await admin.del(`/v1/webhooks/${hook.id}`);
    await r.close();
  });

  it('holds an environment’s later events back while an earlier one is retried', async () => {
    const r = await receiver((n) => (n === 0 ? 503 : 204));
    const hook = await register(r, ['environment.state']);
    const created = await admin.post('/v1/environments', { template: 'default' });
    const envId: string = created.body.environment.id;
    await untilState(s, BOOTSTRAP, envId, 'ready', { between: step });
    await r.arrived((got) => got.length >= 1);
    for (let i = 0; i < 10 && !r.got.some((g) => g.json.data.state === 'ready'); i++) {
      s.clock.advance(5_000);
      await s.app.deps.background.tick();
    }
    await r.arrived((got) => got.some((g) => g.json.data.state === 'ready'));
    // `ready` was written while `starting` failed, yet arrives only after `starting` got through.
    const states = r.got.map((g) => g.json.data.state);
    expect(states.at(-1)).toBe('ready');
    expect(states.slice(0, -1).every((st) => st === 'starting')).toBe(true);
    expect(states.length).toBeGreaterThanOrEqual(3);
    expect(new Set(r.got.slice(0, -1).map((g) => g.id)).size).toBe(1);
    await admin.del(`/v1/environments/${envId}`);
    await admin.del(`/v1/webhooks/${hook.id}`);
    await r.close();
  });

  it.skipIf(backend !== 'postgres')('shares the deliveries between instances, each sent once', async () => {
    const peer = await s.startPeer();
    const r = await receiver();
    const hook = await register(r, ['artifact.created']);
    // Half of the events through each instance; both instances' jobs claim.
    for (let i = 0; i < 10; i++) {
      const base = i % 2 ? peer.url : s.url;
      const res = await fetch(`${base}/v1/artifacts?project=peers`, {
        method: 'POST',
        headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream' },
        body: `artifact ${i}`,
      });
      expect(res.status).toBe(201);
    }
    await r.arrived((got) => got.length >= 10);
    await vi.waitFor(async () => expect((await deliveries(hook.id)).every((d) => d.delivered)).toBe(true), RECORDED);
    expect(r.got).toHaveLength(10);
    expect(new Set(r.got.map((g) => g.id)).size).toBe(10);
    await admin.del(`/v1/webhooks/${hook.id}`);
    await r.close();
  });

  it('checks the address again at delivery time', async () => {
    const r = await receiver();
    const hook = await register(r, ['artifact.created']);
    s.app.deps.config.webhookAllowPrivate = false; // as if the name now resolved inside
    try {
      await upload('recheck', 'x');
      const [d] = await vi.waitFor(async () => {
        const listed = await deliveries(hook.id);
        expect(listed[0]?.attempts).toBe(1);
        return listed;
      }, RECORDED);
      expect(d!.lastError).toMatch(/internal address/);
      expect(r.got).toHaveLength(0);
    } finally {
      s.app.deps.config.webhookAllowPrivate = true;
    }
    await admin.del(`/v1/webhooks/${hook.id}`);
    await r.close();
  });

  it('is for admins of the organization; the secret is shown once; bounded', async () => {
    const r = await receiver();
    const res = await admin.post('/v1/webhooks', { url: r.url, events: ['artifact.created', 'artifact.created'] });
    expect(res.status).toBe(201);
    expect(res.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(res.body.secret.slice(6), 'base64')).toHaveLength(32);
    expect(res.body.webhook.events).toEqual(['artifact.created']);
    const id: string = res.body.webhook.id;
    const listed = await admin.get('/v1/webhooks');
    check('get', '/v1/webhooks', listed);
    expect(JSON.stringify(listed.body)).not.toContain(res.body.secret.slice(6));
    expect(listed.body.webhooks.find((w: { id: string }) => w.id === id)).not.toHaveProperty('secret');
    const gql = await admin.post('/graphql', { query: '{ webhooks { id url failing } }' });
    expect(gql.body.data.webhooks).toContainEqual({ id, url: r.url, failing: false });

    const member = client(url, (await admin.post('/v1/tokens', { email: 'member@example.com' })).body.secret);
    expect((await member.post('/v1/webhooks', { url: r.url, events: ['artifact.created'] })).status).toBe(403);
    expect((await member.get('/v1/webhooks')).status).toBe(403);
    expect((await member.del(`/v1/webhooks/${id}`)).status).toBe(403);
    expect((await member.get(`/v1/webhooks/${id}/deliveries`)).status).toBe(403);
    const anonymous = client(url);
    expect((await anonymous.get('/v1/webhooks')).status).toBe(401);
    expect((await anonymous.post('/v1/webhooks', { url: r.url, events: ['artifact.created'] })).status).toBe(401);

    const other = await createOrganization(s.app.deps.prisma, 'hookother', 'boss@hookother.example');
    const them = client(url, other.secret);
    expect((await them.get('/v1/webhooks')).body).toEqual({ webhooks: [] });
    expect((await them.del(`/v1/webhooks/${id}`)).status).toBe(404);
    expect((await them.get(`/v1/webhooks/${id}/deliveries`)).status).toBe(404);

    for (const body of [
      { url: r.url, events: [] },
      { url: r.url, events: ['environment.nope'] },
      { url: 'ftp://example.com/x', events: ['artifact.created'] },
      { url: 'http://user:pw@127.0.0.1/x', events: ['artifact.created'] },
      { url: 'not a url', events: ['artifact.created'] },
      { url: `http://127.0.0.1/${'a'.repeat(3000)}`, events: ['artifact.created'] },
    ]) {
      const refused = await them.post('/v1/webhooks', body);
      expect(refused.status, JSON.stringify(body).slice(0, 80)).toBe(422);
      expect(refused.body.code).toBe('invalid');
    }
    for (let i = 0; i < 20; i++) expect((await them.post('/v1/webhooks', { url: r.url, events: ['artifact.created'] })).status).toBe(201);
    const over = await them.post('/v1/webhooks', { url: r.url, events: ['artifact.created'] });
    expect(over.status).toBe(409);
    expect(over.body.code).toBe('too_many_webhooks');
    await admin.del(`/v1/webhooks/${id}`);
    const audit = async (action: string) => (await admin.get(`/v1/audit?action=${action}&target=${id}`)).body.events;
    expect(await audit('webhook.create')).toMatchObject([{ outcome: 'success', target: { kind: 'webhook', id } }]);
    expect(await audit('webhook.delete')).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ outcome: 'success' }),
        expect.objectContaining({ outcome: 'denied', actor: expect.objectContaining({ name: 'member@example.com' }) }),
      ]),
    );
    await r.close();
  });
});

describe('webhook URLs on internal addresses', () => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);
  beforeAll(async () => {
    s = await startServer('pglite');
  });
  afterAll(() => s?.stop());

  it('are refused without WEBHOOK_ALLOW_PRIVATE', async () => {
    for (const target of [
      'http://127.0.0.1:8080/hook',
      'http://localhost/hook',
      'http://10.1.2.3/hook',
      'http://192.168.0.1/hook',
      'http://169.254.169.254/latest/meta-data',
      'http://100.64.0.1/hook',
      'http://0.0.0.0/hook',
      'http://[::1]/hook',
      'http://[::ffff:127.0.0.1]/hook',
      'http://[::ffff:7f00:1]/hook',
      'http://[::ffff:10.0.0.1]/hook',
      'http://[::7f00:1]/hook',
      'http://[::127.0.0.1]:8080/hook',
      'http://[64:ff9b::7f00:1]/hook',
      'http://[64:ff9b::a9fe:a9fe]/latest/meta-data',
      'http://[64:ff9b:1::7f00:1]/hook',
      'http://[fd00::1]/hook',
      'http://[fe80::1]/hook',
      'https://224.0.0.1/hook',
    ]) {
      const res = await admin.post('/v1/webhooks', { url: target, events: ['environment.created'] });
      expect(res.status, target).toBe(422);
      expect(res.body).toMatchObject({ code: 'invalid' });
      expect(res.body.error).toMatch(/^url: /);
    }
    expect((await admin.get('/v1/webhooks')).body).toEqual({ webhooks: [] });
  });
});

describe('webhook deliveries across a kill -9', () => {
  let dir: string;
  let berth: BerthProc | undefined;
  let r: Receiver;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-webhooks-'));
  });
  afterAll(async () => {
    await berth?.kill('SIGKILL');
    await r?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('resume on the next start with the same webhook-id', async () => {
    const env = {
      DATA_DIR: join(dir, 'data'),
      BOOTSTRAP_TOKEN: BOOTSTRAP,
      DOCKER_HOST: 'none',
      WEBHOOK_ALLOW_PRIVATE: '1',
      WEBHOOK_TIMEOUT_MS: '1000',
    };
    // The first attempt never gets an answer: the server dies while it is in flight.
    r = await receiver((n) => (n === 0 ? 'hang' : 204));
    berth = await startBerth(env);
    const api = client(() => berth!.url, BOOTSTRAP);
    const created = await api.post('/v1/webhooks', { url: r.url, events: ['environment.created'] });
    expect(created.status).toBe(201);
    r.setSecret(created.body.secret);
    const lease = await api.post('/v1/environments', { template: 'default' });
    expect(lease.status).toBe(202);
    await r.arrived((got) => got.length === 1);
    await berth.kill('SIGKILL');

    berth = await startBerth(env);
    await r.arrived((got) => got.length === 2);
    expect(r.got[1]!.id).toBe(r.got[0]!.id);
    expect(r.got[1]!.body).toBe(r.got[0]!.body);
    expect(r.got.every((g) => g.verified)).toBe(true);
    expect(r.got[1]!.json.data.id).toBe(lease.body.environment.id);
    const api2 = client(() => berth!.url, BOOTSTRAP);
    const [d] = await vi.waitFor(async () => {
      const listed = (await api2.get(`/v1/webhooks/${created.body.webhook.id}/deliveries`)).body.deliveries;
      expect(listed[0]?.delivered).toBeTruthy();
      return listed;
    }, RECORDED);
    expect(d).toMatchObject({ event: 'environment.created', lastStatus: 204 });
  });
});
