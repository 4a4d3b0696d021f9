// No head-of-line blocking in a pool's queue: a pending lease that fits a free slot is claimed
// whatever older leases of other organizations wait for slots that are not theirs.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { newId } from '../src/kernel/names';
import { createOrganization } from '../src/modules/organizations/service';
import { writeCatalog } from './helpers/catalog';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

describeBackends('queue fairness', (backend) => {
  let s: TestServer;
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-queue-'));
    const templates = await writeCatalog(dir, [{ name: 'remote', pool: 'remote' }], [{ name: 'remote', hotNodes: 0, maxQueued: 100 }]);
    s = await startServer(backend, { TEMPLATES_FILE: templates });
  });
  afterAll(async () => {
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("claims a lease for its organization's idle node while 56 older leases of another wait", async () => {
    const mine = client(() => s.url, BOOTSTRAP);
    const waiting: string[] = [];
    for (let i = 0; i < 56; i++) {
      const res = await mine.post('/v1/environments', { template: 'remote' });
      expect(res.status).toBe(202);
      waiting.push(res.body.environment.id);
    }
    const other = await createOrganization(s.app.deps.prisma, 'other', 'ops@other.example');
    // The other organization's node: online, one free slot (what a node agent's hello records).
    const prisma = s.app.deps.prisma;
    const remote = await prisma.remoteNode.create({
      data: {
        id: newId('node'),
        orgId: other.org.id,
        name: 'builder',
        pool: 'remote',
        state: 'online',
        slots: 1,
        lastSeen: s.clock.now(),
        createdBy: 'ops@other.example',
      },
    });
    await prisma.node.create({ data: { id: `${remote.id}-0`, pool: 'remote', remoteId: remote.id } });
    const theirs = await client(() => s.url, other.secret).post('/v1/environments', { template: 'remote' });
    expect(theirs.status).toBe(202);
    // The environments job (nudged by the lease) claims it for the node at once.
    const id = theirs.body.environment.id as string;
    const claimed = await vi.waitFor(
      async () => {
        const env = await prisma.environment.findUniqueOrThrow({ where: { id } });
        expect(env.state).not.toBe('pending');
        return env;
      },
      { timeout: 20_000, interval: 100 },
    );
    expect(claimed).toMatchObject({ state: 'starting', nodeId: remote.id });
    // No agent will answer the node's prepare: end it here so the job lets go of it.
    await prisma.environment.update({ where: { id }, data: { state: 'failed', stopped: s.clock.now() } });
    // The older leases still wait: the node is not theirs to take.
    expect(await prisma.environment.count({ where: { id: { in: waiting }, state: 'pending' } })).toBe(56);
  });
});
