// Operator limits (docs/operations.md#limits): the sealed bytes an organization keeps
// (ORG_STORAGE_LIMIT) and its share of a pool every organization leases from (POOL_ORG_SHARE),
// both settable per organization with `berth org limits`.
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';

const KiB = 1024;

async function blobFiles(dir: string): Promise<string[]> {
  const entries = await readdir(join(dir, 'blobs'), { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

describe('storage limit', () => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);
  /** POST /v1/artifacts; `chunked`: streamed without a Content-Length. */
  const store = (token: string, name: string, body: Buffer, chunked = false) =>
    fetch(`${s.url}/v1/artifacts?name=${name}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
      body: chunked
        ? new ReadableStream({
            start(controller) {
              controller.enqueue(new Uint8Array(body));
              controller.close();
            },
          })
        : new Uint8Array(body),
      ...(chunked ? { duplex: 'half' } : {}),
    } as RequestInit).then(async (res) => ({ status: res.status, body: await res.json() }));

  beforeAll(async () => {
    s = await startServer('pglite', { ORG_STORAGE_LIMIT: '64KiB', ARTIFACT_CHUNK_SIZE: '4096' });
  });
  afterAll(() => s?.stop());

  it('refuses an upload that would pass the limit, stores nothing of it, and frees room on delete', async () => {
    const first = await store(BOOTSTRAP, 'first', Buffer.alloc(40 * KiB, 1));
    expect(first.status).toBe(201);
    const me = (await admin.get('/v1/me')).body;
    expect(me.organization.storage).toEqual({ used: first.body.artifact.sealedBytes, limit: 64 * KiB });
    const objects = await blobFiles(s.dataDir);
    const count = await s.app.deps.prisma.artifact.count();

    // Declared too large: refused before a byte is read.
    const declared = await store(BOOTSTRAP, 'second', Buffer.alloc(40 * KiB, 2));
    expect(declared).toMatchObject({ status: 413, body: { code: 'storage_quota', error: expect.stringContaining('64KiB') } });
    // Sent without a length: refused once it passes the room left.
    const chunked = await store(BOOTSTRAP, 'third', Buffer.alloc(40 * KiB, 3), true);
    expect(chunked).toMatchObject({ status: 413, body: { code: 'storage_quota' } });
    expect(await s.app.deps.prisma.artifact.count()).toBe(count);
    expect(await blobFiles(s.dataDir)).toEqual(objects);

    // Another organization keeps its own room.
    const other = await createOrganization(s.app.deps.prisma, 'roomy', 'admin@roomy.example');
    expect((await store(other.secret, 'theirs', Buffer.alloc(40 * KiB, 4))).status).toBe(201);

    expect((await admin.del(`/v1/artifacts/${first.body.artifact.id}`)).status).toBe(200);
    expect((await admin.get('/v1/me')).body.organization.storage.used).toBe(0);
    expect((await store(BOOTSTRAP, 'second', Buffer.alloc(40 * KiB, 2))).status).toBe(201);
  });

  it('berth org limits sets an organization its own limits through the running server, and back to the default', async () => {
    const berth = async (...args: string[]) => {
      const proc = spawnNode(['bin/berth.js', 'org', 'limits', ...args], { DATA_DIR: s.dataDir });
      const code = await proc.exited;
      return { code, output: proc.output() };
    };
    const set = await berth('default', '--storage', '1MiB', '--pool-share', '0.5');
    expect(set).toMatchObject({
      code: 0,
      output: expect.stringMatching(/storage\s+1MiB \(set for it\)[\s\S]*pool share\s+0.5 \(set for it\)/),
    });
    expect((await admin.get('/v1/me')).body.organization).toMatchObject({ storage: { limit: 1024 * KiB }, poolShare: 0.5 });
    expect((await store(BOOTSTRAP, 'bigger', Buffer.alloc(100 * KiB, 5))).status).toBe(201);

    const bad = await berth('default', '--pool-share', '2');
    expect(bad.code).not.toBe(0);
    expect(bad.output).toMatch(/pool-share must be a fraction above 0 and at most 1/);
    expect((await berth('nowhere', '--storage', '1GiB')).output).toMatch(/organization "nowhere"/);

    const back = await berth('default', '--storage', 'default', '--pool-share', 'default');
    expect(back.output).toMatch(/storage\s+64KiB \(the server's default\)/);
    expect((await admin.get('/v1/me')).body.organization).toMatchObject({ storage: { limit: 64 * KiB }, poolShare: 1 });
  });

  it('refuses a snapshot save past the limit: the release fails saying why and nothing is kept', async () => {
    // The organization is past its 64KiB already (the 100KiB stored while its limit was 1MiB).
    const made = await admin.post('/v1/environments', { template: 'default', snapshot: 'big' });
    expect(made.status).toBe(202);
    const id = made.body.environment.id as string;
    await untilState(s, BOOTSTRAP, id, 'ready');
    const src = join(s.dataDir, 'workspaces', id, 'workspace', 'src');
    await mkdir(src, { recursive: true });
    await writeFile(join(src, 'data.bin'), Buffer.alloc(8 * KiB, 7));
    expect((await admin.del(`/v1/environments/${id}`)).status).toBe(200);
    const ended = await untilState(s, BOOTSTRAP, id, ['stopped', 'failed']);
    expect(ended).toMatchObject({ state: 'failed', error: expect.stringContaining('storage limit of 64KiB') });
    expect(await s.app.deps.prisma.snapshot.count()).toBe(0);
  });
});

describe('pool share', () => {
  let s: TestServer;

  beforeAll(async () => {
    // The catalog's default pool has 4 hot nodes and a queue of 100: a share of 0.25 is one hot
    // node and 25 waiting leases.
    s = await startServer('pglite', { POOL_ORG_SHARE: '0.25' });
  });
  afterAll(() => s?.stop());

  it('gives one organization at most its share of the hot nodes and of the queue; others are served meanwhile', async () => {
    const mine = client(() => s.url, BOOTSTRAP);
    const lease = (who: ReturnType<typeof client>) => who.post('/v1/environments', { template: 'default' });
    const leased: string[] = [];
    for (let i = 0; i < 26; i++) {
      const res = await lease(mine);
      expect(res.status).toBe(202);
      leased.push(res.body.environment.id);
    }
    const refused = await lease(mine);
    expect(refused).toMatchObject({ status: 429, body: { code: 'pool_share', error: expect.stringContaining('share') } });
    await s.app.deps.background.tick();
    const states = await s.app.deps.prisma.environment.findMany({ where: { id: { in: leased } }, select: { state: true } });
    // One on a hot node, the rest waiting: the three other hot nodes stay free for others.
    expect(states.filter((e) => e.state !== 'pending')).toHaveLength(1);

    const other = await createOrganization(s.app.deps.prisma, 'neighbour', 'admin@neighbour.example');
    const theirs = await lease(client(() => s.url, other.secret));
    expect(theirs.status).toBe(202);
    await s.app.deps.background.tick();
    const env = await s.app.deps.prisma.environment.findUniqueOrThrow({ where: { id: theirs.body.environment.id } });
    expect(env.state).not.toBe('pending');
  });
});
