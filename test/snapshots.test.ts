import { cp, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { dataKeyAad, unwrapKey } from '../src/platform/crypto/data-keys';
import { FsBlobStore } from '../src/platform/store/fs-store';
import { readManifest } from '../src/platform/store/pack';
import { graphql } from './gql';
import { openApiValidator } from './helpers/openapi';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';
import { poll } from './helpers/wait';

const SnapshotsQuery = graphql(`
  query TestSnapshots($project: String, $prefix: String) { snapshots(project: $project, prefix: $prefix) { project snapshots { key share root } next } }
`);
const ShredMutation = graphql(`mutation TestShredProject($project: String!) { shredProject(project: $project) { project shredded at } }`);

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .sort();
}

describeBackends('snapshots', (backend) => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let check: ReturnType<typeof openApiValidator>;
  let orgId: string;

  /** One run of the scheduler with the clock a second further. */
  async function step() {
    s.clock.advance(1000);
    await s.app.deps.background.tick();
  }

  // The default template's shares sit at /workspace/<share> under the environment's root.
  const workspace = (id: string, share: string) => join(s.dataDir, 'workspaces', id, 'workspace', share);

  async function lease(body: Record<string, unknown>) {
    const res = await admin.post('/v1/environments', { template: 'default', ...body });
    expect(res.status).toBe(202);
    return untilState(s, BOOTSTRAP, res.body.environment.id, 'ready', { between: step });
  }

  /** Leases, writes `files` into its shares (`share/path` → content), then ends it (saving). */
  async function save(body: Record<string, unknown>, files: Record<string, string>) {
    const env = await lease(body);
    for (const [rel, content] of Object.entries(files)) {
      const [share, ...rest] = rel.split('/');
      const target = join(workspace(env.id, share!), ...rest);
      await mkdir(join(target, '..'), { recursive: true });
      await writeFile(target, content);
    }
    await admin.del(`/v1/environments/${env.id}`);
    await untilState(s, BOOTSTRAP, env.id, 'stopped', { between: step });
    return env;
  }

  async function upload(project: string, data: string, token = BOOTSTRAP) {
    const res = await fetch(`${s.url}/v1/artifacts?project=${project}&link=1h`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
      body: data,
    });
    expect(res.status).toBe(201);
    return (await res.json()) as { artifact: { id: string; keyVersion: number }; link: { url: string } };
  }

  beforeAll(async () => {
    s = await startServer(backend);
    check = openApiValidator((await admin.get('/v1/openapi.json')).body);
    orgId = (await s.app.deps.prisma.organization.findFirstOrThrow({ where: { name: 'default' } })).id;
  });
  afterAll(() => s?.stop());

  it('saves the synced files of each share when the environment ends, by the sync rules', async () => {
    const env = await save(
      { snapshot: 'main', include: ['node_modules/keep/**'] },
      {
        'src/a.txt': 'alpha',
        'src/sub/b.txt': 'beta',
        'src/.gitignore': '*.log\n',
        'src/debug.log': 'noise',
        'src/node_modules/x/index.js': 'x',
        'src/node_modules/keep/k.js': 'kept',
        'src/.git/HEAD': 'ref',
        'out/result.txt': 'done',
      },
    );
    const list = await admin.get('/v1/snapshots');
    check('GET', '/v1/snapshots', list);
    expect(list.status).toBe(200);
    expect(list.body.project).toBe('default');
    const byShare = Object.fromEntries(list.body.snapshots.map((x: { share: string }) => [x.share, x]));
    expect(Object.keys(byShare).sort()).toEqual(['out', 'src']);
    expect(byShare.src).toMatchObject({
      project: 'default',
      key: 'main',
      share: 'src',
      lease: env.id,
      files: 4, // a.txt, sub/b.txt, .gitignore, node_modules/keep/k.js
      bytes: 5 + 4 + 6 + 4,
      keyVersion: 1,
      createdBy: 'admin@berth.local',
      root: expect.stringMatching(/^snr_/),
    });
    expect(byShare.src.sealedBytes).toBeGreaterThan(byShare.src.bytes);
    expect(byShare.src.objects).toBe(1);
    expect(byShare.src.segments).toHaveLength(1);
    expect(byShare.out).toMatchObject({ files: 1, bytes: 4, root: byShare.src.root });

    // A new environment with the same key restores it (restore defaults to [snapshot]).
    const next = await lease({ snapshot: 'main' });
    expect(next.restored).toEqual({ key: 'main', root: byShare.src.root, files: 5, created: byShare.src.created });
    expect(await filesUnder(workspace(next.id, 'src'))).toEqual(['.gitignore', 'a.txt', 'node_modules/keep/k.js', 'sub/b.txt']);
    expect(await readFile(join(workspace(next.id, 'src'), 'sub/b.txt'), 'utf8')).toBe('beta');
    expect(await filesUnder(workspace(next.id, 'out'))).toEqual(['result.txt']);
    // Saving under an existing key makes a newer snapshot of it.
    await writeFile(join(workspace(next.id, 'src'), 'a.txt'), 'alpha 2');
    await admin.del(`/v1/environments/${next.id}`);
    await untilState(s, BOOTSTRAP, next.id, 'stopped', { between: step });
    const again = (await admin.get('/v1/snapshots?prefix=main')).body.snapshots;
    expect(again).toHaveLength(4);
    expect(again[0].lease).toBe(next.id);
    const third = await lease({ restore: ['main'] });
    expect(third.restored.root).toBe(again[0].root);
    expect(await readFile(join(workspace(third.id, 'src'), 'a.txt'), 'utf8')).toBe('alpha 2');
    await admin.del(`/v1/environments/${third.id}`);
    await untilState(s, BOOTSTRAP, third.id, 'stopped', { between: step });
  });

  it('noIgnore saves everything', async () => {
    await save(
      { project: 'raw', snapshot: 'all', noIgnore: true },
      { 'src/node_modules/m.js': 'm', 'src/.git/HEAD': 'h', 'src/x.log': 'l' },
    );
    const list = (await admin.get('/v1/snapshots?project=raw')).body.snapshots;
    expect(list.find((x: { share: string }) => x.share === 'src').files).toBe(3);
  });

  it('restores in order: exact key first, then the newest prefix match, first key of the list that hits', async () => {
    const p = { project: 'order' };
    await save({ ...p, snapshot: 'app' }, { 'src/m': 'app' });
    await save({ ...p, snapshot: 'app-a' }, { 'src/m': 'app-a' });
    await save({ ...p, snapshot: 'app-b' }, { 'src/m': 'app-b' });
    const marker = async (restore: string[]) => {
      const env = await lease({ ...p, restore });
      const content = env.restored ? await readFile(join(workspace(env.id, 'src'), 'm'), 'utf8') : null;
      await admin.del(`/v1/environments/${env.id}`);
      await untilState(s, BOOTSTRAP, env.id, 'stopped', { between: step });
      return { key: env.restored?.key ?? null, content };
    };
    expect(await marker(['app'])).toEqual({ key: 'app', content: 'app' }); // exact beats the newer app-b
    expect(await marker(['app-'])).toEqual({ key: 'app-b', content: 'app-b' }); // newest prefix match
    expect(await marker(['missing', 'app-a', 'app'])).toEqual({ key: 'app-a', content: 'app-a' });
    expect(await marker(['nothing', 'zzz'])).toEqual({ key: null, content: null }); // no hit: still ready
    // Other projects' snapshots never match.
    expect(await marker(['main'])).toEqual({ key: null, content: null });
  });

  it('lists newest first with a key prefix and pages; GraphQL the same', async () => {
    const all = (await admin.get('/v1/snapshots?project=order')).body.snapshots;
    expect(all.map((x: { key: string }) => x.key)).toEqual(['app-b', 'app-b', 'app-a', 'app-a', 'app', 'app']);
    const created = all.map((x: { created: string }) => Date.parse(x.created));
    expect([...created].sort((a, b) => b - a)).toEqual(created);
    expect((await admin.get('/v1/snapshots?project=order&prefix=app-')).body.snapshots).toHaveLength(4);
    const seen: unknown[] = [];
    let cursor: string | undefined;
    do {
      const page = await admin.get(`/v1/snapshots?project=order&limit=4${cursor ? `&cursor=${cursor}` : ''}`);
      check('GET', '/v1/snapshots', page);
      seen.push(...page.body.snapshots);
      cursor = page.body.next;
    } while (cursor);
    expect(seen).toEqual(all);
    expect((await admin.get('/v1/snapshots?project=order&limit=0')).status).toBe(422);
    expect((await admin.get('/v1/snapshots?project=Bad%20Name')).status).toBe(422);
    const gql = await admin.gql(SnapshotsQuery, { project: 'order', prefix: 'app-a' });
    expect(gql.body.data?.snapshots?.project).toBe('order');
    expect(gql.body.data?.snapshots?.snapshots.map((x) => x.key)).toEqual(['app-a', 'app-a']);
    expect(gql.body.data?.snapshots?.next).toBeNull();
  });

  it('shreds a project: keys first, then snapshots and artifacts; a raw copy cannot be opened any more', async () => {
    const env = await save({ project: 'secret', snapshot: 'k' }, { 'src/s.txt': 'top secret' });
    const art = await upload('secret', 'artifact secret');
    const blobs = join(s.dataDir, 'blobs');
    const copy = join(tmpdir(), `berth-shred-copy-${Date.now()}`);
    await cp(blobs, copy, { recursive: true });
    const manifests = (await filesUnder(copy)).filter((n) => n.includes('/secret/') && n.endsWith('/manifest'));
    expect(manifests).toHaveLength(3); // src + out snapshot shares, the artifact
    const store = new FsBlobStore(copy);
    // The copy is readable with the project's key while it exists: the failure below is the shred's doing.
    const before = await s.app.deps.prisma.projectKey.findFirstOrThrow({ where: { orgId, project: 'secret' } });
    const secretKey = unwrapKey(s.app.deps.masterKey, Buffer.from(before.wrapped), dataKeyAad(orgId, 'secret', before.version));
    for (const name of manifests) {
      await expect(readManifest({ store, manifest: name, objectId: name.split('/').at(-2)!, key: secretKey })).resolves.toBeTruthy();
    }

    const member = await admin.post('/v1/tokens', { email: 'member@example.com' });
    const denied = await client(url, member.body.secret).del('/v1/project-keys/secret');
    expect(denied).toMatchObject({ status: 403, body: { code: 'forbidden' } });
    const deniedGql = await client(url, member.body.secret).gql(ShredMutation, { project: 'secret' });
    expect(deniedGql.body.data?.shredProject ?? null).toBeNull();
    expect(deniedGql.body.errors?.[0]?.extensions?.code).toBe('forbidden');
    expect((await admin.get('/v1/snapshots?project=secret')).body.snapshots).toHaveLength(2);

    const res = await admin.del('/v1/project-keys/secret');
    check('DELETE', '/v1/project-keys/secret', res);
    expect(res).toMatchObject({ status: 200, body: { project: 'secret', shredded: true, at: expect.any(String) } });

    expect((await admin.get(`/v1/artifacts/${art.artifact.id}`)).status).toBe(404);
    expect([404, 410]).toContain((await fetch(art.link.url)).status);
    expect((await admin.get('/v1/snapshots?project=secret')).body.snapshots).toEqual([]);
    expect((await filesUnder(blobs)).filter((n) => n.includes('/secret/'))).toEqual([]);
    const restoredEnv = await lease({ project: 'secret', restore: ['k'] });
    expect(restoredEnv.restored).toBeUndefined();
    await admin.del(`/v1/environments/${restoredEnv.id}`);
    await untilState(s, BOOTSTRAP, restoredEnv.id, 'stopped', { between: step });

    // Every key left anywhere in the database fails on every copied object.
    const keys = await s.app.deps.prisma.projectKey.findMany();
    const usable = keys
      .filter((k) => k.wrapped.length > 0)
      .map((k) => unwrapKey(s.app.deps.masterKey, Buffer.from(k.wrapped), dataKeyAad(k.orgId, k.project, k.version)));
    expect(keys.filter((k) => k.project === 'secret').every((k) => k.wrapped.length === 0)).toBe(true);
    expect(usable.length).toBeGreaterThan(0);
    for (const name of manifests) {
      const objectId = name.split('/').at(-2)!;
      for (const key of usable) {
        await expect(readManifest({ store, manifest: name, objectId, key })).rejects.toThrow();
      }
    }
    await rm(copy, { recursive: true, force: true });
    expect(env.id).toMatch(/^env_/);

    // Repeating answers the same shred; an unknown project is 404.
    const twice = await admin.del('/v1/project-keys/secret');
    expect(twice).toMatchObject({ status: 200, body: { project: 'secret', shredded: true, at: res.body.at } });
    expect(await admin.del('/v1/project-keys/never-used')).toMatchObject({ status: 404, body: { code: 'not_found' } });
    // A new upload gets a fresh key version, never a reused one.
    const fresh = await upload('secret', 'after');
    expect(fresh.artifact.keyVersion).toBe(2);
    const third = await admin.del('/v1/project-keys/secret');
    expect(Date.parse(third.body.at)).toBeGreaterThan(Date.parse(res.body.at));
  });

  it('gives sandboxes running the project a fresh key in their keyring after a shred', async () => {
    const reg = (await admin.post('/v1/sandboxes', { name: `keys-${backend}` })).body;
    const sb = reg.sandbox;
    const agent = client(url, (await client(url).post('/v1/sandboxes/join', { key: reg.key })).body.credential);
    const env = (await admin.post('/v1/environments', { template: 'default', sandbox: sb.id, project: 'ring' })).body.environment;
    const before = (await agent.get(`/v1/sandboxes/${sb.id}/config`)).body.config;
    const entry = before.keyring.find((k: { project: string }) => k.project === 'ring');
    expect(entry).toMatchObject({ version: 1, key: expect.any(String) });
    expect((await admin.del('/v1/project-keys/ring')).status).toBe(200);
    const after = (await agent.get(`/v1/sandboxes/${sb.id}/config`)).body.config;
    const fresh = after.keyring.find((k: { project: string }) => k.project === 'ring');
    expect(fresh.version).toBeGreaterThan(1);
    expect(fresh.key).not.toBe(entry.key);
    expect(after.version).toBeGreaterThan(before.version);
    await admin.del(`/v1/environments/${env.id}`);
  });

  it('finishes a shred interrupted half-way after a restart', async () => {
    await save({ project: 'crash', snapshot: 'k' }, { 'src/c.txt': 'crash' });
    const art = await upload('crash', 'crash artifact');
    const prisma = s.app.deps.prisma;
    // What a crash right after the shred transaction's key step would leave: keys gone, records left.
    await prisma.shred.create({ data: { orgId, project: 'crash', at: s.clock.now() } });
    await prisma.projectKey.updateMany({ where: { orgId, project: 'crash' }, data: { wrapped: new Uint8Array(0) } });
    // Nothing left behind opens, even before the shred is finished.
    expect((await fetch(art.link.url)).status).toBe(410);
    const early = await lease({ project: 'crash', restore: ['k'] });
    expect(early.restored).toBeUndefined();
    await admin.del(`/v1/environments/${early.id}`);
    await untilState(s, BOOTSTRAP, early.id, 'stopped', { between: step });
    await s.restart();
    await s.app.deps.background.tick();
    expect((await admin.get('/v1/snapshots?project=crash')).body.snapshots).toEqual([]);
    expect((await admin.get(`/v1/artifacts/${art.artifact.id}`)).status).toBe(404);
    expect((await filesUnder(join(s.dataDir, 'blobs'))).filter((n) => n.includes('/crash/'))).toEqual([]);
    const shred = await s.app.deps.prisma.shred.findFirstOrThrow({ where: { orgId, project: 'crash' } });
    expect(shred.finished).not.toBeNull();
  });

  /** Every file under DATA_DIR (database, blobs, workspaces) that contains `text` in plain. */
  async function plaintextOf(text: string): Promise<string[]> {
    const hits: string[] = [];
    for (const rel of await filesUnder(s.dataDir)) {
      if ((await readFile(join(s.dataDir, rel)).catch(() => Buffer.alloc(0))).includes(text)) hits.push(rel);
    }
    return hits;
  }

  it('wipes the workspace of a start that failed half-way through its restore, also after a restart and a shred', async () => {
    const secret = `half-restored-${backend}-${Date.now()}`;
    await save({ project: 'broken', snapshot: 'k' }, { 'out/first.txt': secret, 'src/second.txt': secret });
    // Shares restore in name order: `out` unpacks, then `src` fails (its manifest is gone).
    const srcSnapshot = (await admin.get('/v1/snapshots?project=broken')).body.snapshots.find((x: { share: string }) => x.share === 'src');
    const row = await s.app.deps.prisma.snapshot.findFirstOrThrow({ where: { orgId, root: srcSnapshot.root, share: 'src' } });
    const manifest = (await filesUnder(join(s.dataDir, 'blobs'))).find((n) => n.includes(row.id) && n.endsWith('/manifest'))!;
    await rm(join(s.dataDir, 'blobs', manifest));

    const res = await admin.post('/v1/environments', { template: 'default', project: 'broken', restore: ['k'] });
    const failed = await untilState(s, BOOTSTRAP, res.body.environment.id, 'failed', { between: step });
    expect(failed.error).toContain('could not prepare');
    // The failure is recorded first, then its node wipes the workspace (environments/job.ts fail):
    // a look right at `failed` can come between the two.
    const left = () => filesUnder(join(s.dataDir, 'workspaces', failed.id));
    await poll("the failed start's workspace to be wiped", async () => ((await left()).length === 0 ? true : undefined), { between: step });
    expect(await left()).toEqual([]);

    // A crash between the end and the wipe leaves plain files; the next start removes them, and
    // keeps the workspace of an environment still running.
    const running = await lease({ project: 'other' });
    await writeFile(join(workspace(running.id, 'src'), 'keep.txt'), 'mine');
    await mkdir(workspace(failed.id, 'out'), { recursive: true });
    await writeFile(join(workspace(failed.id, 'out'), 'first.txt'), secret);
    await s.restart();
    await s.app.deps.background.tick();
    expect(await filesUnder(join(s.dataDir, 'workspaces', failed.id))).toEqual([]);
    expect(await filesUnder(workspace(running.id, 'src'))).toEqual(['keep.txt']);
    await admin.del(`/v1/environments/${running.id}`);
    await untilState(s, BOOTSTRAP, running.id, 'stopped', { between: step });

    // Shredded: no plain byte of the project is left anywhere under DATA_DIR.
    expect((await admin.del('/v1/project-keys/broken')).status).toBe(200);
    expect(await plaintextOf(secret)).toEqual([]);
  });

  it('lets a shred win over environments of the project that began before it', async () => {
    const secret = `before-shred-${backend}-${Date.now()}`;
    await save({ project: 'racy', snapshot: 'k' }, { 'src/s.txt': secret });
    // It restores the files sealed under the key the shred is about to destroy.
    const env = await lease({ project: 'racy', snapshot: 'k' });
    expect(env.restored?.key).toBe('k');
    const running = await lease({ project: 'racy', snapshot: 'k' });
    await admin.del(`/v1/environments/${env.id}`);
    expect((await admin.del('/v1/project-keys/racy')).status).toBe(200);
    await untilState(s, BOOTSTRAP, env.id, 'stopped', { between: step });
    // Still running at the shred: it keeps its files while it runs, saves nothing when it ends.
    expect(await filesUnder(workspace(running.id, 'src'))).toEqual(['s.txt']);
    await admin.del(`/v1/environments/${running.id}`);
    await untilState(s, BOOTSTRAP, running.id, 'stopped', { between: step });
    expect((await admin.get('/v1/snapshots?project=racy')).body.snapshots).toEqual([]);
    expect(await plaintextOf(secret)).toEqual([]);
    expect((await filesUnder(join(s.dataDir, 'blobs'))).filter((n) => n.includes('/racy/'))).toEqual([]);
    // An environment begun after the shred saves again, under the new key.
    await save({ project: 'racy', snapshot: 'k' }, { 'src/new.txt': 'after' });
    const after = (await admin.get('/v1/snapshots?project=racy')).body.snapshots;
    expect(after.map((x: { keyVersion: number }) => x.keyVersion)).toEqual([2, 2]);
  });

  it.skipIf(backend !== 'postgres')('lets a shred win over releases running on another instance at the same moment', async () => {
    const peer = await s.startPeer();
    for (let round = 0; round < 3; round++) {
      const project = `race-${round}`;
      const envs = [];
      for (let i = 0; i < 3; i++) {
        const env = await lease({ project, snapshot: `k${i}` });
        await writeFile(join(workspace(env.id, 'src'), 'f.txt'), `round ${round} env ${i}`);
        envs.push(env);
      }
      // The project has a key before the race, so the shred has something to shred however the race goes.
      const sealed = await admin.post(`/v1/artifacts?name=seed.txt&project=${project}`, 'seed', {
        'content-type': 'application/octet-stream',
      });
      expect(sealed.status).toBe(201);
      for (const env of envs) await admin.del(`/v1/environments/${env.id}`);
      // The peer releases them (saving snapshots) while this instance shreds their project.
      const [shred] = await Promise.all([admin.del(`/v1/project-keys/${project}`), peer.deps.background.tick()]);
      expect(shred.status).toBe(200);
      for (const env of envs) await untilState(s, BOOTSTRAP, env.id, 'stopped', { between: step });
      expect((await admin.get(`/v1/snapshots?project=${project}`)).body.snapshots).toEqual([]);
      await s.app.deps.background.tick();
      expect((await filesUnder(join(s.dataDir, 'blobs'))).filter((n) => n.includes(`/${project}/`))).toEqual([]);
    }
  });

  it('keeps organizations apart', async () => {
    const other = await createOrganization(s.app.deps.prisma, 'snapother', 'boss@other.example');
    const them = client(url, other.secret);
    expect((await them.get('/v1/snapshots')).body).toEqual({ project: 'default', snapshots: [] });
    expect((await them.del('/v1/project-keys/default')).status).toBe(404);
    expect((await them.gql(ShredMutation, { project: 'default' })).body.errors?.[0]?.extensions?.code).toBe('not_found');
    const theirs = await them.post('/v1/environments', { template: 'default', restore: ['main'] });
    expect(theirs.status).toBe(202);
    expect((await admin.get('/v1/snapshots')).body.snapshots.length).toBeGreaterThan(0);
    const theirEnv = await untilState(s, other.secret, theirs.body.environment.id, 'ready', { between: step });
    expect(theirEnv.restored).toBeUndefined();
    const env = await lease({ restore: ['main'] });
    expect(env.restored?.key).toBe('main');
  });
});
