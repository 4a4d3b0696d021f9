import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { containersOf, describeContainers, engine, TEST_ECHO_IMAGE } from './helpers/containers';
import {
  type BerthProc,
  berthExec,
  echoedWhole,
  forwarding,
  type Proc,
  spawnNode,
  startBerth,
  writeSandboxTree,
} from './helpers/processes';
import { BOOTSTRAP, client } from './helpers/server';
import { reaches } from './helpers/states';

/** Files under `dir` (recursively) whose bytes contain `needle`. */
async function filesContaining(dir: string, needle: Buffer): Promise<string[]> {
  const hits: string[] = [];
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = join(entry.parentPath, entry.name);
    if ((await readFile(file)).includes(needle)) hits.push(file);
  }
  return hits;
}
/** How long the agents may take to sync a file or clean up an environment (containers end). */
const WAIT = { timeout: 60_000, interval: 200 };

const backends: ('pglite' | 'postgres')[] = process.env.TEST_DATABASE_URL ? ['pglite', 'postgres'] : ['pglite'];

for (const backend of backends) {
  describeContainers(`agents end to end [${backend}]`, () => {
    let base: string;
    let nodeDir: string;
    let sandboxDir: string;
    let nodeSide: BerthProc;
    let sandboxSide: BerthProc;
    let nodeAgent: Proc | undefined;
    let sandboxAgent: Proc | undefined;
    let schema: string | undefined;
    const instances: BerthProc[] = [];
    const api = () => client(() => nodeSide.url, BOOTSTRAP);
    let nodeToken: string;
    let envId: string;
    let listen: Record<string, number>;

    beforeAll(async () => {
      base = await mkdtemp(join(tmpdir(), 'berth-e2e-'));
      nodeDir = join(base, 'node');
      sandboxDir = join(base, 'sandbox');
      // The echo service is the image's own command, on the environment's port 7000; the postgres
      // service names 127.0.0.1:5432, this machine's PostgreSQL were it dialled outside the environment.
      const services = [
        { service: 'echo', target: '127.0.0.1:7000' },
        { service: 'postgres', target: '127.0.0.1:5432' },
      ];
      const templates = join(base, 'templates.json');
      await writeFile(
        templates,
        JSON.stringify({
          pools: [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
          templates: [
            {
              name: 'dev',
              pool: 'remote',
              startMs: 50,
              image: TEST_ECHO_IMAGE,
              idle: '30m',
              hard: '1h',
              shares: [
                { name: 'src', direction: 'in', envPath: '/workspace/src' },
                { name: 'out', direction: 'out', envPath: '/workspace/out' },
              ],
              services,
            },
          ],
        }),
      );
      // A short liveness bound, so the lost node is noticed soon.
      const env: Record<string, string> = {
        DATA_DIR: join(base, 'data'),
        BOOTSTRAP_TOKEN: BOOTSTRAP,
        TEMPLATES_FILE: templates,
        NODE_LOST_MS: '3000',
        NODE_HEARTBEAT_MS: '500',
      };
      if (backend === 'postgres') {
        schema = `berth_e_${randomBytes(6).toString('hex')}`;
        Object.assign(env, { DATABASE_URL: process.env.TEST_DATABASE_URL!, DATABASE_SCHEMA: schema });
      }
      nodeSide = await startBerth(env);
      instances.push(nodeSide);
      // Instances of one deployment share the database, the blob store (here DATA_DIR) and the master key.
      sandboxSide = backend === 'postgres' ? await startBerth(env) : nodeSide;
      if (sandboxSide !== nodeSide) instances.push(sandboxSide);

      await writeSandboxTree(sandboxDir);

      const node = await api().post('/v1/nodes', { pool: 'remote', name: 'builder' });
      expect(node.status).toBe(201);
      nodeToken = node.body.secret;
      nodeAgent = spawnNode(
        ['bin/berth.js', 'node', '--server', nodeSide.url, '--token', nodeToken, '--dir', nodeDir, '--engine', engine()],
        {},
      );
      await nodeAgent.waitFor(/online as builder/);
      const reg = await api().post('/v1/sandboxes', { name: 'laptop' });
      sandboxAgent = spawnNode(['bin/berth.js', 'agent', '--server', sandboxSide.url, '--join', reg.body.key, '--dir', sandboxDir], {});
      await sandboxAgent.waitFor(/connected to .* as sandbox laptop/);
    });

    afterAll(async () => {
      await sandboxAgent?.kill('SIGKILL');
      await nodeAgent?.kill('SIGKILL');
      for (const b of instances.reverse()) await b.kill();
      if (schema) {
        const c = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await c.end();
      }
      await rm(base, { recursive: true, force: true });
    });

    it('a lease on a hotNodes: 0 pool becomes ready on the node agent and gets the sandbox folder by its sync rules', async () => {
      const created = await api().post('/v1/environments', {
        template: 'dev',
        sandbox: 'laptop',
        snapshot: `e2e-${backend}`,
        shares: { src: 'app', out: 'results' },
        include: ['dist'],
        files: { 'src/.env': 'secrets/dev.env' },
      });
      expect(created.status).toBe(202);
      envId = created.body.environment.id;
      listen = Object.fromEntries(
        created.body.environment.exports.map((e: { service: string; listen: string }) => [e.service, Number(e.listen.split(':')[1])]),
      );
      const ready = await reaches(nodeSide.url, BOOTSTRAP, envId, 'ready');
      expect(ready.node).toBe('builder');
      const src = join(nodeDir, envId, 'workspace', 'src');
      await sandboxAgent!.waitFor(/share src: in sync/);
      expect(await readFile(join(src, 'main.txt'), 'utf8')).toBe('version 1\n');
      expect(await readFile(join(src, 'dist', 'bundle.js'), 'utf8')).toContain('included');
      expect(await readFile(join(src, '.env'), 'utf8')).toBe('TOKEN=abc\n');
      await expect(stat(join(src, 'debug.log'))).rejects.toMatchObject({ code: 'ENOENT' });

      await writeFile(join(sandboxDir, 'app', 'main.txt'), 'version 2\n');
      await vi.waitFor(async () => expect(await readFile(join(src, 'main.txt'), 'utf8')).toBe('version 2\n'), WAIT);
    });

    it("a TCP service on the node side answers through the sandbox's port", async () => {
      const payload = randomBytes(2 * 1024 * 1024);
      const back = await echoedWhole(listen.echo!, payload);
      expect(back.equals(payload)).toBe(true);
      // The tunnel dials 5432 inside the environment, where nothing listens: never this machine's PostgreSQL.
      await forwarding(sandboxAgent!, envId, 'postgres', listen.postgres!);
      const db = new pg.Client({ host: '127.0.0.1', port: listen.postgres, user: 'postgres', database: 'postgres' });
      db.on('error', () => undefined);
      await expect(db.connect()).rejects.toThrow();
    });

    it('berth exec prints a workspace file with its exit code, and the exec is in the log', async () => {
      const ran = await berthExec(sandboxSide.url, BOOTSTRAP, envId, 'cat', '/workspace/src/main.txt');
      expect(ran).toMatchObject({ code: 0, stdout: 'version 2\n' });
      const execs = (await api().get(`/v1/environments/${envId}/execs`)).body.execs;
      expect(execs.map((e: { command: string; exitCode: number }) => [e.command, e.exitCode])).toEqual([
        ['cat /workspace/src/main.txt', 0],
      ]);
    });

    it('killing and restarting the sandbox agent resumes forwarding without a join key', async () => {
      await sandboxAgent!.kill('SIGKILL');
      sandboxAgent = spawnNode(['bin/berth.js', 'agent', '--server', sandboxSide.url, '--dir', sandboxDir], {});
      await sandboxAgent.waitFor(/forwarding echo/);
      const back = await echoedWhole(listen.echo!, Buffer.from('again'));
      expect(back.toString()).toBe('again');
    });

    it('an out-share file is in the sandbox folder by the time the environment is stopped; the snapshot restores next time; the server keeps no plain byte', async () => {
      const out = join(nodeDir, envId, 'workspace', 'out');
      await writeFile(join(out, 'result.txt'), 'built on the node\n');
      const marker = `plain-${randomBytes(12).toString('hex')}`;
      await writeFile(join(out, 'marker.txt'), marker);
      expect((await api().del(`/v1/environments/${envId}`)).status).toBe(200);
      await reaches(nodeSide.url, BOOTSTRAP, envId, 'stopped');
      expect(await readFile(join(sandboxDir, 'results', 'result.txt'), 'utf8')).toBe('built on the node\n');

      const next = await api().post('/v1/environments', { template: 'dev', snapshot: `e2e-${backend}` });
      const restored = await reaches(nodeSide.url, BOOTSTRAP, next.body.environment.id, 'ready');
      expect(restored.restored).toMatchObject({ key: `e2e-${backend}` });
      expect(await readFile(join(nodeDir, restored.id, 'workspace', 'out', 'result.txt'), 'utf8')).toBe('built on the node\n');
      expect(await readFile(join(nodeDir, restored.id, 'workspace', 'src', 'main.txt'), 'utf8')).toBe('version 2\n');
      expect(await readFile(join(nodeDir, restored.id, 'workspace', 'out', 'marker.txt'), 'utf8')).toBe(marker);
      // The bytes went through the server (relayed to the sandbox, saved and restored as a snapshot)
      // and none of them is stored there in the clear: not in its blobs, not in its database files.
      expect(await filesContaining(join(base, 'data'), Buffer.from(marker))).toEqual([]);
      envId = restored.id;
    });

    it('killing the node agent fails its environments with the reason; the restarted agent removes their containers', {
      timeout: 120_000,
    }, async () => {
      expect(await containersOf(envId)).toHaveLength(1);
      await nodeAgent!.kill('SIGKILL');
      const failed = await reaches(nodeSide.url, BOOTSTRAP, envId, 'failed');
      expect(failed.error).toMatch(/^node builder was lost/);
      // The container outlived the killed agent; the restarted one finds it ended on the server.
      expect(await containersOf(envId)).toHaveLength(1);
      nodeAgent = spawnNode(
        ['bin/berth.js', 'node', '--server', nodeSide.url, '--token', nodeToken, '--dir', nodeDir, '--engine', engine()],
        {},
      );
      await nodeAgent.waitFor(/online as builder/);
      // Its container goes first, then its folder.
      await vi.waitFor(async () => expect(await containersOf(envId)).toEqual([]), WAIT);
      await vi.waitFor(() => expect(stat(join(nodeDir, envId))).rejects.toMatchObject({ code: 'ENOENT' }), WAIT);
    });
  });
}
